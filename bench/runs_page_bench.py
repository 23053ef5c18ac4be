"""The Batch runs page as a user meets it, timed in Chromium: opening it, and switching the selected run, against a
bare Streamlit page measured the same way in the same run.

A fresh SQLite file holds 25 finished DDXPlus-shaped runs: one of 134,529 results (the DDXPlus test set: seven
metrics per case, a small output each, 0.5 % failed with an error, and each finished case's questions as turns:
1.95 million) and 24 of about 300 results; each run stores its summary as a finished run does (headline metrics
with intervals, the per-case metric summaries). The rows are written in bulk by the driver (the bench's setup,
not what is measured). A real server (``python -m medeval_core serve``) serves the page.

The like-for-like baseline is a bare Streamlit app (``streamlit run``, the same server options and
``.streamlit/config.toml``, the same Chromium) serving one page at the same URL, ``/runs``: a title, an
``st.dataframe`` of the 25 runs, a "Run" selectbox, the selected run's summary caption and a few ``st.metric``. It
is what any Streamlit page costs here (JavaScript bundle, websocket, one script run, the data grid's code), so the
ratio says what the page adds to Streamlit itself. Headless Chromium (Playwright, /usr/bin/chromium, the flags of
tests/conftest.py) opens each server once to warm it (the process's first run imports the pages), then, try by try
and server by server (interleaved):

- *open*: a new tab in a new browser profile (a first visit: every front-end file is fetched) goes to /runs;
  timed until it is *usable*: the runs table (``stDataFrame``) and the selected (134,529-result) run's Summary
  caption are visible and ``[data-testid="stApp"]`` has ``data-test-script-state="notRunning"`` (the script run is
  over: no running indicator);
- *reopen*: the same in a new tab of a profile that has opened the app before (the front end's files come from the
  browser's cache, as for a clinician who opens the page again);
- *switch*: the "Run" selectbox is set to a small run, then back to the large one; each timed until the new run's
  Summary caption is visible and the script run is over.

Printed: min and median over ``--tries`` of each side, the ratio page / bare (medians), the targets (open <= 1 s,
switch <= 0.5 s) and the load average before and after. With ``--baseline DIR`` (a checkout of another version,
e.g. ``git archive 1dfe1d8 | tar -x -C /tmp/medeval-base``) the same store (a copy taken down to that checkout's
schema revision when it is older) is served by that checkout too, measured in the same interleaving, with the ratio
baseline / this checkout.

Run: python bench/runs_page_bench.py [--tries 5] [--baseline DIR] [--screenshot tests/artifacts/runs_bench.png]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from medeval_core.benchmark import MetricRole  # noqa: E402
from tests.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402 - the test suite's browser flags

BIG = 134_529
SMALL = 300
SMALL_RUNS = 24
FAILED_EVERY = 200
OPEN_TARGET_S, SWITCH_TARGET_S = 1.0, 0.5
PAGE, BARE, CHECKOUT = "medeval runs page", "bare Streamlit page", "baseline checkout"
ROLES: dict[str, MetricRole] = {"GTPA@1": "accuracy", "IL": "turns"}
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
        connection.executemany(
            'INSERT INTO turns (run_id, case_id, repetition, "index", actor, action, payload, cost, created_at) '
            "VALUES (?, ?, 0, ?, 'agent', 'question', ?, 0, ?)", _turns(run_id, n, start))


def _turns(run_id: str, n: int, start: datetime) -> Iterator[tuple[str, str, int, str, datetime]]:
    """Each finished case's questions as a DDXPlus run stores them, one turn each (IL - 1 of them: about 14.5 a
    case, 1.95 million for the large run)."""
    for i in range(n):
        if i % FAILED_EVERY != 7:
            for index in range(int(_metrics(i)["IL"]) - 1):
                yield (run_id, f"row-{i}", index, '{"evidence": "E_91", "answer": "yes"}',
                       start + timedelta(seconds=i, milliseconds=index))


def seed(db_path: Path) -> dict[str, tuple[str, int]]:
    """The 25 runs; returns each run's label and expected cases by id, newest (the large run, selected when the page
    opens) first."""
    from medeval_core.benchmark import Metric, RunCounts, RunSummary
    from medeval_core.records import RunConfig, RunStatus
    from medeval_core.runs import service
    from medeval_core.store import Store

    store = Store(f"sqlite:///{db_path}")
    created = datetime(2026, 1, 2, tzinfo=UTC)
    runs: dict[str, tuple[str, int]] = {}
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
                             role=ROLES.get(m.metric)) for m in case_metrics],
            case_metrics=case_metrics)
        store.update_run(run_id, status=RunStatus.COMPLETED, summary=summary.model_dump(mode="json"),
                         created_at=created + timedelta(minutes=number), finished_at=created + timedelta(hours=1))
        runs[run_id] = (config.label, n)
    return dict(reversed(runs.items()))


def store_at_revision_of(checkout: Path, db_path: Path) -> str:
    """The store for another checkout: the same file when it has this checkout's schema revision, else a copy taken
    down to that checkout's head (this checkout's migrations know the way down; an older checkout refuses a store
    at a revision it does not know)."""
    from alembic import command

    from medeval_core.store.migrations import HEAD, alembic_config

    theirs = re.search(r'^HEAD = "([^"]+)"', (checkout / "medeval_core/store/migrations/__init__.py").read_text(),
                       re.MULTILINE)
    if theirs is None or theirs.group(1) == HEAD:
        return f"sqlite:///{db_path}"
    copy = db_path.with_name(f"{theirs.group(1)}.db")
    shutil.copyfile(db_path, copy)
    command.downgrade(alembic_config(url=f"sqlite:///{copy}"), theirs.group(1))
    return f"sqlite:///{copy}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


BARE_APP = """
import pandas as pd
import streamlit as st

