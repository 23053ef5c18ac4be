"""Case claims and workers: a run's queue of work, claimed in ranges by the processes executing it."""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import false, func, or_
from sqlalchemy.engine import Connection, Row
from sqlmodel import select

from medeval_core.errors import StoreError
from medeval_core.records import (
    CaseStatus,
    RunStatus,
    utc_now,
)
from medeval_core.store.engine import core_table
from medeval_core.store.results import stored_statuses
from medeval_core.store.runs import RunStore
from medeval_core.store.tables import (
    CaseClaimRow,
    CaseResultRow,
    RunRow,
    RunWorkerRow,
)


class LeaseStore(RunStore):
    """Every process executing a run is a worker (a row in run_workers with a heartbeat). The run's work is a queue
    of keys (``QueueKeys``) of which a wave records only its length (runs.queue_total) and how far it has been
    handed out (runs.queue_cursor); a worker claims the next range of keys (a row in case_claims), extends its
    claims with the heartbeat and marks one done in the transaction that stores the last of its results. An
    expired claim (its worker stopped heart-beating) is claimable again as a whole. So a run of 134,529 cases
    starts without writing a row per case, and a thousand fast cases cost one claim row, not a thousand."""

    def request_cancel(self, run_id: str) -> RunRow:
        """Ask a running run (in any process) to stop after its in-flight cases; it then marks itself cancelled."""
        row = self.get_run(run_id)
        if row.status not in (RunStatus.RUNNING, RunStatus.PENDING):
            raise StoreError(f"Run {run_id!r} is {row.status}; only a pending or running run can be cancelled.")
        if not self.live_workers(run_id):  # nobody would see the request: it is cancelled at once
            return self.update_run(run_id, status=RunStatus.CANCELLED, finished_at=utc_now())
        return self.update_run(run_id, status=RunStatus.CANCELLING)

    def join_run(self, run_id: str, worker: RunWorkerRow, keys: QueueKeys, run_changes: dict[str, Any]) -> bool:
        """Register ``worker`` on the run. When no other worker is alive, start a new wave: the run's queue becomes
        every key of ``keys`` without a finished (ok) result, in that order (failed cases are retried), and
        ``run_changes`` are applied to the run. The queue is recorded as its length only: finished keys are
        skipped as they are claimed. Returns whether this worker started the wave (else it joins the wave in
        progress)."""
        workers, claims, runs = core_table(RunWorkerRow), core_table(CaseClaimRow), core_table(RunRow)
        with self._write_transaction(lock_run=run_id) as connection:
            alive = _alive_workers(connection, run_id)
            connection.execute(workers.insert(), [worker.model_dump()])
            if alive:
                return False
            connection.execute(claims.delete().where(claims.c.run_id == run_id))
            results = core_table(CaseResultRow)
            has_finished = connection.execute(select(results.c.id).where(
                results.c.run_id == run_id, results.c.status == CaseStatus.OK.value).limit(1)).first() is not None
            connection.execute(runs.update().where(runs.c.id == run_id).values(
                **run_changes, queue_total=len(keys), queue_cursor=0, queue_has_finished=has_finished))
        return True

    def claim_cases(self, run_id: str, worker_id: str, keys: QueueKeys, limit: int, lease_s: float,
                    grouped: bool = False) -> list[tuple[int, str, int]]:
        """Claim cases of the run for ``lease_s`` seconds, in queue order: (claim id, case id, repetition) each.
        The first free claim (given back, or expired: its worker stopped heart-beating) is taken whole, less its
        keys finished meanwhile; when there is none, a new claim takes the next ``limit`` keys without a finished
        (ok) result from the run's cursor, and with ``grouped`` the rest of the last one's claim group too (a
        group is consecutive keys: ``QueueKeys``), so no two workers share a group. An empty list: nothing is left
        to claim now (other workers may still hold cases).

        ``keys`` is the wave's key sequence (every worker of a run loaded the same inputs, so the same sequence).
        PostgreSQL skips a free claim another worker is taking at this moment (FOR UPDATE SKIP LOCKED) and
        serialises new claims on the run's row lock; SQLite serialises every claim (BEGIN IMMEDIATE)."""
        claims = core_table(CaseClaimRow)
        now = utc_now()
        expires = now + timedelta(seconds=lease_s)
        is_free = (claims.c.run_id == run_id, claims.c.done == false(),
                   or_(claims.c.worker_id.is_(None), claims.c.expires_at < now))
        while True:
            with self._write_transaction() as connection:
                free = connection.execute(
                    select(claims.c.id, claims.c.start, claims.c.stop).where(*is_free).order_by(claims.c.start)
                    .limit(1).with_for_update(skip_locked=True)).first()
                if free is None:
                    break
                todo = _unfinished(connection, run_id, keys.slice(free.start, free.stop))
                connection.execute(claims.update().where(claims.c.id == free.id).values(
                    worker_id=worker_id, expires_at=expires, attempts=claims.c.attempts + 1, done=not todo))
            if todo:
                return [(free.id, case_id, repetition) for case_id, repetition in todo]
        # A new claim moves the run's cursor: serialised by the run's lock, taken before the claim's row is
        # written (join_run and finish_run take them in that order).
        with self._write_transaction(lock_run=run_id) as connection:
            runs = core_table(RunRow)
            wave = connection.execute(select(runs.c.queue_total, runs.c.queue_cursor, runs.c.queue_has_finished)
                                      .where(runs.c.id == run_id)).one()
            if wave.queue_total is None or wave.queue_cursor >= wave.queue_total:
                return []
            start, stop, todo = _next_range(connection, run_id, keys, wave, limit, grouped)
            connection.execute(runs.update().where(runs.c.id == run_id).values(queue_cursor=stop))
            if not todo:  # every key to the end was finished before this wave: no claim to hold
                return []
            claim_id = connection.execute(claims.insert().values(
                run_id=run_id, start=start, stop=stop, worker_id=worker_id, expires_at=expires, attempts=1,
                done=False).returning(claims.c.id)).scalar_one()
        return [(claim_id, case_id, repetition) for case_id, repetition in todo]

    def heartbeat(self, worker_id: str, lease_s: float) -> None:
        """The worker is alive: its row and its undone claims expire ``lease_s`` seconds from now."""
        now = utc_now()
        expires = now + timedelta(seconds=lease_s)
        workers, claims = core_table(RunWorkerRow), core_table(CaseClaimRow)
        with self._write_lock, self.engine.begin() as connection:
            connection.execute(workers.update().where(workers.c.id == worker_id).values(
                heartbeat_at=now, expires_at=expires))
            connection.execute(claims.update().where(claims.c.worker_id == worker_id, claims.c.done == false())
                               .values(expires_at=expires))

    def release_cases(self, worker_id: str) -> None:
        """Give back the worker's undone claims (a cancel or a stop): other workers may claim them at once."""
        claims = core_table(CaseClaimRow)
        with self._write_lock, self.engine.begin() as connection:
            connection.execute(claims.update().where(claims.c.worker_id == worker_id, claims.c.done == false())
                               .values(worker_id=None, expires_at=None))

    def finish_worker(self, worker_id: str) -> None:
        workers = core_table(RunWorkerRow)
        with self._write_lock, self.engine.begin() as connection:
            connection.execute(workers.update().where(workers.c.id == worker_id).values(finished_at=utc_now()))

    def live_workers(self, run_id: str) -> list[RunWorkerRow]:
        """The run's workers that are alive: not finished, heartbeat within their lease time, and (on this host)
        their process still there."""
        with self.engine.connect() as connection:
            return [RunWorkerRow.model_validate(row._asdict()) for row in _alive_workers(connection, run_id)]

    def live_worker_counts(self) -> dict[str, int]:
        """Live workers per run, for every run at once (the run list)."""
        with self.engine.connect() as connection:
            return dict(Counter(row.run_id for row in _alive_workers(connection)))

    def queued_cases(self, run_id: str) -> int:
        """Keys of the run's current wave not yet done: those not yet claimed and those of undone claims (queued,
        or held by a worker), each counted whole: some of them may have a finished result already, skipped when
        claimed. Zero exactly when the wave is drained."""
        with self.engine.connect() as connection:
            return _queued(connection, run_id)

    def finish_run(self, run_id: str, final: Callable[[], dict[str, Any]], *, when: str) -> bool:
        """End the run's wave: under the run's lock, and only when ``when`` holds ("drained": no case of the wave
        is left undone, its unclaimed keys included; "alone": no worker is alive), write ``final()`` (its status
        with its summary and finish time) and close the wave (its claims dropped), all in one transaction: a run
        is never left finished without its summary. Returns whether it was written."""
        claims, runs = core_table(CaseClaimRow), core_table(RunRow)
        with self._write_transaction(lock_run=run_id) as connection:
            left = _queued(connection, run_id) if when == "drained" else len(_alive_workers(connection, run_id))
            if left:
                return False
            connection.execute(runs.update().where(runs.c.id == run_id).values(
                **final(), queue_total=None, queue_cursor=None, queue_has_finished=None))
            connection.execute(claims.delete().where(claims.c.run_id == run_id))
        return True


