"""The batch runner: a per-case function over a case source, N workers, every finished case persisted at once.

Guarantees: a case that raises is stored as *failed* with its error message, never as a score; ``resume`` skips
cases already finished (and retries failed ones); ``cancel`` stops submitting, lets in-flight cases finish and
persists them; the store's unique key means a crash at any point (even SIGKILL) followed by ``resume`` leaves
exactly one result per case and repetition.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextvars import ContextVar
from dataclasses import dataclass, field

from pydantic import BaseModel

from medeval_core.records import Case, CaseOutcome, CaseResult, CaseStatus, RunConfig, RunStatus, utc_now
from medeval_core.store import DuplicateResultError, Store

CaseFunction = Callable[[Case, int], CaseOutcome]
"""Scores one case for one repetition. Raising marks the case failed; it never stops the run."""

current_run_id: ContextVar[str | None] = ContextVar("current_run_id", default=None)
"""The run whose case is being computed (set before each call), so a case function can store its dialogue turns."""


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
            run_id=run_id,
            total=self.total,
            done=self.done,
            failed=self.failed,
            pending=pending,
            elapsed_s=elapsed,
            rate_per_s=rate,
            eta_s=pending / rate if rate > 0 else None,
            last_error=self.last_error,
        )


def describe_error(exc: BaseException) -> str:
    """One readable line for the stored error; the last traceback frame says where it happened."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    message = str(exc) or "no message"
    return f"{type(exc).__name__}: {message}{where}"


class BatchRunner:
    def __init__(
        self,
        store: Store,
        workers: int = 1,
        on_progress: ProgressCallback | None = None,
        cancel_poll_seconds: float = 1.0,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1.")
        self.store = store
        self.workers = workers
        self.on_progress = on_progress
        self.cancel_poll_seconds = cancel_poll_seconds
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Stop after the cases now in flight; they are still saved. The run can be resumed later."""
        self._cancel.set()

    def start(
        self,
        config: RunConfig,
        cases: Sequence[Case],
        run_case: CaseFunction,
        run_id: str | None = None,
    ) -> RunReport:
        expected = len(cases) * config.repetitions
        row = self.store.create_run(config, run_id=run_id, expected_cases=expected)
        return self._execute(row.id, cases, run_case, config.repetitions)

    def resume(self, run_id: str, cases: Sequence[Case], run_case: CaseFunction) -> RunReport:
        # A run left "running" by a killed process is resumed as is: even two resumes at once cannot store a
        # case twice, because the store's unique key keeps the first finished result.
        config = RunConfig.model_validate(self.store.get_run(run_id).config)
        return self._execute(run_id, cases, run_case, config.repetitions)

    def _execute(self, run_id: str, cases: Sequence[Case], run_case: CaseFunction, repetitions: int) -> RunReport:
        self._cancel.clear()
        finished = self.store.finished_keys(run_id)
        todo = [(case, rep) for case in cases for rep in range(repetitions) if (case.case_id, rep) not in finished]
        # Failed cases are retried; they stay counted as failed until their retry lands.
        retrying = {(r.case_id, r.repetition) for r in self.store.results(run_id, status=CaseStatus.FAILED)}
        tally = _Tally(total=len(cases) * repetitions, done=len(finished), failed=len(retrying), retrying=retrying)
        self.store.update_run(
            run_id, status=RunStatus.RUNNING, started_at=utc_now(), finished_at=None, error=None,
            expected_cases=tally.total,
        )
        self._emit(tally.progress(run_id))
        try:
            cancelled = self._drain(run_id, todo, run_case, tally)
        except BaseException as exc:
            self.store.update_run(run_id, status=RunStatus.FAILED, error=describe_error(exc), finished_at=utc_now())
            raise
        pending = tally.total - tally.done - tally.failed
        status = RunStatus.CANCELLED if cancelled else RunStatus.COMPLETED
        self.store.update_run(run_id, status=status, finished_at=utc_now())
        self._emit(tally.progress(run_id))
        return RunReport(
            run_id=run_id, status=status, total=tally.total, done=tally.done, failed=tally.failed, pending=pending
        )

    def _drain(
        self, run_id: str, todo: list[tuple[Case, int]], run_case: CaseFunction, tally: _Tally
    ) -> bool:
        """Run ``todo`` with at most ``workers`` cases in flight. Returns True when cancelled."""
        queue: Iterator[tuple[Case, int]] = iter(todo)
        in_flight: set[Future[CaseResult]] = set()
        last_poll = 0.0
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=f"run-{run_id}") as pool:
            while True:
                if time.monotonic() - last_poll >= self.cancel_poll_seconds:
                    last_poll = time.monotonic()
                    if self.store.get_run(run_id).status == RunStatus.CANCELLING:
                        self._cancel.set()
                while not self._cancel.is_set() and len(in_flight) < self.workers:
                    item = next(queue, None)
                    if item is None:
                        break
                    in_flight.add(pool.submit(_run_one, run_id, item[0], item[1], run_case))
                if not in_flight:
                    return self._cancel.is_set()
                completed, _ = wait(in_flight, timeout=self.cancel_poll_seconds, return_when=FIRST_COMPLETED)
                for future in completed:
                    in_flight.discard(future)
                    self._record(future.result(), tally)
                    self._emit(tally.progress(run_id))

    def _record(self, result: CaseResult, tally: _Tally) -> None:
        key = (result.case_id, result.repetition)
        try:
            self.store.save_result(result)
        except DuplicateResultError:
            # Another process finished this case first (two resumes at once); its result stands.
            return
        tally.finished_now += 1
        if key in tally.retrying:
            tally.retrying.discard(key)
            tally.failed -= 1
        if result.status == CaseStatus.OK:
            tally.done += 1
        else:
            tally.failed += 1
            tally.last_error = f"{result.case_id}: {result.error}"

    def _emit(self, progress: Progress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)


def _run_one(run_id: str, case: Case, repetition: int, run_case: CaseFunction) -> CaseResult:
    started = utc_now()
    current_run_id.set(run_id)
    try:
        outcome = run_case(case, repetition)
    except Exception as exc:  # noqa: BLE001 - any case error is data to record, not a reason to stop the run
        return CaseResult(
            run_id=run_id, case_id=case.case_id, repetition=repetition, status=CaseStatus.FAILED,
            error=describe_error(exc), started_at=started, finished_at=utc_now(),
        )
    return CaseResult(
        run_id=run_id, case_id=case.case_id, repetition=repetition, status=CaseStatus.OK,
        output=outcome.output, metrics=outcome.metrics, started_at=started, finished_at=utc_now(),
    )