RUNS = {RUNS!r}


def runs_page() -> None:
    st.title("Batch runs")
    st.dataframe(pd.DataFrame([{{"run": label, "status": "completed", "benchmark": "ddxplus", "cases": n, "id": run_id}}
                               for run_id, (label, n) in RUNS.items()]), hide_index=True, width="stretch")
    selected = st.selectbox("Run", list(RUNS), format_func=lambda i: f"{{RUNS[i][0]}} ({{i}})")
    label, n = RUNS[selected]
    st.subheader("Summary")
    st.caption(f"DDXPlus: expected {{n}}, done {{n}}, failed 0, pending 0")
    left, middle, right = st.columns(3)
    left.metric("GTPA@1", "75.0 %")
    middle.metric("DDF1", "50.1")
    right.metric("IL", "15.5")


def home_page() -> None:
    st.title("Home")


st.set_page_config(page_title="bare", layout="wide")
# The default page is served at /, so /runs needs a page of its own, as in the app.
st.navigation([st.Page(home_page, title="Home", default=True),
               st.Page(runs_page, title="Batch runs", url_path="runs")], position="hidden").run()
"""
"""The like-for-like baseline: the page's first screen (table, selectbox, summary) at /runs."""

STREAMLIT_OPTIONS = ("--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats",
                     "false")