HOST = socket.gethostname()


def _process_exists(pid: int) -> bool:
    """Whether the process runs. A killed worker whose parent has not reaped it (a zombie, e.g. when the app that
    started it was restarted and PID 1 does not reap) still answers signal 0, so Linux's state letter decides."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc here: signal 0 is all there is
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _alive_workers(connection: Connection, run_id: str | None = None) -> list[Row[Any]]:
    """Workers whose heartbeat is within their lease, less those on this host whose process is gone (a SIGKILLed
    worker here is dead at once, not only when its lease runs out)."""
    workers = core_table(RunWorkerRow)
    statement = workers.select().where(workers.c.finished_at.is_(None), workers.c.expires_at > utc_now())
    if run_id is not None:
        statement = statement.where(workers.c.run_id == run_id)
    return [row for row in connection.execute(statement)
            if row.host != HOST or _process_exists(row.pid)]


QueueKey = tuple[str, int, int | None]
"""(case id, repetition, claim group) of one case of a wave."""

SCAN_CHUNK = 5000
"""The most keys checked for finished results at once while a claim looks for its next unfinished ones (a resume
of a run that is mostly done skips many)."""


class QueueKeys:
    """A wave's keys in run order, by index: every case id for repetition 0, then for 1, and so on, each with its
    claim group. A group is one solver group (``claim_group(case id)``) of one repetition, and a case the solver
    does not group is a group of its own (a negative number), so every case is claimable. A solver's group must be
    consecutive cases of the run's order (a generation batch is): claims are ranges of keys, extended to the end of
    their last group. Keys are made when sliced: the store reads a range at a time, never the whole sequence."""

    def __init__(self, case_ids: Sequence[str], repetitions: int,
                 claim_group: Callable[[str], int | None] | None = None) -> None:
        self.case_ids = case_ids
        self.repetitions = repetitions
        self.claim_group = claim_group

    def __len__(self) -> int:
        return len(self.case_ids) * self.repetitions

    def slice(self, start: int, stop: int) -> list[QueueKey]:
        ids, group, per_rep = self.case_ids, self.claim_group, len(self.case_ids)
        keys: list[QueueKey] = []
        for index in range(max(start, 0), min(stop, len(self))):
            rep, position = divmod(index, per_rep)
            case_id = ids[position]
            if group is None:
                keys.append((case_id, rep, None))
                continue
            solver_group = group(case_id)
            keys.append((case_id, rep, solver_group * self.repetitions + rep if solver_group is not None
                         else -(index + 1)))
        return keys


def _queued(connection: Connection, run_id: str) -> int:
    runs, claims = core_table(RunRow), core_table(CaseClaimRow)
    wave = connection.execute(select(runs.c.queue_total, runs.c.queue_cursor).where(runs.c.id == run_id)).first()
    unclaimed = 0 if wave is None or wave.queue_total is None else wave.queue_total - wave.queue_cursor
    held = connection.execute(select(func.coalesce(func.sum(claims.c.stop - claims.c.start), 0)).where(
        claims.c.run_id == run_id, claims.c.done == false())).scalar()
    return unclaimed + int(held or 0)


def _next_range(connection: Connection, run_id: str, keys: QueueKeys, wave: Row[Any], limit: int,
                grouped: bool) -> tuple[int, int, list[tuple[str, int]]]:
    """The range a new claim takes from the wave's cursor: up to the ``limit``-th key without a finished result
    (and, ``grouped``, the rest of that key's group), as (start, stop, the unfinished keys in it). Keys are
    checked for results only when the run had some as the wave opened, a scan at a time, each twice the last."""
    cursor, total = wave.queue_cursor, wave.queue_total
    if not wave.queue_has_finished:
        stop = min(total, cursor + limit)
        todo = [key[:2] for key in keys.slice(cursor, stop)]
    else:
        todo, stop, scan = [], cursor, limit
        while stop < total and len(todo) < limit:
            batch = keys.slice(stop, min(total, stop + scan))
            finished = _finished_among(connection, run_id, sorted({key[0] for key in batch}))
            for key in batch:
                stop += 1
                if key[:2] not in finished:
                    todo.append(key[:2])
                    if len(todo) == limit:
                        break
            scan = min(2 * scan, SCAN_CHUNK)
    if grouped and todo:
        [(_, _, group)] = keys.slice(stop - 1, stop)
        end = stop
        while end < total and keys.slice(end, end + 1)[0][2] == group:
            end += 1
        todo.extend(_unfinished(connection, run_id, keys.slice(stop, end)) if wave.queue_has_finished
                    else [key[:2] for key in keys.slice(stop, end)])
        stop = end
    return cursor, stop, todo


def _unfinished(connection: Connection, run_id: str, batch: Sequence[QueueKey]) -> list[tuple[str, int]]:
    """(case id, repetition) of the keys in ``batch`` without a finished (ok) result, in order."""
    if not batch:
        return []
    finished = _finished_among(connection, run_id, sorted({key[0] for key in batch}))
    return [key[:2] for key in batch if key[:2] not in finished]


def _finished_among(connection: Connection, run_id: str, case_ids: list[str]) -> set[tuple[str, int]]:
    """(case id, repetition) of the run's ok results for ``case_ids``, looked up by id (``stored_statuses``).
    Filtering in an INSERT instead (NOT EXISTS) let PostgreSQL's planner, which expects a run to have few results,
    scan them once per key."""
    return {key for key, status in stored_statuses(connection, run_id, case_ids).items()
            if status == CaseStatus.OK.value}
