"""The Batch runs page as a user meets it, timed in Chromium: opening it, and switching the selected run.

A fresh SQLite file holds 25 finished DDXPlus-shaped runs: one of 134,529 results (the DDXPlus test set: seven
metrics per case, a small output each, 0.5 % failed with an error) and 24 of 300 results; each run stores its
summary as a finished run does (headline metrics with intervals, the per-case metric summaries). The rows are
written in bulk by the driver (the bench's setup, not what is measured). A real server (``python -m medeval_core
serve``) serves the page; headless Chromium (Playwright, /usr/bin/chromium, the flags of tests/conftest.py) opens
it once to warm the server, then:

- *open*: a new tab goes to /runs; timed until the runs table and the selected (134,529-result) run's Summary are
  drawn and Streamlit's running indicator is gone;
- *switch*: the "Run" selectbox is set to a small run, then back to the large one; each timed until the new run's
  Summary caption is drawn and the running indicator is gone.

Printed: min and median over ``--tries`` of each, the targets (open <= 1 s, switch <= 0.5 s), and the load average.
With ``--baseline DIR`` (a checkout of another version, e.g. ``git worktree add /tmp/medeval-base 33dc2a2``) the
same store is served by that checkout too and measured interleaved, try by try, with the ratio.

Run: python bench/runs_page_bench.py [--tries 5] [--baseline DIR] [--screenshot tests/artifacts/runs_bench.png]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402 - the test suite's browser flags

BIG = 134_529
SMALL = 300
SMALL_RUNS = 24
FAILED_EVERY = 200
OPEN_TARGET_S, SWITCH_TARGET_S = 1.0, 0.5
METRICS = ("DDR", "DDP", "DDF1", "GTPA", "GTPA@1", "PER", "IL")


def _metrics(i: int) -> dict[str, float]:
    return {"DDR": float(i * 37 % 101), "DDP": float(i * 53 % 101), "DDF1": float(i * 29 % 101),
            "GTPA": 100.0 if i % 50 else 0.0, "GTPA@1": 100.0 if i % 4 else 0.0, "PER": float(i * 17 % 101),
            "IL": float(i % 30 + 1)}


def _insert_results(db_path: Path, run_id: str, n: int) -> None:
    """``n`` results of one run through sqlite3's executemany (the bench's setup: seconds for 134,529 rows)."""
    start = datetime(2026, 1, 1)
    rows = []
    for i in range(n):
        failed = i % FAILED_EVERY == 7
        rows.append((run_id, f"row-{i}", 0, "failed" if failed else "ok",
                     "{}" if failed else json.dumps({"index": i, "pathology": "URTI", "differential": {"URTI": 0.7},
                                                     "inquired": ["E_91"]}),
                     "{}" if failed else json.dumps(_metrics(i)), "{}",
                     "agent timed out after 30 s" if failed else None,
                     start + timedelta(seconds=i), start + timedelta(seconds=i, milliseconds=40)))
    with sqlite3.connect(db_path) as connection:
        connection.executemany(
            "INSERT INTO case_results (run_id, case_id, repetition, status, output, metrics, scores, error, "
            "started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def seed(db_path: Path) -> tuple[str, str, int]:
    """The 25 runs; returns (the large run's id, a small run's id, that small run's expected cases)."""
    from medeval_core import service
    from medeval_core.benchmark import Metric, RunCounts, RunSummary
    from medeval_core.records import RunConfig, RunStatus
    from medeval_core.store import Store

    store = Store(f"sqlite:///{db_path}")
    created = datetime(2026, 1, 2, tzinfo=UTC)
    ids = []
    for number in range(SMALL_RUNS + 1):
        big = number == SMALL_RUNS  # created last: the newest run, selected when the page opens
        n = BIG if big else SMALL + number
        run_id = "ddxplus-test-set" if big else f"ddxplus-small-{number:02d}"
        config = RunConfig(benchmark="ddxplus", label=f"kb-bayes {'test set' if big else number}",
                           params={"agent": "kb-bayes", "patients": "release_test_patients.zip"})
        store.create_run(config, run_id=run_id, expected_cases=n)
        _insert_results(db_path, run_id, n)
        case_metrics = service.case_metric_summaries(store, run_id)
        counts = store.result_counts(run_id)
        done, failed = counts.get("ok", 0), counts.get("failed", 0)
        summary = RunSummary(
            benchmark="ddxplus", title="DDXPlus", counts=RunCounts(expected=n, done=done, failed=failed, pending=0),
            headline=[Metric(name=m.metric, value=m.value, interval=(m.ci_low, m.ci_high), n=m.n,
                             denominator="completed patients", unit="number" if m.metric == "IL" else "percent",
                             role={"GTPA@1": "accuracy", "IL": "turns"}.get(m.metric)) for m in case_metrics],
            case_metrics=case_metrics)
        store.update_run(run_id, status=RunStatus.COMPLETED, summary=summary.model_dump(mode="json"),
                         created_at=created + timedelta(minutes=number), finished_at=created + timedelta(hours=1))
        ids.append((run_id, n))
    return ids[-1][0], ids[0][0], ids[0][1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(checkout: Path, db_url: str, log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    env = {**os.environ, "MEDEVAL_DB_URL": db_url, "PYTHONPATH": str(checkout)}
    process = subprocess.Popen(
        [sys.executable, "-m", "medeval_core", "serve", "--server.port", str(port), "--server.address", "127.0.0.1",
         "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=checkout, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                return url, process
        except httpx.HTTPError:
            time.sleep(0.3)
    process.kill()
    raise SystemExit(f"The server of {checkout} did not start; see {log}.")


IDLE = """() => {
  const status = document.querySelector('[data-testid="stStatusWidget"]');
  return !status || !/Running/i.test(status.innerText);
}"""


def _drawn(page: Any, text: str) -> None:
    """Wait until ``text`` is on the page and the running indicator has been gone for two checks in a row."""
    page.get_by_text(text, exact=False).first.wait_for(state="visible", timeout=600_000)
    page.wait_for_function(IDLE, timeout=600_000, polling=50)


def _new_page(browser: Any) -> tuple[Any, Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 2200})
    page = context.new_page()
    page.set_default_timeout(600_000)  # a slow baseline is measured, not abandoned
    return context, page


def measure_open(browser: Any, url: str, big_summary: str) -> float:
    context, page = _new_page(browser)
    start = time.perf_counter()
    page.goto(f"{url}/runs")
    page.get_by_test_id("stDataFrame").first.wait_for(state="visible", timeout=600_000)
    _drawn(page, big_summary)
    elapsed = time.perf_counter() - start
    context.close()
    return elapsed


def measure_switches(browser: Any, url: str, targets: list[tuple[str, str]], screenshot: Path | None) -> list[float]:
    """Open the page, then for each (option text, summary text) choose the option and time until it is drawn."""
    context, page = _new_page(browser)
    page.goto(f"{url}/runs")
    _drawn(page, targets[-1][1])
    times = []
    for option, summary_text in targets:
        page.get_by_role("combobox", name="Run", exact=True).click()
        page.get_by_role("option", name=option, exact=True).wait_for()
        start = time.perf_counter()
        page.get_by_role("option", name=option, exact=True).click()
        _drawn(page, summary_text)
        times.append(time.perf_counter() - start)
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot), full_page=True)
    context.close()
    return times


def _figures(values: list[float]) -> str:
    return f"min {min(values):.3f} s, median {statistics.median(values):.3f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="a checkout of another version, measured interleaved")
    parser.add_argument("--screenshot", type=Path, help="a full-page screenshot after the switches (this checkout)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="runs-page-bench-") as folder:
        db_path = Path(folder) / "medeval.db"
        started = time.perf_counter()
        big, small, small_n = seed(db_path)
        print(f"store: 25 runs, {BIG:,} + {SMALL_RUNS} x ~{SMALL} results, built in "
              f"{time.perf_counter() - started:.1f} s")
        sides = {"this checkout": ROOT}
        if args.baseline is not None:
            sides["baseline"] = args.baseline.resolve()
        servers = {name: serve(checkout, f"sqlite:///{db_path}", Path(folder) / f"{i}.log")
                   for i, (name, checkout) in enumerate(sides.items())}
        big_summary = f"expected {BIG}, done"
        small_summary = f"expected {small_n}, done"
        targets = [(f"kb-bayes 0 ({small})", small_summary), (f"kb-bayes test set ({big})", big_summary)]
        opens: dict[str, list[float]] = {name: [] for name in sides}
        switches: dict[str, list[float]] = {name: [] for name in sides}
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                for url, _process in servers.values():
                    measure_open(browser, url, big_summary)  # warm: the server's first run imports the pages
                for attempt in range(args.tries):
                    for name, (url, _) in servers.items():  # interleaved, try by try
                        opens[name].append(measure_open(browser, url, big_summary))
                        shot = args.screenshot if name == "this checkout" and attempt == args.tries - 1 else None
                        switches[name].extend(measure_switches(browser, url, targets, shot))
                browser.close()
        finally:
            for _, process in servers.values():
                process.terminate()
                process.wait(timeout=30)
    print(f"Batch runs page in Chromium, {args.tries} tries (load average {os.getloadavg()[0]:.2f}):")
    for name in sides:
        print(f"  {name:<14} open {_figures(opens[name])}; switch run {_figures(switches[name])}")
    mine_open, mine_switch = statistics.median(opens["this checkout"]), statistics.median(switches["this checkout"])
    if "baseline" in sides:
        print(f"  ratio baseline / this checkout (medians): open "
              f"{statistics.median(opens['baseline']) / mine_open:.1f}x, switch "
              f"{statistics.median(switches['baseline']) / mine_switch:.1f}x")
    print(f"targets: open <= {OPEN_TARGET_S} s {'met' if mine_open <= OPEN_TARGET_S else 'MISSED'}, switch <= "
          f"{SWITCH_TARGET_S} s {'met' if mine_switch <= SWITCH_TARGET_S else 'MISSED'} (medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
