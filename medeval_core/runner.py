"""The batch runner: a per-case function over a case list, N worker threads, finished cases group-committed.

Guarantees: a case that raises is stored as *failed* with its error message, never as a score; a resume skips
cases already finished (and retries failed ones); a cancel stops submitting, lets in-flight cases finish and
persists them. Finished cases are written in groups: whatever finished within ``commit_interval_s`` (100 ms) is
one transaction holding each case's result, turns, judge attempts and model calls, so a crash (even SIGKILL)
loses at most that window, which a resume redoes; the store's unique key keeps exactly one result per case and
repetition, even with two resumes of one run at once.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from pydantic import BaseModel

from medeval_core.benchmark import CaseContext, ModelRoles, RecordingContext
from medeval_core.memory import gc_paused
from medeval_core.records import (
    Case,
    CaseOutcome,
    CaseRecords,
    CaseResult,
    CaseStatus,
    RunStatus,
    utc_now,
)
from medeval_core.redaction import redact
from medeval_core.settings import Settings
from medeval_core.store import Store

CaseFunction = Callable[[Case, CaseContext], CaseOutcome]
"""Runs one case for one repetition. Raising marks the case failed; it never stops the run."""


class Progress(BaseModel):
    run_id: str
    total: int
    done: int
    failed: int
    pending: int
    elapsed_s: float
    rate_per_s: float
    eta_s: float | None
    last_error: str | None = None


class RunReport(BaseModel):
    run_id: str
    status: RunStatus
    total: int
    done: int
    failed: int
    pending: int


ProgressCallback = Callable[[Progress], None]


@dataclass
class _Tally:
    total: int
    done: int
    failed: int
    started: float = field(default_factory=time.monotonic)
    retrying: set[tuple[str, int]] = field(default_factory=set)
    finished_now: int = 0
    last_error: str | None = None

    def progress(self, run_id: str) -> Progress:
        elapsed = time.monotonic() - self.started
        rate = self.finished_now / elapsed if elapsed > 0 else 0.0
        pending = self.total - self.done - self.failed
        return Progress(
            run_id=run_id, total=self.total, done=self.done, failed=self.failed, pending=pending, elapsed_s=elapsed,
            rate_per_s=rate, eta_s=pending / rate if rate > 0 else None, last_error=self.last_error,
        )

    def count(self, records: CaseRecords) -> None:
        self.finished_now += 1
        if records.key in self.retrying:
            self.retrying.discard(records.key)
            self.failed -= 1
        if records.result.ok:
            self.done += 1
        else:
            self.failed += 1
            self.last_error = f"{records.result.case_id}: {records.result.error}"


class _CommitWindow:
    """Finished cases not yet written: due once the oldest has waited ``interval_s`` or ``max_cases`` wait."""

    def __init__(self, interval_s: float, max_cases: int) -> None:
        self.interval_s = interval_s
        self.max_cases = max_cases
        self._waiting: list[CaseRecords] = []
        self._oldest = 0.0

    def add(self, records: CaseRecords) -> None:
        if not self._waiting:
            self._oldest = time.monotonic()
        self._waiting.append(records)

    def due(self) -> bool:
        return bool(self._waiting) and (time.monotonic() - self._oldest >= self.interval_s
                                        or len(self._waiting) >= self.max_cases)

    def wait_s(self, longest: float) -> float:
        """How long to wait for more cases before this window is due."""
        if not self._waiting:
            return longest
        return max(0.0, min(longest, self._oldest + self.interval_s - time.monotonic()))

    def take(self) -> list[CaseRecords]:
        waiting, self._waiting = self._waiting, []
        return waiting


def describe_error(exc: BaseException) -> str:
    """One readable line for the stored error; the last traceback frame says where it happened."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    message = str(exc) or "no message"
    return redact(f"{type(exc).__name__}: {message}{where}")