def serve(checkout: Path, db_url: str, log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """The medeval app of ``checkout`` on the store."""
    env = {**os.environ, "MEDEVAL_DB_URL": db_url, "PYTHONPATH": str(checkout)}
    return _start([sys.executable, "-m", "medeval_core", "serve"], checkout, env, log)


def serve_bare(folder: Path, runs: dict[str, tuple[str, int]], log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """The bare Streamlit page, run from this checkout's root so that it reads the same ``.streamlit/config.toml``."""
    script = folder / "bare_runs_app.py"
    script.write_text(BARE_APP.format(RUNS=runs))
    return _start([sys.executable, "-m", "streamlit", "run", str(script)], ROOT, dict(os.environ), log)


def _start(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    process = subprocess.Popen([*command, "--server.port", str(port), *STREAMLIT_OPTIONS],
                               cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                return url, process
        except httpx.HTTPError:
            time.sleep(0.3)
    process.kill()
    raise SystemExit(f"The server {' '.join(command)} did not start; see {log}.")


SCRIPT_OVER = '[data-testid="stApp"][data-test-script-state="notRunning"]'
"""Streamlit's own mark that the script run (and with it the running indicator) is over."""


def _drawn(page: Any, text: str) -> None:
    """Wait until ``text`` is visible and the script run that drew it is over."""
    page.get_by_text(text, exact=False).first.wait_for(state="visible", timeout=600_000)
    page.locator(SCRIPT_OVER).wait_for(state="attached", timeout=600_000)


def _new_page(browser: Any) -> tuple[Any, Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 2200})
    page = context.new_page()
    page.set_default_timeout(600_000)  # a slow baseline is measured, not abandoned
    return context, page


def measure_open(browser: Any, url: str, big_summary: str, visited: Any = None) -> float:
    """Seconds from opening the page in a new tab to usable: in a new browser profile (the first visit: every
    file of Streamlit's front end is fetched), or in ``visited``, a profile that opened the app before (its
    files come from the browser's cache, as for a clinician who reopens the page)."""
    context, page = _new_page(browser) if visited is None else (None, visited.new_page())
    start = time.perf_counter()
    page.goto(f"{url}/runs")
    page.get_by_test_id("stDataFrame").first.wait_for(state="visible", timeout=600_000)
    _drawn(page, big_summary)
    elapsed = time.perf_counter() - start
    page.close()
    if context is not None:
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

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="runs-page-bench-") as folder:
        db_path = Path(folder) / "medeval.db"
        started = time.perf_counter()
        runs = seed(db_path)
        print(f"store: 25 runs, {BIG:,} + {SMALL_RUNS} x ~{SMALL} results with their turns, built in "
              f"{time.perf_counter() - started:.1f} s")
        db_url = f"sqlite:///{db_path}"
        servers = {PAGE: serve(ROOT, db_url, Path(folder) / "page.log"),
                   BARE: serve_bare(Path(folder), runs, Path(folder) / "bare.log")}
        if args.baseline is not None:
            baseline_url = store_at_revision_of(args.baseline.resolve(), db_path)
            servers[CHECKOUT] = serve(args.baseline.resolve(), baseline_url, Path(folder) / "baseline.log")
        (big, (big_label, _)), (small, (small_label, small_n)) = list(runs.items())[:2]
        big_summary = f"expected {BIG}, done"
        targets = [(f"{small_label} ({small})", f"expected {small_n}, done"), (f"{big_label} ({big})", big_summary)]
        opens: dict[str, list[float]] = {name: [] for name in servers}
        reopens: dict[str, list[float]] = {name: [] for name in servers}
        switches: dict[str, list[float]] = {name: [] for name in servers}
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                profiles = {}
                for name, (url, _process) in servers.items():
                    measure_open(browser, url, big_summary)  # warm: the server's first run imports the pages
                    profiles[name] = _new_page(browser)[0]
                    measure_open(browser, url, big_summary, visited=profiles[name])  # fills its cache
                for attempt in range(args.tries):
                    for name, (url, _) in servers.items():  # interleaved, try by try
                        opens[name].append(measure_open(browser, url, big_summary))
                        reopens[name].append(measure_open(browser, url, big_summary, visited=profiles[name]))
                        shot = args.screenshot if name == PAGE and attempt == args.tries - 1 else None
                        switches[name].extend(measure_switches(browser, url, targets, shot))
                browser.close()
        finally:
            for _, process in servers.values():
                process.terminate()
                process.wait(timeout=30)
    print(f"Batch runs page in Chromium, {args.tries} tries, interleaved (load average before "
          f"{' '.join(f'{x:.2f}' for x in load_before)}, after {' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for name in servers:
        print(f"  {name:<24} open {_figures(opens[name])}; reopen {_figures(reopens[name])}; "
              f"switch run {_figures(switches[name])}")
    page_open, page_switch = statistics.median(opens[PAGE]), statistics.median(switches[PAGE])
    print(f"  ratio page / bare Streamlit (medians): open {page_open / statistics.median(opens[BARE]):.2f}x, "
          f"reopen {statistics.median(reopens[PAGE]) / statistics.median(reopens[BARE]):.2f}x, "
          f"switch {page_switch / statistics.median(switches[BARE]):.2f}x")
    if CHECKOUT in servers:
        print(f"  ratio baseline checkout / page (medians): open "
              f"{statistics.median(opens[CHECKOUT]) / page_open:.2f}x, "
              f"switch {statistics.median(switches[CHECKOUT]) / page_switch:.2f}x")
    print(f"targets: open <= {OPEN_TARGET_S} s {'met' if page_open <= OPEN_TARGET_S else 'MISSED'}, switch <= "
          f"{SWITCH_TARGET_S} s {'met' if page_switch <= SWITCH_TARGET_S else 'MISSED'} (medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
