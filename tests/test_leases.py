"""Case claims and workers, on SQLite and PostgreSQL: claims expire, heartbeats keep them, expired ones are taken
over; concurrent claims never overlap; worker processes (detached, several at once, one SIGKILLed) leave exactly
one result per case; a run whose workers died shows as interrupted and resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from medeval_core.benchmark import CaseContext
from medeval_core.records import (
    Case,
    CaseOutcome,
    CaseRecords,
    CaseResult,
    CaseStatus,
    RunConfig,
    RunStatus,
    utc_now,
)
from medeval_core.runs import service, workers
from medeval_core.runs.runner import BatchRunner
from medeval_core.settings import load_settings
from medeval_core.store import QueueKeys, RunWorkerRow, Store, open_store
from medeval_core.store import leases as store_module
from tests.support.counting_benchmark import CountingParams, make_cases

REPO = Path(__file__).resolve().parent.parent
COUNTING = "tests.support.counting_benchmark"


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", COUNTING)
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def a_worker(run_id: str, name: str, lease_s: float = 30.0) -> RunWorkerRow:
    now = utc_now()
    return RunWorkerRow(id=name, run_id=run_id, host="test", pid=os.getpid(), started_at=now, heartbeat_at=now,
                        expires_at=now + timedelta(seconds=lease_s))


def queued_run(store: Store, n: int, run_id: str = "r", group_size: int | None = None,
               repetitions: int = 1) -> QueueKeys:
    """A run whose wave (``n`` cases, consecutive groups of ``group_size``) was started by a worker "starter"."""
    store.create_run(RunConfig(benchmark="t"), run_id=run_id, expected_cases=n * repetitions)
    keys = QueueKeys([case.case_id for case in make_cases(n)], repetitions,
                     (lambda case_id: int(case_id.split("-")[1]) // group_size) if group_size else None)
    assert store.join_run(run_id, a_worker(run_id, "starter"), keys, {"status": RunStatus.RUNNING})
    return keys


def test_a_claim_expires_a_heartbeat_keeps_it_and_an_expired_one_is_taken_over(db_url: str) -> None:
    store = Store(db_url)
    keys = queued_run(store, 6)
    first = store.claim_cases("r", "a", keys, 2, lease_s=0.4)
    kept = store.claim_cases("r", "b", keys, 2, lease_s=0.4)
    assert [c for _, c, _ in first] == ["case-0000", "case-0001"]  # queue order
    assert [c for _, c, _ in kept] == ["case-0002", "case-0003"]
    assert {c for _, c, _ in store.claim_cases("r", "c", keys, 10, lease_s=30)} == {"case-0004", "case-0005"}
    time.sleep(0.25)
    store.heartbeat("b", lease_s=0.4)  # b is alive; a is not
    time.sleep(0.25)
    stolen = store.claim_cases("r", "d", keys, 10, lease_s=30)
    assert sorted(c for _, c, _ in stolen) == ["case-0000", "case-0001"]  # a's expired claims, not b's
    assert store.claim_cases("r", "e", keys, 10, lease_s=30) == []
    # Done with the results, in one transaction: never claimable again, even after its claim expired.
    store.save_case_records(
        [service_records("r", case_id) for _, case_id, _ in kept], done_claims=[claim for claim, _, _ in kept])
    time.sleep(0.45)
    assert store.claim_cases("r", "f", keys, 10, lease_s=30) == []
    assert store.queued_cases("r") == 4


def service_records(run_id: str, case_id: str) -> CaseRecords:
    return CaseRecords(result=CaseResult(run_id=run_id, case_id=case_id, status=CaseStatus.OK, metrics={"x": 1}))


def claim_concurrently(db_url: str, keys: QueueKeys, workers: int, limit: int,
                       grouped: bool = False) -> dict[str, list[tuple[int, str, int]]]:
    """Claims by ``workers`` threads until the queue is empty, each with its own store (and pool), as separate
    processes would have: what each was handed, in order. Every thread has made its first claim before any goes
    on (without it one thread could drain the queue before the others start, and the claims would not overlap);
    an error in a thread (a deadlock, a duplicate row) fails the test."""
    claimed: dict[str, list[tuple[int, str, int]]] = {}
    errors: list[BaseException] = []
    all_started = threading.Barrier(workers)

    def claim_all(name: str) -> None:
        mine = claimed.setdefault(name, [])
        own = Store(db_url)
        try:
            batch = own.claim_cases("r", name, keys, limit, lease_s=30, grouped=grouped)
            all_started.wait(timeout=60)
            while batch:
                mine.extend(batch)
                batch = own.claim_cases("r", name, keys, limit, lease_s=30, grouped=grouped)
        except Exception as exc:  # noqa: BLE001 - re-raised below, in the test
            errors.append(exc)
        finally:
            own.engine.dispose()

    threads = [threading.Thread(target=claim_all, args=(f"w{i}",)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return claimed


def test_concurrent_claims_never_overlap(db_url: str) -> None:
    store = Store(db_url)
    keys = queued_run(store, 300)
    claimed = claim_concurrently(db_url, keys, workers=6, limit=7)
    everything = [case_id for mine in claimed.values() for _, case_id, _ in mine]
    assert sorted(everything) == sorted(key[0] for key in keys.slice(0, len(keys)))  # each exactly once
    assert sum(bool(mine) for mine in claimed.values()) >= 2


def test_claims_take_whole_claim_groups_so_no_two_workers_share_a_batch(db_url: str) -> None:
    store = Store(db_url)
    keys = queued_run(store, 40, group_size=4)  # ten batches of four cases
    first = store.claim_cases("r", "a", keys, 3, lease_s=30, grouped=True)
    assert [c for _, c, _ in first] == [f"case-{i:04d}" for i in range(4)]  # 3 asked, the whole batch given
    second = store.claim_cases("r", "b", keys, 5, lease_s=30, grouped=True)
    assert [c for _, c, _ in second] == [f"case-{i:04d}" for i in range(4, 12)]  # the batches of 5 cases
    claimed = {name: [int(case_id.split("-")[1]) for _, case_id, _ in mine]
               for name, mine in claim_concurrently(db_url, keys, workers=4, limit=3, grouped=True).items()}
    everything = sorted(index for mine in claimed.values() for index in mine)
    assert everything == list(range(12, 40))
    batches_of = {name: {index // 4 for index in mine} for name, mine in claimed.items()}
    for name, batches in batches_of.items():  # each batch held by one worker, whole
        assert all(sum(index // 4 == batch for index in claimed[name]) == 4 for batch in batches), name
        assert all(not batches & other for other_name, other in batches_of.items() if other_name != name)


def claim_ranges(store: Store, run_id: str = "r") -> list[tuple[int, int]]:
    """The run's claims, (start, stop) of the queue, in queue order."""
    with store.engine.connect() as connection:
        return [(row[0], row[1]) for row in connection.execute(text(
            "SELECT start, stop FROM case_claims WHERE run_id = :run ORDER BY start"), {"run": run_id})]


