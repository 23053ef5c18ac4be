"""The runs page's summary of a run of 100,000 results against the same summary from every result read back
whole, interleaved; beside them, the SQL GROUP BY that would add the metrics up in the database instead.

The run: 25,000 cases x 4 repetitions with the metrics of ``bench/store_bench.py`` (``correct`` a boolean, ``cost``
a float holding whole numbers, ``turns`` an integer). Figure: ``compare.run_summaries`` uncached (its cache
cleared before each run): ``Store.metric_rows`` (the metrics column only, decoded in one call) and the numpy
reduction. Baseline: ``Store.results`` (every column of every result) then ``compare.summarize_metrics``. Both
must give the same summaries. Target: the figure's median <= 0.5 s.
Reference (``--sql``): the query alone (no summary made from it) that would count and add up each metric per case
in the database (``json_each`` / ``json_typeof`` and GROUP BY; the per-case totals are what the summary needs:
the mean over cases, Wilson and the bootstrap are over per-case means). On both SQLite and PostgreSQL it costs
more than the whole figure, since the database's JSON functions parse the stored JSON more slowly than Python's
decoder does, so the summary does not use it.

    .venv/bin/python bench/summary_bench.py [--results 100000] [--runs 5] [--sql] [--db-url URL]

With ``--db-url`` (e.g. PostgreSQL) the run goes to that database (run ids are unique; the run is left there).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import interleaved, print_comparison  # noqa: E402

from medeval_core.records import CaseRecords, CaseResult, CaseStatus, RunConfig  # noqa: E402
from medeval_core.results.compare import clear_summary_cache, run_summaries, summarize_metrics  # noqa: E402
from medeval_core.store import Store  # noqa: E402

TARGET_S = 0.5
REPETITIONS = 4
# Per metric and case: the count and sum of its numbers (booleans as 0/1), whether all are booleans, whether all
# are whole (then the sums are exact in any order, as the summary's must be to match the full read).
TOTALS_SQL = {
    "sqlite": """
        SELECT j.key, r.case_id, COUNT(*), SUM(CASE j.type WHEN 'true' THEN 1 WHEN 'false' THEN 0 ELSE j.value END),
               MIN(j.type IN ('true', 'false')),
               MIN(COALESCE(j.type <> 'real' OR j.value = CAST(j.value AS INTEGER), 0))
        FROM case_results r, json_each(r.metrics) j
        WHERE r.run_id = :run_id AND r.status = 'ok' AND j.type IN ('true', 'false', 'integer', 'real')
        GROUP BY j.key, r.case_id""",
    "postgresql": """
        SELECT j.key, r.case_id, COUNT(*),
               SUM(CASE WHEN json_typeof(j.value) = 'boolean' THEN (j.value::text = 'true')::int
                        ELSE (j.value::text)::numeric END),
               BOOL_AND(json_typeof(j.value) = 'boolean'),
               BOOL_AND(json_typeof(j.value) = 'boolean'
                        OR (j.value::text)::numeric = trunc((j.value::text)::numeric))
        FROM case_results r, json_each(r.metrics) j
        WHERE r.run_id = :run_id AND r.status = 'ok' AND json_typeof(j.value) IN ('boolean', 'number')
        GROUP BY j.key, r.case_id""",
}


def seed_run(store: Store, n_results: int) -> str:
    run_id = f"summary-bench-{uuid.uuid4().hex[:8]}"
    store.create_run(RunConfig(benchmark="bench"), run_id=run_id)
    for start in range(0, n_results, 5_000):
        store.save_case_records([CaseRecords(result=CaseResult(
            run_id=run_id, case_id=f"case-{i // REPETITIONS:06d}", repetition=i % REPETITIONS, status=CaseStatus.OK,
            output={"answer": i % 7}, metrics={"correct": i % 3 != 0, "cost": float(i % 11), "turns": i % 5}))
            for i in range(start, min(start + 5_000, n_results))])
    return run_id


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5, help="runs of each side, interleaved")
    parser.add_argument("--sql", action="store_true", help="also time the SQL GROUP BY totals query, interleaved")
    parser.add_argument("--db-url", help="database to use (default: a SQLite file in a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="medeval-summary-bench-") as folder:
        store = Store(args.db_url or f"sqlite:///{Path(folder) / 'bench.db'}")
        dialect = store.engine.dialect.name
        run_id = seed_run(store, args.results)

        def page_summary() -> list:
            clear_summary_cache()
            return run_summaries(store, run_id)

        def sql_totals() -> int:
            with store.engine.connect() as connection:
                return len(connection.execute(text(TOTALS_SQL[dialect]), {"run_id": run_id}).all())

        sides: dict[str, Callable[[], Any]] = {"page": page_summary,
                                              "full": lambda: summarize_metrics(store.results(run_id))}
        if args.sql:
            sides["sql"] = sql_totals
        timings = interleaved(sides, args.runs)
        if timings["page"].result != timings["full"].result:
            raise SystemExit("the runs page's summary differs from the one over the full results")
        store.engine.dispose()
    metrics = ", ".join(summary.metric for summary in timings["page"].result)
    print_comparison(f"summary of {args.results:,} results on {dialect} ({metrics})",
                     ("run_summaries (metric_rows)", timings["page"]),
                     ("results + summarize_metrics", timings["full"]))
    print("both give the same summaries")
    if args.sql:
        sql = timings["sql"]
        print(f"  SQL GROUP BY totals, the query alone ({sql.result:,} rows): min {sql.min:.3f} s, median "
              f"{sql.median:.3f} s ({sql.median / timings['page'].median:.2f}x the figure)")
    met = timings["page"].median <= TARGET_S
    print(f"target median <= {TARGET_S} s: {'met' if met else 'MISSED'} ({timings['page'].median:.3f} s)")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