class BatchRunner:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        workers: int = 1,
        models: ModelRoles | None = None,
        on_progress: ProgressCallback | None = None,
        cancel_poll_seconds: float = 1.0,
        commit_interval_s: float = 0.1,
        max_commit_cases: int = 5000,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1.")
        self.store = store
        self.settings = settings
        self.workers = workers
        self.models = models or ModelRoles()
        self.on_progress = on_progress
        self.cancel_poll_seconds = cancel_poll_seconds
        self.commit_interval_s = commit_interval_s
        self.max_commit_cases = max_commit_cases
        self._cancel = threading.Event()
        self._last_poll = 0.0

    def cancel(self) -> None:
        """Stop after the cases now in flight; they are still saved. The run can be resumed later."""
        self._cancel.set()

    def execute(self, run_id: str, cases: Sequence[Case], run_case: CaseFunction, repetitions: int) -> RunReport:
        """Run every (case, repetition) of ``run_id`` not yet finished. A run left "running" by a killed process
        is continued as is: even two executions at once cannot store a case twice."""
        self._cancel.clear()
        finished = self.store.finished_keys(run_id)
        with gc_paused():  # one small tuple per case, next to the many long-lived case objects
            todo = [(case, rep) for rep in range(repetitions) for case in cases
                    if (case.case_id, rep) not in finished]
        # Failed cases are retried; they stay counted as failed until their retry lands.
        retrying = {(r.case_id, r.repetition) for r in self.store.results(run_id, status=CaseStatus.FAILED)}
        tally = _Tally(total=len(cases) * repetitions, done=len(finished), failed=len(retrying), retrying=retrying)
        self.store.update_run(run_id, status=RunStatus.RUNNING, started_at=utc_now(), finished_at=None, error=None,
                              expected_cases=tally.total)
        self._emit(tally.progress(run_id))
        try:
            cancelled = self._drain(run_id, todo, run_case, tally)
        except BaseException as exc:
            self.store.update_run(run_id, status=RunStatus.FAILED, error=describe_error(exc), finished_at=utc_now())
            raise
        status = RunStatus.CANCELLED if cancelled else RunStatus.COMPLETED
        self.store.update_run(run_id, status=status, finished_at=utc_now())
        self._emit(tally.progress(run_id))
        return RunReport(run_id=run_id, status=status, total=tally.total, done=tally.done, failed=tally.failed,
                         pending=tally.total - tally.done - tally.failed)

    def _drain(self, run_id: str, todo: list[tuple[Case, int]], run_case: CaseFunction, tally: _Tally) -> bool:
        """Run ``todo`` with at most ``workers`` cases in flight, committing finished ones in groups. Returns True
        when cancelled."""
        window = _CommitWindow(self.commit_interval_s, self.max_commit_cases)
        self._last_poll = time.monotonic()
        if self.workers == 1:
            # One case in flight either way: running it in this thread saves a hand-over per case.
            for case, repetition in todo:
                if self._cancel_requested(run_id):
                    break
                window.add(self._run_one(run_id, case, repetition, run_case))
                if window.due():
                    self._commit(run_id, window.take(), tally)
            self._commit(run_id, window.take(), tally)
            return self._cancel.is_set()
        queue: Iterator[tuple[Case, int]] = iter(todo)
        in_flight: set[Future[CaseRecords]] = set()
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=f"run-{run_id}") as pool:
            while True:
                while not self._cancel_requested(run_id) and len(in_flight) < self.workers:
                    item = next(queue, None)
                    if item is None:
                        break
                    in_flight.add(pool.submit(self._run_one, run_id, item[0], item[1], run_case))
                if not in_flight:
                    self._commit(run_id, window.take(), tally)
                    return self._cancel.is_set()
                completed, _ = wait(in_flight, timeout=window.wait_s(self.cancel_poll_seconds),
                                    return_when=FIRST_COMPLETED)
                for future in completed:
                    in_flight.discard(future)
                    window.add(future.result())
                if window.due():
                    self._commit(run_id, window.take(), tally)

    def _cancel_requested(self, run_id: str) -> bool:
        """Whether to stop submitting: ``cancel()`` here, or a cancel requested through the store (polled)."""
        now = time.monotonic()
        if now - self._last_poll >= self.cancel_poll_seconds:
            self._last_poll = now
            if self.store.get_run(run_id).status == RunStatus.CANCELLING:
                self._cancel.set()
        return self._cancel.is_set()

    def _commit(self, run_id: str, unwritten: list[CaseRecords], tally: _Tally) -> None:
        if not unwritten:
            return
        written = self.store.save_case_records(unwritten)
        # A case not written was finished by another process first (two resumes at once); its result stands.
        for records, was_written in zip(unwritten, written, strict=True):
            if was_written:
                tally.count(records)
        self._emit(tally.progress(run_id))

    def _run_one(self, run_id: str, case: Case, repetition: int, run_case: CaseFunction) -> CaseRecords:
        started = utc_now()
        ctx = RecordingContext(run_id, case.case_id, repetition, self.settings, self.models)
        try:
            outcome = run_case(case, ctx)
        except Exception as exc:  # noqa: BLE001 - any case error is data to record, not a reason to stop the run
            result = CaseResult(run_id=run_id, case_id=case.case_id, repetition=repetition,
                                status=CaseStatus.FAILED, error=describe_error(exc), started_at=started,
                                finished_at=utc_now())
        else:
            result = CaseResult(run_id=run_id, case_id=case.case_id, repetition=repetition, status=CaseStatus.OK,
                                output=outcome.output, metrics=outcome.metrics, scores=outcome.scores,
                                started_at=started,
                                finished_at=utc_now())
        return CaseRecords(result=result, turns=ctx.turns, judgements=ctx.judgements, model_calls=ctx.model_calls)

    def _emit(self, progress: Progress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)