@pytest.fixture
def small_scans(monkeypatch: pytest.MonkeyPatch) -> int:
    """A claim checks 10 keys for finished results at a time, so a few dozen cases cross several scans."""
    monkeypatch.setattr(store_module, "SCAN_CHUNK", 10)
    return 10


def test_a_new_wave_writes_no_row_yet_counts_every_key_and_a_claim_is_one_row(db_url: str) -> None:
    store = Store(db_url)
    keys = queued_run(store, 50, repetitions=2)
    assert claim_ranges(store) == [] and store.queued_cases("r") == 100
    assert store.get_run("r").queue_has_finished is False  # nothing to look for ahead of the claims
    claimed = store.claim_cases("r", "a", keys, 3, lease_s=30)
    assert [(c, rep) for _, c, rep in claimed] == [("case-0000", 0), ("case-0001", 0), ("case-0002", 0)]
    assert claim_ranges(store) == [(0, 3)] and store.queued_cases("r") == 100  # claimed is not done
    store.save_case_records([service_records("r", c) for _, c, _ in claimed], done_claims=[claimed[0][0]])
    assert store.queued_cases("r") == 97


def test_claims_give_every_key_once_in_queue_order_in_ranges_that_tile_the_queue(db_url: str) -> None:
    store = Store(db_url)
    keys = queued_run(store, 75, repetitions=2)  # 150 keys: claims of 7 straddle the repetitions
    claimed = claim_concurrently(db_url, keys, workers=4, limit=7)
    every_key = [(c, rep) for c, rep, _ in keys.slice(0, len(keys))]
    ranges = claim_ranges(store)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(every_key)
    assert all(stop == following for (_, stop), (following, _) in pairwise(ranges))  # no gap, no overlap
    handed_out = [(c, rep) for mine in claimed.values() for _, c, rep in mine]
    assert sorted(handed_out) == sorted(every_key)  # each claimed exactly once
    assert sum(bool(mine) for mine in claimed.values()) >= 2
    for mine in claimed.values():  # each worker's claims follow the queue
        assert [claim for claim, _, _ in mine] == sorted(claim for claim, _, _ in mine)
    assert store.queued_cases("r") == len(every_key)  # claimed, none done


