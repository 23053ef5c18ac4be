"""Store throughput: results written per second through the batch runner's real path, and the runs page's
summary over 100,000 results.

- write: ``BatchRunner`` (claims, group commit through ``Store.save_case_records``) over N instant cases (one
  turn each, a boolean and a numeric metric), W cases at once, a real SQLite file in a temporary folder; the cases
  are loaded as the command line and workers load them (frozen out of the garbage collector's reach). Its baseline,
  interleaved with it over ``--rounds`` rounds: the same rows (one result and one turn per case, the values as
  the runner stores them, JSON serialised inside the timing) written by the plain driver into the same tables,
  1,000 cases per transaction: ``sqlite3`` ``executemany`` (``plain_sqlite3_per_s``), and on PostgreSQL psycopg
  ``executemany`` and ``COPY``. Targets: the runner >= 0.5x plain sqlite3; on PostgreSQL (``--db-url``) the
  runner at concurrency 4 >= the SQLite runner's rate (run both and compare). ``--worker-processes N`` makes the
  runner side N worker processes draining one run together, as a shared deployment runs them (on either
  database). Also printed: the old per-result path (``Store.save_result`` once per case) on a smaller count.
- summary: a run of 100,000 results (25,000 cases x 4 repetitions, three metrics), the runs page's summary
  uncached: ``compare.run_summaries`` loading the run's metrics (``Store.metric_rows``) and summarising them.
  Target <= 1 s. Printed beside it: the full path (``Store.results`` then ``compare.summarize_metrics``) and the
  cached ``run_summaries`` on an unchanged run.

    .venv/bin/python bench/store_bench.py [--cases 20000] [--concurrency 1] [--rounds 3] [--summary-results 100000]
                                          [--db-url URL] [--worker-processes 1] [--json]

With ``--json`` the last line is ``{"results_per_s": ..., "summary_s": ...}`` (plus the other figures). With
``--db-url`` the runs go to that database instead (run ids are unique, so a shared database is left with them).
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from medeval_core.benchmark import CaseContext  # noqa: E402
from medeval_core.memory import long_lived  # noqa: E402
from medeval_core.records import (  # noqa: E402
    Case,
    CaseOutcome,
    CaseRecords,
    CaseResult,
    CaseStatus,
    RunConfig,
    utc_now,
)
from medeval_core.results.compare import clear_summary_cache, run_summaries, summarize_metrics  # noqa: E402
from medeval_core.runs.runner import BatchRunner  # noqa: E402
from medeval_core.settings import load_settings  # noqa: E402
from medeval_core.store import Store  # noqa: E402

WRITE_TARGET_RATIO = 0.5
STARTUP_S = 8.0
"""How long worker processes get to import and load their cases before the common start."""
PLAIN_BATCH = 1_000
SUMMARY_TARGET_S = 1.0


def instant_case(case: Case, ctx: CaseContext) -> CaseOutcome:
    index = int(case.case_id.rsplit("-", 1)[1])
    ctx.record_turn("bench", "answer", {"case": case.case_id})
    return CaseOutcome(output={"answer": index % 7}, metrics={"correct": index % 3 != 0, "cost": float(index % 11)})


def new_run(store: Store, tag: str, expected: int) -> str:
    run_id = f"store-bench-{tag}-{uuid.uuid4().hex[:8]}"
    store.create_run(RunConfig(benchmark="store-bench", label=tag), run_id=run_id, expected_cases=expected)
    return run_id


def loaded_runner(store: Store, n_cases: int, concurrency: int) -> tuple[BatchRunner, list[Case]]:
    """A runner and the run's cases, loaded as `medeval run` and a worker load them (service.launch with
    freeze_inputs): out of the collector's reach, with everything loaded before them."""
    with long_lived(freeze=True):
        cases = [Case(case_id=f"case-{i:06d}") for i in range(n_cases)]
    return BatchRunner(store, load_settings(), concurrency=concurrency), cases


def bench_runner(store: Store, n_cases: int, concurrency: int) -> float:
    run_id = new_run(store, "runner", n_cases)
    runner, cases = loaded_runner(store, n_cases, concurrency)
    started = time.perf_counter()
    report = runner.execute(run_id, cases, instant_case, repetitions=1)
    elapsed = time.perf_counter() - started
    if report.done != n_cases:
        raise SystemExit(f"The runner finished {report.done} of {n_cases} cases.")
    return n_cases / elapsed


