"""The batch runner: a per-case function over a case list, N cases at once, finished cases group-committed,
cases shared with other processes through claims in the store. The runner's own thread makes every claim and
every commit; at concurrency N > 1, N case threads only run cases (at 1, the runner's thread runs them too).

Guarantees: a case that raises is stored as *failed* with its error message, never as a score; a resume skips
cases already finished (and retries failed ones); a cancel stops submitting, lets in-flight cases finish and
persists them. Finished cases are written in groups: whatever finished within ``commit_interval_s`` (100 ms) is
one transaction holding each case's result, turns, judge attempts and model calls, so a crash (even SIGKILL)
loses at most that window, which a resume redoes.

Every execution is a *worker* of the run (``Store.join_run``): the run's cases are a queue in the store, claimed in
ranges (``Store.claim_cases``: a row per claim; FOR UPDATE SKIP LOCKED on PostgreSQL, BEGIN IMMEDIATE on SQLite);
a worker keeps its claims with a heartbeat thread and marks one done in the transaction that stores the last of
its results.
So two resumes of one run, or workers on many hosts pointed at one database, never run a case twice (a claim of a
worker that stopped heart-beating expires and is taken by another), and a failed attempt never replaces a good
result. Every store operation of a worker rides out a database outage (``BatchRunner.db``: retried with backoff up
to ``MEDEVAL_DB_OUTAGE_SECONDS``, the heartbeat renewed first when the database is back); past that limit, or on a
full disk, the worker stops with the store's one-line error and leaves the run interrupted, to resume.
The worker that finds the queue drained writes the run's final status and summary in one transaction.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from queue import Empty, SimpleQueue
from typing import Any

from pydantic import BaseModel

from medeval_core.benchmark import CaseContext, ModelRoles, RecordingContext
from medeval_core.errors import DatabaseUnavailable, StoreFullError
from medeval_core.memory import rare_young_collections
from medeval_core.records import (
    Case,
    CaseOutcome,
    CaseRecords,
    CaseResult,
    CaseStatus,
    RunStatus,
    case_finder,
    case_ids,
    utc_now,
)
from medeval_core.redaction import redact
from medeval_core.settings import Settings
from medeval_core.store import HOST, QueueKeys, RunWorkerRow, Store

CaseFunction = Callable[[Case, CaseContext], CaseOutcome]
"""Runs one case for one repetition. Raising marks the case failed; it never stops the run."""

DEFAULT_LEASE_S = 30.0
"""How long a worker's claims last without a heartbeat: the time before a dead worker's cases are taken over and
its run shows as interrupted."""

FinalSummary = Callable[[RunStatus], dict[str, Any]]
"""The run's summary (as stored) for the status it ends with; called once, by the worker that ends the run."""


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
    ran: int = 0
    """Cases this worker ran to the end, committed or not: the claims' pace from the first case on (the
    committed count lags a commit window behind, and a claim sized on it starts with one case at a time)."""
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