def test_a_resume_claims_only_keys_without_a_finished_result(db_url: str, small_scans: int) -> None:
    store = Store(db_url)
    store.create_run(RunConfig(benchmark="t"), run_id="r", expected_cases=40)
    ok = {3, 7, *range(10, 20)}  # scans of 12, 10 and 10 keys: the second finds only 20 and 21
    failed = {5, 25}
    store.save_case_records(
        [service_records("r", f"case-{i:04d}") for i in sorted(ok)]
        + [CaseRecords(result=CaseResult(run_id="r", case_id=f"case-{i:04d}", status=CaseStatus.FAILED,
                                         error="boom")) for i in sorted(failed)])
    keys = QueueKeys([case.case_id for case in make_cases(40)], 1)
    assert store.join_run("r", a_worker("r", "starter"), keys, {"status": RunStatus.RUNNING})
    assert store.get_run("r").queue_has_finished
    first = store.claim_cases("r", "a", keys, 12, lease_s=30)
    todo = [f"case-{i:04d}" for i in range(40) if i not in ok]
    assert [c for _, c, _ in first] == todo[:12]  # across the finished scan; failed case 5 is retried
    rest = store.claim_cases("r", "a", keys, 100, lease_s=30)
    assert [c for _, c, _ in first + rest] == todo
    assert claim_ranges(store) == [(0, 24), (24, 40)]
    assert store.claim_cases("r", "b", keys, 100, lease_s=30) == []


def test_a_claim_taken_over_skips_what_its_first_holder_finished(db_url: str) -> None:
    store = Store(db_url)
    keys = queued_run(store, 8)
    first = store.claim_cases("r", "a", keys, 5, lease_s=0.3)
    store.save_case_records([service_records("r", c) for _, c, _ in first[:2]])  # a finished two, then died
    time.sleep(0.35)
    taken = store.claim_cases("r", "b", keys, 10, lease_s=30)
    assert [c for _, c, _ in taken] == ["case-0002", "case-0003", "case-0004"]  # the same claim, less the two
    assert {claim for claim, _, _ in taken} == {first[0][0]}
    store.save_case_records([service_records("r", c) for _, c, _ in first[2:]], done_claims=[first[0][0]])
    store.release_cases("a")  # a claim done is not given back
    assert [c for _, c, _ in store.claim_cases("r", "c", keys, 10, lease_s=30)] == ["case-0005", "case-0006",
                                                                                   "case-0007"]
    assert store.queued_cases("r") == 3


def test_grouped_claims_extend_to_the_end_of_their_last_group(db_url: str) -> None:
    store = Store(db_url)
    keys = queued_run(store, 40, group_size=6)  # groups straddle the 10-key scans
    first = store.claim_cases("r", "a", keys, 3, lease_s=30, grouped=True)
    assert [c for _, c, _ in first] == [f"case-{i:04d}" for i in range(6)]
    second = store.claim_cases("r", "b", keys, 5, lease_s=30, grouped=True)
    assert [c for _, c, _ in second] == [f"case-{i:04d}" for i in range(6, 12)]  # the group over keys 10-11 too
    assert claim_ranges(store) == [(0, 6), (6, 12)]


def test_a_drained_finish_waits_for_unclaimed_keys(db_url: str) -> None:
    store = Store(db_url)
    keys = queued_run(store, 25)

    def claim_and_finish(limit: int) -> None:
        batch = store.claim_cases("r", "a", keys, limit, lease_s=30)
        store.save_case_records([service_records("r", c) for _, c, _ in batch], done_claims=[batch[0][0]])

    claim_and_finish(10)
    assert store.queued_cases("r") == 15  # no undone claim, 15 keys unclaimed
    assert not store.finish_run("r", lambda: {"status": RunStatus.COMPLETED}, when="drained")
    claim_and_finish(100)
    assert store.finish_run("r", lambda: {"status": RunStatus.COMPLETED}, when="drained")
    run = store.get_run("r")
    assert run.status == RunStatus.COMPLETED and (run.queue_total, run.queue_cursor) == (None, None)
    assert claim_ranges(store) == [] and store.queued_cases("r") == 0
    assert len(store.results("r")) == 25