def _worker_process(url: str, run_id: str, n_cases: int, concurrency: int, start: Any, finished: Any) -> None:
    """One worker process of ``bench_worker_processes``: loads the cases as a worker does, waits for the start,
    runs the run with the others and reports when its last commit is done."""
    runner, cases = loaded_runner(Store(url), n_cases, concurrency)
    start.wait()
    runner.execute(run_id, cases, instant_case, repetitions=1)
    finished.put(time.monotonic())


def bench_worker_processes(store: Store, url: str, n_cases: int, processes: int, concurrency: int) -> float:
    """``processes`` worker processes (as ``medeval worker`` runs them, several per run on a shared database) drain
    one run of ``n_cases`` together: results per second from the common start to the last one's end, their start-up
    (imports, loading the cases) left out."""
    run_id = new_run(store, f"processes-{processes}", n_cases)
    context = multiprocessing.get_context("spawn")
    start, finished = context.Event(), context.Queue()
    workers = [context.Process(target=_worker_process, args=(url, run_id, n_cases, concurrency, start, finished))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    time.sleep(STARTUP_S)
    started = time.monotonic()
    start.set()
    ends = [finished.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    stored = len(store.metric_rows(run_id))
    if stored != n_cases:
        raise SystemExit(f"{processes} worker processes stored {stored} of {n_cases} cases.")
    return n_cases / (max(ends) - started)


def plain_rows(run_id: str, n_cases: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The result and turn rows the runner writes for ``instant_case`` (JSON columns serialised here)."""
    now = utc_now()
    results, turns = [], []
    for i in range(n_cases):
        case_id = f"case-{i:06d}"
        results.append((run_id, case_id, 0, "ok", json.dumps({"answer": i % 7}),
                        json.dumps({"correct": i % 3 != 0, "cost": float(i % 11)}), "{}", None, now, now))
        turns.append((run_id, case_id, 0, 0, "bench", "answer", json.dumps({"case": case_id}), 0.0, now))
    return results, turns


RESULT_COLUMNS = "run_id, case_id, repetition, status, output, metrics, scores, error, started_at, finished_at"
TURN_COLUMNS = 'run_id, case_id, repetition, "index", actor, action, payload, cost, created_at'


def bench_plain(store: Store, url: str, n_cases: int, method: str) -> float:
    """The same rows through the plain driver: ``sqlite3``/psycopg ``executemany`` or psycopg ``COPY``."""
    run_id = new_run(store, f"plain-{method}", n_cases)
    started = time.perf_counter()
    results, turns = plain_rows(run_id, n_cases)
    if store.engine.dialect.name == "sqlite":
        lite = sqlite3.connect(make_url(url).database or "", timeout=30)
        for start in range(0, n_cases, PLAIN_BATCH):
            with lite:  # one transaction per chunk
                lite.executemany(f"INSERT INTO case_results ({RESULT_COLUMNS}) VALUES "
                                 f"({', '.join('?' * 10)})", results[start:start + PLAIN_BATCH])
                lite.executemany(f"INSERT INTO turns ({TURN_COLUMNS}) VALUES ({', '.join('?' * 9)})",
                                 turns[start:start + PLAIN_BATCH])
        lite.close()
        return n_cases / (time.perf_counter() - started)
    import psycopg

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as connection:
        for start in range(0, n_cases, PLAIN_BATCH):
            with connection.transaction(), connection.cursor() as cursor:
                chunk = {"case_results": (RESULT_COLUMNS, results[start:start + PLAIN_BATCH]),
                         "turns": (TURN_COLUMNS, turns[start:start + PLAIN_BATCH])}
                for table, (columns, rows) in chunk.items():
                    if method == "copy":
                        with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                            for row in rows:
                                copy.write_row(row)
                    else:
                        marks = ", ".join("%s" for _ in rows[0])
                        cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
    return n_cases / (time.perf_counter() - started)


def bench_save_result(store: Store, n_cases: int) -> float:
    """The previous main's path: one transaction (with its duplicate check) per result."""
    run_id = new_run(store, "save-result", n_cases)
    started = time.perf_counter()
    for i in range(n_cases):
        store.save_result(CaseResult(run_id=run_id, case_id=f"case-{i:06d}", status=CaseStatus.OK,
                                     metrics={"correct": i % 3 != 0, "cost": float(i % 11)}))
    return n_cases / (time.perf_counter() - started)


def bench_summary(store: Store, n_results: int, repetitions: int = 4) -> tuple[float, float, float]:
    """(the page's summary uncached, results() + summarize_metrics, the page's summary cached) in seconds."""
    run_id = new_run(store, "summary", n_results)
    batch = [
        CaseRecords(result=CaseResult(
            run_id=run_id, case_id=f"case-{i // repetitions:06d}", repetition=i % repetitions, status=CaseStatus.OK,
            output={"answer": i % 7}, metrics={"correct": i % 3 != 0, "cost": float(i % 11), "turns": i % 5}))
        for i in range(n_results)
    ]
    for start in range(0, n_results, 5_000):
        store.save_case_records(batch[start:start + 5_000])
    clear_summary_cache()
    started = time.perf_counter()
    summaries = run_summaries(store, run_id)
    page_s = time.perf_counter() - started
    assert {s.n for s in summaries} == {n_results // repetitions}
    started = time.perf_counter()
    results = store.results(run_id)
    full = summarize_metrics(results)
    full_s = time.perf_counter() - started
    assert len(results) == n_results and full == summaries
    started = time.perf_counter()
    run_summaries(store, run_id)
    cached_s = time.perf_counter() - started
    return page_s, full_s, cached_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000, help="cases through the runner (default 20000)")
    parser.add_argument("--concurrency", type=int, default=1, help="cases run at once")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of runner and plain driver")
    parser.add_argument("--baseline-cases", type=int, default=500,
                        help="results through the old per-result save_result path (0: skip)")
    parser.add_argument("--summary-results", type=int, default=100_000)
    parser.add_argument("--db-url", help="database to write to (default: a SQLite file in a temporary folder)")
    parser.add_argument("--worker-processes", type=int, default=1,
                        help="the runner side as this many worker processes draining each run together (default 1: "
                             "the runner in this process)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on the last line")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="medeval-store-bench-") as folder:
        url = args.db_url or f"sqlite:///{Path(folder) / 'bench.db'}"
        store = Store(url)
        plain = ["sqlite3"] if store.engine.dialect.name == "sqlite" else ["executemany", "copy"]
        sides: dict[str, Callable[[], float]] = {
            "runner": partial(bench_runner, store, args.cases, args.concurrency) if args.worker_processes == 1 else
            partial(bench_worker_processes, store, url, args.cases, args.worker_processes, args.concurrency),
            **{f"plain {method}": partial(bench_plain, store, url, args.cases, method) for method in plain}}
        rates: dict[str, list[float]] = {name: [] for name in sides}
        for round_number in range(args.rounds):
            for name in (list(sides) if round_number % 2 == 0 else list(reversed(sides))):
                rates[name].append(sides[name]())
        baseline = bench_save_result(store, args.baseline_cases) if args.baseline_cases else None
        summary_s, full_s, cached_s = bench_summary(store, args.summary_results)
        store.engine.dispose()

    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(f"writes on {store.engine.dialect.name}, {args.cases} cases per pass, {args.rounds} rounds interleaved, "
          f"runner at concurrency {args.concurrency}" + (f" in each of {args.worker_processes} worker processes"
                                                         if args.worker_processes > 1 else "")
          + f"; load average {os.getloadavg()[0]:.2f}")
    for name, values in rates.items():
        print(f"  {name:<18} median {medians[name]:9,.0f} results/s (fastest round {max(values):9,.0f}, slowest "
              f"{min(values):9,.0f})")
    reference = medians[f"plain {plain[0]}"]
    ratio = medians["runner"] / reference
    # A shared machine only ever slows a round down: the fastest rounds' ratio shows the code without that noise.
    fastest = max(rates["runner"]) / max(rates[f"plain {plain[0]}"])
    print(f"  ratio runner / plain {plain[0]}: {ratio:.2f}x of the medians (target >= {WRITE_TARGET_RATIO}x), "
          f"{fastest:.2f}x of the fastest rounds")
    if baseline is not None:
        print(f"old path (Store.save_result per result), {args.baseline_cases} results: {baseline:,.0f} results/s")
    print(f"runs page summary over {args.summary_results} results: {summary_s:.3f} s (target <= "
          f"{SUMMARY_TARGET_S} s); Store.results + summarize_metrics: {full_s:.3f} s; cached: {cached_s * 1000:.1f} ms")
    ok = ratio >= WRITE_TARGET_RATIO and summary_s <= SUMMARY_TARGET_S
    if args.json:
        print(json.dumps({"results_per_s": round(medians["runner"], 1), "ratio": round(ratio, 3),
                          "ratio_fastest_rounds": round(fastest, 3),
                          **{f"plain_{method}_per_s": round(medians[f"plain {method}"], 1) for method in plain},
                          "summary_s": round(summary_s, 4),
                          "save_result_per_s": None if baseline is None else round(baseline, 1),
                          "results_and_summarize_s": round(full_s, 4), "summary_cached_s": round(cached_s, 5),
                          "cases": args.cases, "concurrency": args.concurrency,
                          "worker_processes": args.worker_processes, "summary_results": args.summary_results,
                          "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
