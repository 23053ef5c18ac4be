"""The batch-runs page (pages/runs.py) on a run of 10,000 results: its first run and its warm rerun.

A fresh SQLite file holds one run of N results (default 10,000: 2,500 cases x 4 repetitions, three metrics, a
small output each, 2 % failed with an error); ``--runs 2`` adds a second run on the same cases, so the page's
"Compare two runs" section compares them too. The page is driven by Streamlit's ``AppTest`` in a child process:
its first run (the process is cold: imports, database pages, summaries computed) and then the same session's
reruns (what every widget click or the 2 s progress refresh costs). Wall and CPU time of the process, the best
of the reruns, and of the first runs over ``--processes`` children.

With ``--baseline DIR`` (a checkout of another version, e.g. ``git worktree add /tmp/medeval-base 6a1c789``) the
same is measured there, side by side: the child runs with ``PYTHONPATH=DIR`` and drives ``DIR/pages/runs.py``
against a database of the same content created by that checkout's own store code (rows inserted through its
``CaseResultRow`` model in one transaction), and the ratio baseline / this checkout is printed.
Target: the warm rerun <= 1 s.

Run: python bench/runs_page_bench.py [--results 10000] [--runs 1] [--reruns 5] [--processes 2] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 1.0
REPETITIONS = 4
FAILED_EVERY = 50  # 2 % of the results failed


def _seed(db_url: str, n_results: int, n_runs: int) -> list[str]:
    """Runs of ``n_results`` results each, written by whichever checkout's ``medeval_core`` is importable."""
    from medeval_core.records import RunConfig
    from medeval_core.store import CaseResultRow, Store

    store = Store(db_url)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    run_ids = []
    for r in range(n_runs):
        run_id = f"bench-run-{r}"
        store.create_run(RunConfig(benchmark="bench", label=f"model {r}"), run_id=run_id,
                         expected_cases=n_results)
        rows = []
        for i in range(n_results):
            case, repetition = f"case-{i // REPETITIONS:06d}", i % REPETITIONS
            failed = (i + r) % FAILED_EVERY == 0
            rows.append(CaseResultRow(
                run_id=run_id, case_id=case, repetition=repetition, status="failed" if failed else "ok",
                output={} if failed else {"answer": f"diagnosis {(i + r) % 17}", "differential": [i % 5, i % 7]},
                metrics={} if failed else {"correct": (i + r) % 3 != 0, "score": ((i * 7 + r) % 100) / 100,
                                           "turns": (i + r) % 12},
                error=f"timeout after 30 s (attempt {i % 3 + 1})" if failed else None,
                started_at=start + timedelta(seconds=i), finished_at=start + timedelta(seconds=i, milliseconds=800),
            ))
        with store.session() as session:
            session.add_all(rows)
            session.commit()
        run_ids.append(run_id)
    return run_ids


def _timed(call: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def child(checkout: Path, n_results: int, n_runs: int, reruns: int) -> dict[str, Any]:
    """One process: seed a database, then the page's first run and ``reruns`` reruns of the same session."""
    with tempfile.TemporaryDirectory(prefix="runs-page-bench-") as folder:
        db_url = f"sqlite:///{Path(folder) / 'medeval.db'}"
        os.environ["MEDEVAL_DB_URL"] = db_url
        _seed(db_url, n_results, n_runs)

        from streamlit.testing.v1 import AppTest

        app = AppTest.from_file(str(checkout / "pages" / "runs.py"), default_timeout=600)

        def run() -> None:
            app.run()
            if app.exception:
                raise SystemExit(f"The page raised: {app.exception}")

        first = _timed(run)
        again = [_timed(run) for _ in range(reruns)]
        headers = [s.value for s in app.subheader]
        failed = next((h for h in headers if h.startswith("Failed cases")), None)
        return {"first_wall_s": first[0], "first_cpu_s": first[1],
                "rerun_wall_s": min(w for w, _ in again), "rerun_cpu_s": min(c for _, c in again),
                "failed_header": failed, "tables": len(app.table)}


def _side(checkout: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    samples = []
    for _ in range(args.processes):
        result = subprocess.run(
            [sys.executable, __file__, "--child", str(checkout), "--results", str(args.results), "--runs",
             str(args.runs), "--reruns", str(args.reruns)],
            cwd=checkout, env=env, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            raise SystemExit(f"{checkout}: the page bench failed:\n{result.stderr[-3000:]}")
        samples.append(json.loads(result.stdout.strip().splitlines()[-1]))
    best = {key: min(s[key] for s in samples) for key in ("first_wall_s", "first_cpu_s", "rerun_wall_s",
                                                           "rerun_cpu_s")}
    return {**best, "failed_header": samples[0]["failed_header"], "tables": samples[0]["tables"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--results", type=int, default=10_000, help="results per run (default 10,000)")
    parser.add_argument("--runs", type=int, default=1, choices=(1, 2), help="1, or 2 to show a comparison too")
    parser.add_argument("--reruns", type=int, default=5, help="warm reruns per process; the best is kept")
    parser.add_argument("--processes", type=int, default=2, help="child processes per side; the best is kept")
    parser.add_argument("--baseline", type=Path, help="a checkout of another version, measured alongside")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.results, args.runs, args.reruns)))
        return 0

    sides = {"this checkout": ROOT}
    if args.baseline is not None:
        sides[f"baseline {args.baseline}"] = args.baseline.resolve()
    figures = {name: _side(checkout, args) for name, checkout in sides.items()}
    print(f"pages/runs.py, {args.runs} run(s) of {args.results:,} results, AppTest; best of {args.reruns} reruns "
          f"x {args.processes} processes")
    for name, f in figures.items():
        print(f"  {name:<32} first run {f['first_wall_s']:.3f} s wall / {f['first_cpu_s']:.3f} s CPU; "
              f"rerun {f['rerun_wall_s']:.3f} s wall / {f['rerun_cpu_s']:.3f} s CPU  ({f['failed_header']})")
    mine = figures["this checkout"]
    for name, f in figures.items():
        if name != "this checkout":
            print(f"  ratio {name} / this checkout: first run {f['first_wall_s'] / mine['first_wall_s']:.1f}x, "
                  f"rerun {f['rerun_wall_s'] / mine['rerun_wall_s']:.1f}x (wall); "
                  f"rerun {f['rerun_cpu_s'] / mine['rerun_cpu_s']:.1f}x (CPU)")
    ok = mine["rerun_wall_s"] <= TARGET_S
    print(f"target rerun <= {TARGET_S} s: {'met' if ok else 'MISSED'} ({mine['rerun_wall_s']:.3f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