def test_a_run_over_many_claims_completes_each_case_once(db_url: str) -> None:
    """The runner through ranged claims: two executions at once, three threads each, 2 repetitions."""
    store = Store(db_url)
    store.create_run(RunConfig(benchmark="t"), run_id="r", expected_cases=120)
    calls: list[tuple[str, int]] = []
    lock = threading.Lock()

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        with lock:
            calls.append((case.case_id, ctx.repetition))
        time.sleep(0.002)
        return CaseOutcome(metrics={"ok": True})

    reports = []

    def execute() -> None:
        batch = BatchRunner(Store(db_url), load_settings(), concurrency=3, idle_poll_s=0.05, max_claim=4)
        reports.append(batch.execute("r", make_cases(60), run_case, 2))

    threads = [threading.Thread(target=execute) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(calls) == sorted((case.case_id, rep) for case in make_cases(60) for rep in range(2))
    assert {report.status for report in reports} == {RunStatus.COMPLETED}
    assert len(store.results("r")) == 120 and store.queued_cases("r") == 0


def test_storing_results_does_not_wait_for_the_runs_lock(postgres_url: str) -> None:
    """The run's lock (a new claim, a join, a finish) must not hold up workers storing results: their
    foreign key check locks the run's row too (KEY SHARE), which FOR UPDATE would block."""
    store, other = Store(postgres_url), Store(postgres_url)
    keys = queued_run(store, 3)
    claimed = store.claim_cases("r", "a", keys, 3, lease_s=30)
    with other._write_transaction(lock_run="r"):
        saver = threading.Thread(target=store.save_case_records, args=(
            [service_records("r", c) for _, c, _ in claimed], [claimed[0][0]]))
        saver.start()
        saver.join(timeout=5)
        stored_while_locked = not saver.is_alive()
    saver.join()
    assert stored_while_locked and store.queued_cases("r") == 0
    other.engine.dispose()


def test_the_ddi_generation_solver_groups_cases_by_its_fixed_batches(tmp_path: Path) -> None:
    from PIL import Image

    from medeval_core.benchmarks.ddi.benchmark import _GenerateSolver

    image = tmp_path / "lesion.png"  # the solver checks every image it will send before the first model call
    Image.new("RGB", (8, 8)).save(image)
    cases = [SimpleNamespace(case_id=f"img-{i}", image_path=str(image)) for i in range(5)]
    params = SimpleNamespace(generation=SimpleNamespace(batch_size=2))
    solver = _GenerateSolver(params, cases, cases[3:])  # type: ignore[arg-type]
    assert [solver.claim_group(c.case_id) for c in cases] == [0, 0, 1, 1, 2]  # positions in the whole list
    runner = BatchRunner(Store.__new__(Store), load_settings(), claim_group=solver.claim_group)
    assert runner._queue_keys(cases, 2).slice(0, 3) == [("img-0", 0, 0), ("img-1", 0, 0), ("img-2", 0, 2)]
    stray = [*cases, SimpleNamespace(case_id="not-in-the-solver's-list")]
    assert runner._queue_keys(stray, 1).slice(5, 6) == [("not-in-the-solver's-list", 0, -6)]  # a group of its own


def test_a_second_execution_joins_the_wave_instead_of_redoing_it(db_url: str) -> None:
    """Two executions of one run at once (two resumes): every case runs once, none is stored failed."""
    store = Store(db_url)
    store.create_run(RunConfig(benchmark="t"), run_id="r", expected_cases=40)
    calls: list[str] = []
    lock = threading.Lock()

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        with lock:
            calls.append(case.case_id)
        time.sleep(0.01)
        return CaseOutcome(metrics={"ok": True})

    reports = []

    def execute() -> None:
        batch = BatchRunner(Store(db_url), load_settings(), concurrency=2, idle_poll_s=0.05)
        reports.append(batch.execute("r", make_cases(40), run_case, 1))

    threads = [threading.Thread(target=execute) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(calls) == [case.case_id for case in make_cases(40)]
    results = store.results("r")
    assert len(results) == 40 and all(r.status == CaseStatus.OK for r in results)
    assert {report.status for report in reports} == {RunStatus.COMPLETED}
    assert store.get_run("r").status == RunStatus.COMPLETED
    assert store.queued_cases("r") == 0 and store.live_workers("r") == []


def test_every_case_failed_ends_failed_without_a_metric(db_url: str, counting: None) -> None:
    settings = load_settings()
    store = open_store(db_url)
    report = service.launch("counting", CountingParams(n_cases=3, fail_every=1), settings, store, run_id="all-bad")
    assert report.status == RunStatus.FAILED and (report.done, report.failed) == (0, 3)
    row = store.get_run("all-bad")
    assert row.status == RunStatus.FAILED and "Every case failed (3)" in (row.error or "")
    summary = service.stored_summary(store, "all-bad")
    assert summary is not None and summary.headline == [] and summary.groups == []
    assert summary.notes[0].startswith("No case finished (3 failed")
    assert service.run_overview(store, "all-bad").resumable
    snapshot = service.run_snapshot(store, "all-bad")
    assert snapshot.overview.state == "failed" and snapshot.metrics == [] and snapshot.summary == summary


def test_a_snapshot_reads_state_summary_and_metrics_of_a_run_together(db_url: str, counting: None) -> None:
    store = open_store(db_url)
    service.launch("counting", CountingParams(n_cases=4), load_settings(), store, run_id="fine")
    snapshot = service.run_snapshot(store, "fine")
    assert (snapshot.overview.state, snapshot.overview.done, snapshot.overview.eta_s) == ("completed", 4, None)
    assert snapshot.summary is not None and snapshot.summary.counts.done == 4
    assert {m.metric for m in snapshot.metrics} == {"index", "repetition"}
    assert next(m for m in snapshot.metrics if m.metric == "index").value == 1.5


def test_the_cli_exits_non_zero_when_every_case_failed(db_url: str, counting: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from medeval_core.cli import main

    assert main(["run", "counting", "--n-cases", "2", "--fail-every", "1", "--run-id", "bad"]) == 1
    captured = capsys.readouterr()
    assert "error: run bad failed: Every case failed (2)" in captured.err
    assert "scored" not in captured.out  # no headline metric printed for zero finished cases


def test_a_cancelled_run_says_its_metrics_cover_only_what_finished(db_url: str, counting: None) -> None:
    settings = load_settings()
    store = open_store(db_url)
    run_id = service.create_run("counting", CountingParams(n_cases=200, sleep_s=0.01), settings, store)
    thread = threading.Thread(target=service.resume, args=(run_id, settings, store))
    thread.start()
    deadline = time.monotonic() + 30
    while store.result_counts(run_id).get(CaseStatus.OK, 0) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    store.request_cancel(run_id)
    thread.join(30)
    overview = service.run_overview(store, run_id)
    assert overview.state == "cancelled" and 5 <= overview.done < 200 and overview.resumable
    summary = service.stored_summary(store, run_id)
    assert summary is not None
    assert summary.notes[0] == f"Cancelled: the metrics cover only the {overview.done} of 200 cases that finished."


def test_a_run_killed_before_its_summary_is_never_left_completed_without_one(db_url: str) -> None:
    """Status and summary are written in one transaction: a failure while summarising leaves the run as it was
    (running, no live worker: interrupted and resumable), never *completed* with an empty summary."""
    store = Store(db_url)
    store.create_run(RunConfig(benchmark="t"), run_id="r", expected_cases=3)

    def summary_that_dies(status: RunStatus) -> dict:
        raise MemoryError("killed while summarising")

    batch = BatchRunner(store, load_settings())
    with pytest.raises(MemoryError):
        batch.execute("r", make_cases(3), lambda case, ctx: CaseOutcome(metrics={"ok": True}), 1,
                      final_summary=summary_that_dies)
    overview = service.run_overview(store, "r")
    assert overview.status == RunStatus.RUNNING and overview.summary == {}
    assert overview.state == "interrupted" and overview.resumable
    report = batch.execute("r", make_cases(3), lambda case, ctx: CaseOutcome(), 1,
                           final_summary=lambda status: {"benchmark": "t", "counts": {}})
    assert report.status == RunStatus.COMPLETED and store.get_run("r").summary == {"benchmark": "t", "counts": {}}


def test_a_completed_run_with_an_empty_summary_is_resumable(db_url: str) -> None:
    store = Store(db_url)
    store.create_run(RunConfig(benchmark="t"), run_id="r", expected_cases=1)
    store.update_run("r", status=RunStatus.COMPLETED)  # as an older version left a run killed before its summary
    assert service.run_overview(store, "r").resumable


def worker_process(run_id: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "medeval_core", "worker", run_id, *extra], cwd=REPO,
                            env={**os.environ, "MEDEVAL_BENCHMARKS": COUNTING, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_three_workers_one_sigkilled_leave_exactly_one_result_per_case(postgres_url: str, counting: None,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDEVAL_DB_URL", postgres_url)
    settings = load_settings()
    store = open_store(postgres_url)
    n_cases = 90
    run_id = workers.create_run(settings, "counting", {"n_cases": n_cases, "sleep_s": 0.1, "workers": 2})
    processes = [worker_process(run_id, "--lease-seconds", "2") for _ in range(3)]
    wait_for(lambda: len(store.live_workers(run_id)) == 3 and store.result_counts(run_id).get("ok", 0) >= 15)
    os.kill(processes[0].pid, signal.SIGKILL)
    processes[0].wait()
    # On this host a worker whose process is gone is dead at once (no wait for its lease to run out).
    assert processes[0].pid not in {w.pid for w in store.live_workers(run_id)}
    with store.engine.connect() as connection:
        held = connection.execute(text(
            "SELECT count(*) FROM case_claims JOIN run_workers ON run_workers.id = case_claims.worker_id "
            "WHERE run_workers.pid = :pid AND NOT case_claims.done"), {"pid": processes[0].pid}).scalar()
    assert held, "the kill must land while the worker holds claims"
    for process in processes[1:]:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr.decode()
    results = store.results(run_id)
    assert len(results) == n_cases and all(r.status == CaseStatus.OK for r in results)
    assert len({(r.case_id, r.repetition) for r in results}) == n_cases
    turns = [turn for r in results for turn in store.turns(run_id, r.case_id)]
    assert len(turns) == n_cases  # the killed worker's claims were redone once, by one survivor
    overview = service.run_overview(store, run_id)
    assert overview.state == "completed" and overview.summary["counts"]["done"] == n_cases


def test_a_detached_worker_killed_midway_shows_interrupted_and_a_new_one_finishes(db_url: str,
                                                                               counting: None) -> None:
    settings = load_settings()
    store = open_store(db_url)
    run_id = workers.create_run(settings, "counting", {"n_cases": 60, "sleep_s": 0.05}, label="detached")
    assert workers.run_liveness(store, run_id) == "pending" and store.get_run(run_id).expected_cases == 60
    pid = workers.start_worker(settings, run_id)
    assert os.getpgid(pid) == pid  # its own process group: a page's reload or restart does not take it down
    wait_for(lambda: store.result_counts(run_id).get("ok", 0) >= 5)
    assert workers.run_liveness(store, run_id) == "running"
    overview = service.run_overview(store, run_id)
    assert overview.eta_s is not None and overview.rate_per_s and overview.eta_s > 0
    os.kill(pid, signal.SIGKILL)
    # On this host its process is gone, so it is dead at once; on another host its heartbeat would stop and it
    # would be dead when its lease (30 s by default) ran out.
    wait_for(lambda: not store.live_workers(run_id), timeout_s=10)
    overview = service.run_overview(store, run_id)
    assert overview.state == "interrupted" and overview.resumable and not overview.active
    assert workers.run_liveness(store, run_id) == workers.run_states(store, store.list_runs())[run_id]
    assert overview.status == RunStatus.RUNNING  # stored as running: only the heartbeats tell
    done_before = {r.case_id: r.finished_at for r in store.results(run_id)}
    process = worker_process(run_id)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr.decode()
    results = store.results(run_id)
    assert len(results) == 60 and len({r.case_id for r in results}) == 60
    assert {r.case_id: r.finished_at for r in results if r.case_id in done_before} == done_before
    assert workers.run_liveness(store, run_id) == "completed"
    assert workers.worker_log_path(settings, run_id).exists()


def test_create_run_refuses_bad_params_and_a_reused_id_with_other_params(db_url: str, counting: None) -> None:
    from medeval_core.benchmark import BenchmarkError

    settings = load_settings()
    with pytest.raises(BenchmarkError, match="Invalid counting parameters"):
        workers.create_run(settings, "counting", {"n_cases": 0})
    run_id = workers.create_run(settings, "counting", {"n_cases": 3}, run_id="mine")
    assert workers.create_run(settings, "counting", {"n_cases": 3}, run_id="mine") == run_id
    with pytest.raises(BenchmarkError, match="exists with other parameters"):
        workers.create_run(settings, "counting", {"n_cases": 4}, run_id="mine")
    assert open_store(db_url).results(run_id) == []  # nothing ran


def test_two_resumes_at_once_judge_each_case_once_and_keep_every_good_result(db_url: str, tmp_path: Path) -> None:
    """The report: two `resume` processes on one run stored good cases as failed and doubled the judge's requests.
    Here a judge run whose 12 cases all failed (the endpoint refused them) is resumed by two processes at once
    against the recovered endpoint: 12 requests, 12 good results, one ok judge attempt per case."""
    import json

    from medeval_core.cli import main
    from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply, verdict_reply

    ids = [f"d-{i:02d}" for i in range(12)]
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"image_id": case_id, "reference": "melanoma",
                                             "response": f"[{case_id}] Final diagnosis: melanoma"}) + "\n"
                                 for case_id in ids), encoding="utf-8")
    endpoint = {"up": False}

    def respond(request: RecordedRequest) -> Reply:
        if not endpoint["up"]:
            return Reply(status=400, content=None, raw_body='{"error": {"message": "model not loaded"}}')
        return Reply(content=verdict_reply("melanoma", True, "Same disease.").content, delay_s=0.1)

    with FakeOpenAI(respond) as server:
        code = main(["judge", "ddi", "--responses", str(responses), "--judge-base-url", server.url,
                     "--judge-model", "m", "--run-id", "judged", "--json"])
        store = open_store(db_url)
        [score_run] = [row for row in store.list_runs() if row.kind == "score"]
        assert code == 1 and {r.status for r in store.results(score_run.id)} == {CaseStatus.FAILED}
        refused = len(server.chat_requests())
        endpoint["up"] = True
        command = [sys.executable, "-m", "medeval_core", "resume", score_run.id, "--concurrency", "4"]
        resumes = [subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
        for process in resumes:
            _, stderr = process.communicate(timeout=120)
            assert process.returncode == 0, stderr.decode()
        assert len(server.chat_requests()) - refused == len(ids)  # each case judged once, not twice
    results = store.results(score_run.id)
    assert len(results) == len(ids) and all(r.status == CaseStatus.OK for r in results)
    good = [j for j in store.judgements(run_id=score_run.id) if j.ok]
    assert sorted(j.case_id for j in good) == ids
    assert store.get_run(score_run.id).status == RunStatus.COMPLETED


def test_a_worker_uses_the_model_roles_the_run_was_launched_with(db_url: str, counting: None) -> None:
    from medeval_core.records import RunConfig as Config

    settings = load_settings()
    [role, choice] = next(iter(settings.roles.items()))
    launched = settings.model_copy(update={"roles": {**settings.roles, role: choice.model_copy(
        update={"model": "chosen-at-launch", "api_key_env": "SOME_KEY_VARIABLE"})}})
    run_id = workers.create_run(launched, "counting", {"n_cases": 1})
    config = Config.model_validate(open_store(db_url).get_run(run_id).config)
    assert "SOME_KEY_VARIABLE" in str(config.settings) and settings.role(role).model != "chosen-at-launch"
    resumed = service.run_settings(settings, config)
    assert resumed.role(role).model == "chosen-at-launch" and resumed.db_url == settings.db_url


def test_an_interactive_session_round_trips_on_each_database(db_url: str, counting: None) -> None:
    """Sessions (walkthroughs, lesion evaluations) use the same store on PostgreSQL as on SQLite; they have no
    worker and show their own status, never interrupted."""
    from medeval_core.sessions import Session

    store, settings = open_store(db_url), load_settings()
    session = Session.open(store, settings, "counting", CountingParams(n_cases=1), case_id="case-0000")
    session.add_turn("person", "count", {"n": 1}, cost=2.5)
    assert workers.run_liveness(store, session.run_id) == "open"  # open on its page: never running, nor interrupted
    reopened = Session.load(store, settings, session.run_id)
    assert [(t.actor, t.payload, t.cost) for t in reopened.turns()] == [("person", {"n": 1}, 2.5)]
    reopened.finish(CaseOutcome(metrics={"index": 0.0}))
    assert Session.load(store, settings, session.run_id).finished
    overview = service.run_overview(store, session.run_id)
    assert overview.kind == "session" and overview.state == "finished" and not overview.resumable


def test_a_walkthrough_is_open_abandoned_when_idle_closed_or_deleted(db_url: str, counting: None) -> None:
    from datetime import timedelta

    from medeval_core.records import utc_now
    from medeval_core.sessions import Session, SessionError, close_session, delete_session

    store, settings = open_store(db_url), load_settings()
    session = Session.open(store, settings, "counting", CountingParams(n_cases=1), case_id="case-0000")
    session.add_turn("person", "count", {"n": 1}, cost=0.0)
    last = store.last_turn_times([session.run_id])[session.run_id]
    row = store.get_run(session.run_id)
    assert service.session_state(row.status, last) == "open"
    assert service.session_state(row.status, last, now=utc_now() + timedelta(hours=25)) == "abandoned"
    assert service.session_state(row.status, last, now=utc_now() + timedelta(hours=2),
                                 idle_limit=timedelta(hours=1)) == "abandoned"
    close_session(store, session.run_id)
    assert workers.run_liveness(store, session.run_id) == "closed"
    with pytest.raises(SessionError, match="closed"):
        session.add_turn("person", "count", {"n": 2}, cost=0.0)
    delete_session(store, session.run_id)
    assert store.find_run(session.run_id) is None and store.turns(session.run_id, "case-0000") == []
    batch = workers.create_run(settings, "counting", {"n_cases": 1})
    with pytest.raises(SessionError, match="only a walkthrough"):
        delete_session(store, batch)


def test_runs_close_and_delete_on_the_command_line(db_url: str, counting: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from medeval_core.cli import main
    from medeval_core.sessions import Session

    store, settings = open_store(db_url), load_settings()
    session = Session.open(store, settings, "counting", CountingParams(n_cases=1), case_id="case-0000")
    assert main(["runs", "close", session.run_id]) == 0
    assert capsys.readouterr().out.strip() == f"Closed {session.run_id}."
    assert workers.run_liveness(store, session.run_id) == "closed"
    assert main(["runs", "delete", session.run_id]) == 0
    assert "and everything it recorded" in capsys.readouterr().out and store.find_run(session.run_id) is None
    batch = workers.create_run(settings, "counting", {"n_cases": 1})
    assert main(["runs", "delete", batch]) == 2  # a batch run is refused in one line, and kept
    assert "only a walkthrough" in capsys.readouterr().err and store.find_run(batch) is not None


def test_the_cli_lists_and_shows_a_run_whose_workers_died_as_interrupted(db_url: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from medeval_core.cli import main

    store = Store(db_url)
    store.create_run(RunConfig(benchmark="demo"), run_id="left-running", expected_cases=3)
    store.update_run("left-running", status=RunStatus.RUNNING)  # as a killed process leaves it
    assert main(["runs", "list"]) == 0
    assert "interrupted" in capsys.readouterr().out
    assert main(["runs", "show", "left-running"]) == 0
    out = capsys.readouterr().out
    assert "left-running: demo batch run, interrupted" in out and "resume left-running" in out


def test_a_killed_worker_not_yet_reaped_is_dead_on_its_host(db_url: str) -> None:
    """A zombie (killed, its parent has not collected it) still answers signal 0; it must not count as alive."""
    from medeval_core.store import HOST

    store = Store(db_url)
    store.create_run(RunConfig(benchmark="t"), run_id="r")
    child = subprocess.Popen(["sleep", "60"])
    try:
        store.join_run("r", a_worker("r", "sleeper").model_copy(update={"host": HOST, "pid": child.pid}),
                       QueueKeys([], 1), {"status": RunStatus.RUNNING})
        assert [w.id for w in store.live_workers("r")] == ["sleeper"]
        os.kill(child.pid, signal.SIGKILL)
        wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z")
        # Dead at once, though its heartbeat row would count as alive for another 30 s.
        assert store.live_workers("r") == [] and workers.run_liveness(store, "r") == "interrupted"
    finally:
        child.kill()
        child.wait()


def test_a_worker_given_its_own_claim_back_counts_its_cases_once() -> None:
    """A claim that expired while its worker still held its cases (the database was away longer than the lease)
    can come back to that worker: the cases it holds are not queued again, and the claim is done with them."""
    from medeval_core.runs.runner import _Claims, _Tally

    answers = [[(7, "a", 0), (7, "b", 0)], [(7, "a", 0), (7, "b", 0)], []]
    store = SimpleNamespace(claim_cases=lambda *args, **kwargs: answers.pop(0))
    runner = SimpleNamespace(store=store, db=lambda call, *args, **kwargs: call(*args, **kwargs), max_claim=10,
                             concurrency=1, claim_target_s=2.0, lease_s=30.0, claim_group=None, idle_poll_s=0.0)
    claims = _Claims(runner, "r", "w", make_cases(2), QueueKeys(["a", "b"], 1), _Tally(total=2, done=0, failed=0))
    assert [claims.next(), claims.next()] == [("a", 0), ("b", 0)]
    assert claims.next() is None  # its own claim back: both cases are still held here
    assert claims.completed_by([service_records("r", "a"), service_records("r", "b")]) == [7]