class _Claims:
    """This worker's claimed cases not yet started, refilled from the run's queue in the store. A refill asks for
    about ``target_s`` seconds of work at the rate seen so far (at least one case per thread, at most
    ``max_claim``): fast cases cost one claim per few hundred, slow ones stay spread over the workers.

    The runner's own thread makes every claim (``next``, ``refill``), as it makes every commit, so a claim never
    waits for a commit in progress; its case threads only ``take`` what was claimed."""

    def __init__(self, runner: BatchRunner, run_id: str, worker_id: str, cases: Sequence[Case], keys: QueueKeys,
                 tally: _Tally) -> None:
        self.runner = runner
        self.run_id = run_id
        self.worker_id = worker_id
        self.find = case_finder(cases)
        self.keys = keys
        self.tally = tally
        self._claim_of: dict[tuple[str, int], int] = {}
        self._left: Counter[int] = Counter()
        """Cases of each held claim not yet committed."""
        self._queue: deque[tuple[str, int]] = deque()
        self._empty_until = 0.0
        self._changed = threading.Condition()
        """Guards the above: case threads take while the runner's thread claims and commits."""
        self.dry = False
        """The last claim found nothing: case threads stop when the queue is empty (the runner starts them again
        when cases may be left)."""

    def next(self) -> tuple[str, int] | None:
        """The next case, claiming more when none is left (the runner's thread, one case at a time)."""
        if not self._queue:
            self._claim(self.runner.concurrency)
        return self._queue.popleft() if self._queue else None

    def refill(self) -> None:
        """Claim more when fewer cases wait than the case threads get through in about two commit intervals (so
        they do not wait for a claim while this thread commits), unless the queue ran dry."""
        pace = self._pace()
        # At least a case per thread; at most half a full claim, so a fast run does not claim the queue ahead.
        low_water = min(self.runner.max_claim // 2,
                        max(self.runner.concurrency, int(pace * 2 * self.runner.commit_interval_s)))
        if not self.dry and len(self._queue) < low_water:
            self._claim(low_water)

    def take(self, wait_s: float) -> tuple[str, int] | None:
        """A case thread's next case, waiting up to ``wait_s`` for a refill; None when the queue is dry."""
        with self._changed:
            self._changed.wait_for(lambda: self._queue or self.dry, timeout=wait_s)
            return self._queue.popleft() if self._queue else None

    def wake(self) -> None:
        """Let every waiting case thread look again (a cancel, or the runner stopping them)."""
        with self._changed:
            self._changed.notify_all()

    def _claim(self, at_least: int) -> None:
        if time.monotonic() < self._empty_until:
            self._set_dry()
            return
        runner = self.runner
        size = int(min(runner.max_claim, max(at_least, runner.concurrency, self._pace() * runner.claim_target_s)))
        claimed = runner.db(runner.store.claim_cases, self.run_id, self.worker_id, self.keys, size,
                            runner.lease_s, grouped=runner.claim_group is not None)
        if not claimed:
            self._empty_until = time.monotonic() + runner.idle_poll_s
            self._set_dry()
            return
        with self._changed:
            for claim_id, case_id, repetition in claimed:
                if (case_id, repetition) in self._claim_of:
                    # Its own claim back (it expired while the database was away): the case is still held here,
                    # queued, running or waiting for its commit, and counted once.
                    continue
                self._claim_of[(case_id, repetition)] = claim_id
                self._left[claim_id] += 1
                self._queue.append((case_id, repetition))
            self._changed.notify_all()

    def _pace(self) -> float:
        """Cases this worker ran per second so far."""
        elapsed = time.monotonic() - self.tally.started
        return self.tally.ran / elapsed if elapsed > 0 else 0.0

    def _set_dry(self) -> None:
        with self._changed:
            self.dry = True
            self._changed.notify_all()

    def completed_by(self, finished: Sequence[CaseRecords]) -> list[int]:
        """The claims whose last cases are among ``finished``: done once these are stored."""
        done = []
        with self._changed:
            for records in finished:
                claim_id = self._claim_of.pop(records.key)
                self._left[claim_id] -= 1
                if not self._left[claim_id]:
                    del self._left[claim_id]
                    done.append(claim_id)
        return done


