import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from medeval_core.benchmark import CaseContext
from medeval_core.records import Case, CaseOutcome, CaseStatus, RunConfig, RunStatus
from medeval_core.runs.runner import BatchRunner, CaseFunction, Progress, RunReport
from medeval_core.settings import load_settings
from medeval_core.store import Store
from tests.support.counting_benchmark import make_cases

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def store(db_url: str) -> Store:
    """A store on SQLite and on PostgreSQL (``tests/db_support.py``)."""
    return Store(db_url)


def runner(store: Store, concurrency: int = 1, **options: Any) -> BatchRunner:
    return BatchRunner(store, load_settings(), concurrency=concurrency, **options)


def start(batch: BatchRunner, cases: list[Case], run_case: CaseFunction, run_id: str = "r",
          repetitions: int = 1) -> RunReport:
    batch.store.create_run(RunConfig(benchmark="t", repetitions=repetitions), run_id=run_id,
                           expected_cases=len(cases) * repetitions)
    return batch.execute(run_id, cases, run_case, repetitions)


def sleeping_scorer(sleep_s: float) -> CaseFunction:
    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        time.sleep(sleep_s)
        return CaseOutcome(metrics={"repetition": ctx.repetition})

    return run_case


def test_runs_every_case_once_with_n_concurrent_workers(store: Store) -> None:
    active, peak, lock = 0, 0, threading.Lock()

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
        return CaseOutcome(metrics={"id": case.case_id})

    report = start(runner(store, 4), make_cases(20), run_case)
    assert report.status == RunStatus.COMPLETED and (report.done, report.failed, report.pending) == (20, 0, 0)
    assert peak == 4
    assert sorted(r.case_id for r in store.results("r")) == [c.case_id for c in make_cases(20)]
    assert store.get_run("r").status == RunStatus.COMPLETED


def test_a_raising_case_is_stored_as_failed_with_its_message_never_as_a_score(store: Store) -> None:
    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        if case.case_id == "case-0002":
            raise ValueError("image is truncated")
        return CaseOutcome(metrics={"correct": True})

    report = start(runner(store, 2), make_cases(5), run_case)
    assert (report.done, report.failed) == (4, 1)
    [failed] = store.results("r", status=CaseStatus.FAILED)
    assert failed.case_id == "case-0002" and failed.metrics == {}
    assert "ValueError: image is truncated" in failed.error


def test_resume_skips_finished_cases_and_retries_failed_ones(store: Store) -> None:
    calls: list[str] = []
    broken = {"case-0001"}

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        calls.append(case.case_id)
        if case.case_id in broken:
            raise RuntimeError("endpoint down")
        return CaseOutcome(metrics={"ok": 1})

    batch = runner(store, 1)
    start(batch, make_cases(4), run_case)
    broken.clear()
    calls.clear()
    report = batch.execute("r", make_cases(4), run_case, 1)
    assert calls == ["case-0001"]
    assert (report.done, report.failed, report.pending) == (4, 0, 0)
    assert len(store.results("r")) == 4


def test_cancel_stops_cleanly_keeping_in_flight_cases_and_resume_finishes(store: Store) -> None:
    progress: list[Progress] = []
    batch = runner(store, 2, on_progress=progress.append, cancel_poll_seconds=0.05)

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        if case.case_id == "case-0003":
            batch.cancel()
        time.sleep(0.02)
        return CaseOutcome(metrics={"ok": 1})

    report = start(batch, make_cases(30), run_case)
    assert report.status == RunStatus.CANCELLED
    assert 4 <= report.done < 30 and report.pending == 30 - report.done
    assert store.get_run("r").status == RunStatus.CANCELLED
    assert len(store.results("r")) == report.done  # every case that ran was saved

    final = runner(store, 2).execute("r", make_cases(30), sleeping_scorer(0), 1)
    assert (final.status, final.done) == (RunStatus.COMPLETED, 30)


def test_cancel_requested_through_the_store_from_another_process(store: Store) -> None:
    batch = runner(store, 1, cancel_poll_seconds=0.01)

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        if case.case_id == "case-0002":
            Store(store.url).request_cancel("r")
        time.sleep(0.005)  # slower than the poll interval, so the request is seen mid-run
        return CaseOutcome()

    report = start(batch, make_cases(50), run_case)
    assert report.status == RunStatus.CANCELLED and report.done < 50


def test_progress_events_count_done_failed_pending_rate_and_eta(store: Store) -> None:
    events: list[Progress] = []

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        time.sleep(0.01)
        if case.case_id.endswith("3"):
            raise KeyError("missing field")
        return CaseOutcome()

    # Committing each case as it finishes (no grouping window) gives one progress event per case.
    start(runner(store, 1, on_progress=events.append, commit_interval_s=0.0), make_cases(6), run_case)
    first, last = events[0], events[-1]
    assert (first.done, first.failed, first.pending) == (0, 0, 6)
    assert (last.done, last.failed, last.pending) == (5, 1, 0)
    assert all(e.done + e.failed + e.pending == 6 for e in events)
    middle = events[3]
    assert middle.rate_per_s > 0 and middle.eta_s is not None and middle.eta_s > 0
    assert "missing field" in last.last_error


def test_repetitions_are_separate_results(store: Store) -> None:
    report = start(runner(store, 2), make_cases(2), sleeping_scorer(0), repetitions=3)
    assert report.done == 6
    assert sorted((r.case_id, r.repetition) for r in store.results("r")) == [
        (f"case-000{i}", rep) for i in range(2) for rep in range(3)
    ]


def test_sigkill_mid_run_then_resume_gives_exactly_one_result_per_case(isolated_store: str) -> None:
    n_cases = 40
    command = [sys.executable, "-m", "tests.support.counting_benchmark", isolated_store, "killme", str(n_cases), "0.05"]
    process = subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    store = Store(isolated_store)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if store.find_run("killme") is not None and len(store.results("killme")) >= 8:
            break
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = {r.case_id: r.finished_at for r in store.results("killme")}
    assert 8 <= len(before) < n_cases, "the kill must land mid-run"
    assert store.get_run("killme").status == RunStatus.RUNNING  # killed: nobody could mark it

    subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True, timeout=120)

    after = store.results("killme")
    assert len(after) == n_cases
    assert len({(r.case_id, r.repetition) for r in after}) == n_cases
    assert all(r.status == CaseStatus.OK for r in after)
    assert {r.case_id: r.finished_at for r in after if r.case_id in before} == before  # nothing redone
    assert store.get_run("killme").status == RunStatus.COMPLETED