class BatchRunner:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        concurrency: int = 1,
        models: ModelRoles | None = None,
        on_progress: ProgressCallback | None = None,
        cancel_poll_seconds: float = 1.0,
        commit_interval_s: float = 0.1,
        max_commit_cases: int = 5000,
        lease_s: float = DEFAULT_LEASE_S,
        heartbeat_s: float | None = None,
        idle_poll_s: float = 0.5,
        claim_target_s: float = 2.0,
        max_claim: int = 1000,
        claim_group: Callable[[str], int | None] | None = None,
    ) -> None:
        """``lease_s``: how long a claim (and the worker's liveness) lasts without a heartbeat; a worker that
        stops beating for that long is dead to the others, which then take its claims. The heartbeat runs every
        ``heartbeat_s`` (a sixth of the lease by default). ``idle_poll_s``: how often a worker with nothing to
        claim looks again while other workers still hold cases of the run. ``claim_group``: the solver's groups of
        cases computed together (a generation batch, by case id): a worker claims whole groups, so no two workers
        generate one batch."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1.")
        self.store = store
        self.settings = settings
        self.concurrency = concurrency
        self.models = models or ModelRoles()
        self.on_progress = on_progress
        self.cancel_poll_seconds = cancel_poll_seconds
        self.commit_interval_s = commit_interval_s
        self.max_commit_cases = max_commit_cases
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else lease_s / 6
        self.idle_poll_s = idle_poll_s
        self.claim_target_s = claim_target_s
        self.max_claim = max_claim
        self.claim_group = claim_group
        self._cancel = threading.Event()
        self._stop_threads = threading.Event()
        self._last_poll = 0.0
        self._worker_id: str | None = None

    def db(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A store operation that rides out a database outage (``Store.ride_out_outage``); when the database is
        back, this worker's heartbeat (its liveness and its claims) is renewed before the operation is retried."""
        return self.store.ride_out_outage(call, *args, on_return=self._renew_leases, **kwargs)

    def _renew_leases(self) -> None:
        if self._worker_id is not None:
            self.store.heartbeat(self._worker_id, self.lease_s)

    def cancel(self) -> None:
        """Stop after the cases now in flight; they are still saved. The run can be resumed later."""
        self._cancel.set()

    def execute(self, run_id: str, cases: Sequence[Case], run_case: CaseFunction, repetitions: int,
                final_summary: FinalSummary | None = None) -> RunReport:
        """Work on every (case, repetition) of ``run_id`` not yet finished, as one worker of the run: the first
        worker (none other alive) starts a wave of the run's unfinished cases, later ones join it. A run left
        "running" by a killed process is continued as is. The worker that ends the run stores its final status
        together with ``final_summary(status)``."""
        self._cancel.clear()
        total = len(cases) * repetitions
        now = utc_now()
        worker = RunWorkerRow(id=f"{HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}", run_id=run_id, host=HOST,
                              pid=os.getpid(), threads=self.concurrency, started_at=now,
                              heartbeat_at=now, expires_at=now + timedelta(seconds=self.lease_s))
        keys = self._queue_keys(cases, repetitions)
        self.db(self.store.join_run,
                run_id, worker, keys,
                run_changes={"status": RunStatus.RUNNING, "started_at": now, "finished_at": None, "error": None,
                             "expected_cases": total})
        self._worker_id = worker.id
        counts = self.db(self.store.result_counts, run_id)
        # Failed cases are retried; they stay counted as failed until their retry lands.
        retrying = ({(r.case_id, r.repetition) for r in self.db(self.store.results, run_id, CaseStatus.FAILED)}
                    if counts.get(CaseStatus.FAILED) else set())
        tally = _Tally(total=total, done=counts.get(CaseStatus.OK, 0), failed=len(retrying), retrying=retrying)
        self._emit(tally.progress(run_id))
        stop_beating = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(worker.id, stop_beating), daemon=True,
                                name=f"heartbeat-{run_id}")
        beat.start()
        try:
            with rare_young_collections():
                cancelled = self._drain(run_id, _Claims(self, run_id, worker.id, cases, keys, tally), run_case,
                                        tally)
        except (DatabaseUnavailable, StoreFullError):
            # The database is gone or full: nothing more can be written, so the run stays running with no live
            # worker, which shows as interrupted (resumable); what was committed is kept.
            stop_beating.set()
            beat.join()
            raise
        except BaseException as exc:
            # An interrupt (Ctrl-C) stops at once, without waiting out a database outage.
            self._stop(worker.id, stop_beating, beat, ride_out=isinstance(exc, Exception))
            if isinstance(exc, Exception):  # an interrupt leaves the run to show as interrupted (resumable)
                error = describe_error(exc)
                self.db(self.store.finish_run, run_id, lambda: {"status": RunStatus.FAILED, "error": error,
                                                                "finished_at": utc_now()}, when="alone")
            raise
        if cancelled:  # it ends the run only once no worker is left
            self._stop(worker.id, stop_beating, beat)
            self._finish(run_id, total, cancelled, final_summary, when="alone")
        else:
            # Drained: the run ends while this worker is still alive (and heart-beating through a long summary), so
            # it never shows as interrupted between its last case and its summary.
            try:
                self._finish(run_id, total, cancelled, final_summary, when="drained")
            finally:
                self._stop(worker.id, stop_beating, beat)
        status = RunStatus(self.db(self.store.get_run, run_id).status)
        counts = self.db(self.store.result_counts, run_id)
        done, failed = counts.get(CaseStatus.OK, 0), counts.get(CaseStatus.FAILED, 0)
        tally.done, tally.failed = done, failed
        self._emit(tally.progress(run_id))
        return RunReport(run_id=run_id, status=status, total=total, done=done, failed=failed,
                         pending=max(total - done - failed, 0))

    def _finish(self, run_id: str, total: int, cancelled: bool, final_summary: FinalSummary | None,
                when: str) -> None:
        """Write the run's closing status and summary. A summary that cannot be computed ends the run *failed*
        with the reason (then raises), never left running for a resume that would fail the same way."""
        try:
            self.db(self.store.finish_run, run_id, lambda: self._final(run_id, total, cancelled, final_summary),
                    when=when)
        except (DatabaseUnavailable, StoreFullError, MemoryError):
            # The process or its database gave out, not the summary's code: nothing was written (status and summary
            # are one transaction), so the run stays running with no live worker, i.e. interrupted and resumable.
            raise
        except Exception as exc:
            error = (f"The run's cases finished but its summary failed: {describe_error(exc)}. Fix the cause, "
                     f"then resume with `python -m medeval_core resume {run_id}`.")
            self.db(self.store.finish_run, run_id, lambda: {"status": RunStatus.FAILED, "error": error,
                                                            "finished_at": utc_now()}, when=when)
            raise

    def _queue_keys(self, cases: Sequence[Case], repetitions: int) -> QueueKeys:
        """The run's queue: every repetition of every case, grouped by the solver's ``claim_group``."""
        return QueueKeys(case_ids(cases), repetitions, self.claim_group)

    def _final(self, run_id: str, total: int, cancelled: bool,
               final_summary: FinalSummary | None) -> dict[str, Any]:
        """The run's closing status, error and summary: *failed* when no case finished and some failed (there is
        nothing to report a metric over), *cancelled* when a cancel left cases undone, else *completed*."""
        counts = self.store.result_counts(run_id)
        done, failed = counts.get(CaseStatus.OK, 0), counts.get(CaseStatus.FAILED, 0)
        error = None
        if cancelled and done + failed < total:
            status = RunStatus.CANCELLED
        elif done == 0 and failed > 0:
            status = RunStatus.FAILED
            [last] = self.store.results(run_id, status=CaseStatus.FAILED)[-1:]
            error = (f"Every case failed ({failed}); the last error: {last.error}. Fix the cause, then resume "
                     f"with `python -m medeval_core resume {run_id}`.")
        else:
            status = RunStatus.COMPLETED
        final: dict[str, Any] = {"status": status, "error": error, "finished_at": utc_now()}
        if final_summary is not None:
            final["summary"] = final_summary(status)
        return final

    def _heartbeat(self, worker_id: str, stop: threading.Event) -> None:
        wait_s = self.heartbeat_s
        while not stop.wait(wait_s):
            try:
                self.store.heartbeat(worker_id, self.lease_s)
            except Exception:  # noqa: BLE001 - a missed beat (database busy or away) is retried soon
                # Beat again within a second, so the leases are renewed as soon as the database is back.
                wait_s = min(self.heartbeat_s, 1.0)
                continue
            wait_s = self.heartbeat_s

    def _stop(self, worker_id: str, stop_beating: threading.Event, beat: threading.Thread,
              ride_out: bool = True) -> None:
        """This worker leaves the run: no more heartbeats, its unstarted claims go back to the queue."""
        stop_beating.set()
        beat.join()
        for leave in (self.store.release_cases, self.store.finish_worker):
            if ride_out:
                self.db(leave, worker_id)
            else:
                leave(worker_id)

    def _drain(self, run_id: str, claims: _Claims, run_case: CaseFunction, tally: _Tally) -> bool:
        """Run claimed cases with at most ``concurrency`` in flight, committing finished ones in groups, until the
        run's queue is drained (no case left undone by any worker). Returns True when cancelled."""
        window = _CommitWindow(self.commit_interval_s, self.max_commit_cases)
        self._last_poll = time.monotonic()
        if self.concurrency == 1:
            # One case in flight either way: running it in this thread saves a hand-over per case.
            while not self._cancel_requested(run_id):
                key = claims.next()
                if key is None:
                    self._commit(run_id, window.take(), claims, tally)
                    if self.db(self.store.queued_cases, run_id) == 0:
                        break
                    self._cancel.wait(self.idle_poll_s)
                    continue
                window.add(self._run_one(run_id, claims, key, run_case))
                tally.ran += 1
                if window.due():
                    self._commit(run_id, window.take(), claims, tally)
            self._commit(run_id, window.take(), claims, tally)
            return self._cancel.is_set()
        # Case threads take claimed cases and hand finished ones over; this thread does every store operation
        # (claims, commits), so none waits for another's. A pool with a future per case cost more than an instant
        # case itself (about 40 us a case at concurrency 4).
        finished: SimpleQueue[CaseRecords | BaseException | None] = SimpleQueue()
        while True:
            claims.dry = False
            threads = [threading.Thread(target=self._work, args=(run_id, claims, run_case, finished),
                                        name=f"run-{run_id}-{index}", daemon=True)
                       for index in range(self.concurrency)]
            for thread in threads:
                thread.start()
            try:
                running = len(threads)
                while running:
                    if not self._cancel.is_set():
                        claims.refill()
                    try:
                        item = finished.get(timeout=window.wait_s(self.cancel_poll_seconds))
                    except Empty:
                        item = None
                    else:
                        if item is None:  # a thread found the queue dry, or stopped on a cancel
                            running -= 1
                        elif isinstance(item, BaseException):
                            raise item
                        else:
                            window.add(item)
                            tally.ran += 1
                    if self._cancel_requested(run_id):
                        claims.wake()
                    if window.due():
                        self._commit(run_id, window.take(), claims, tally)
            finally:
                self._stop_threads.set()
                claims.wake()
                for thread in threads:
                    thread.join()
                self._stop_threads.clear()
            self._commit(run_id, window.take(), claims, tally)
            if self._cancel.is_set() or self.db(self.store.queued_cases, run_id) == 0:
                return self._cancel.is_set()
            self._cancel.wait(self.idle_poll_s)

    def _work(self, run_id: str, claims: _Claims, run_case: CaseFunction,
              finished: SimpleQueue[CaseRecords | BaseException | None]) -> None:
        """One of ``concurrency`` case threads: run claimed cases until the queue is dry, a cancel, or the runner
        stops its threads; then say so with None. An error that must stop the worker (the database gone, the disk
        full) is handed over to be raised."""
        try:
            while not self._cancel.is_set() and not self._stop_threads.is_set():
                key = claims.take(self.cancel_poll_seconds)
                if key is not None:
                    finished.put(self._run_one(run_id, claims, key, run_case))
                elif claims.dry:
                    break
        except BaseException as exc:  # noqa: BLE001 - raised again in the runner's thread
            finished.put(exc)
        finished.put(None)

    def _cancel_requested(self, run_id: str) -> bool:
        """Whether to stop submitting: ``cancel()`` here, or a cancel requested through the store (polled)."""
        now = time.monotonic()
        if now - self._last_poll >= self.cancel_poll_seconds:
            self._last_poll = now
            if self.db(self.store.get_run, run_id).status == RunStatus.CANCELLING:
                self._cancel.set()
        return self._cancel.is_set()

    def _commit(self, run_id: str, unwritten: list[CaseRecords], claims: _Claims, tally: _Tally) -> None:
        if not unwritten:
            return
        done_claims = claims.completed_by(unwritten)
        # A commit that failed (the database went away) is redone whole when it is back; stored results are
        # re-read first, so a commit that did land is not doubled.
        written = self.db(self.store.save_case_records, unwritten, done_claims)
        # A case not written was finished by another worker first (its claim had expired); its result stands.
        for records, was_written in zip(unwritten, written, strict=True):
            if was_written:
                tally.count(records)
        self._emit(tally.progress(run_id))

    def _run_one(self, run_id: str, claims: _Claims, key: tuple[str, int], run_case: CaseFunction) -> CaseRecords:
        case_id, repetition = key
        started = utc_now()
        ctx = RecordingContext(run_id, case_id, repetition, self.settings, self.models)
        try:
            case = claims.find(case_id)
            if case is None:
                raise LookupError(f"case {case_id} is in the run's queue but not among the cases this worker "
                                  "loaded; its inputs differ from the run's")
            outcome = run_case(case, ctx)
        except (DatabaseUnavailable, StoreFullError):  # not the case's fault: the worker stops, a resume redoes it
            raise
        except Exception as exc:  # noqa: BLE001 - any case error is data to record, not a reason to stop the run
            result = CaseResult(run_id=run_id, case_id=case_id, repetition=repetition,
                                status=CaseStatus.FAILED, error=describe_error(exc), started_at=started,
                                finished_at=utc_now())
        else:
            result = CaseResult(run_id=run_id, case_id=case_id, repetition=repetition, status=CaseStatus.OK,
                                output=outcome.output, metrics=outcome.metrics, scores=outcome.scores,
                                started_at=started,
                                finished_at=utc_now())
        return CaseRecords(result=result, turns=ctx.turns, judgements=ctx.judgements, model_calls=ctx.model_calls)

    def _emit(self, progress: Progress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)
