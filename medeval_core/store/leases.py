"""Case leases and workers: a run's queue of work, claimed by the processes executing it."""

from __future__ import annotations

import os
import socket
import zlib
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
from medeval_core.store.runs import RunStore
from medeval_core.store.tables import (
    CaseLeaseRow,
    CaseResultRow,
    RunRow,
    RunWorkerRow,
)


class LeaseStore(RunStore):
    """Every process executing a run is a worker (a row in run_workers with a heartbeat). The run's work is a queue
    of lease rows; workers claim rows in queue order, extend their claims with the heartbeat, and mark them done
    with the results. An expired claim (its worker stopped heart-beating) is claimable again. A wave starts as
    its length alone (runs.queue_total); claims give its keys rows a chunk at a time (runs.queue_cursor), so a
    run of 134,529 cases starts without writing 134,529 rows."""

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
        ``run_changes`` are applied to the run. The queue is recorded as its length only: ``claim_cases`` writes
        its lease rows a chunk at a time. Returns whether this worker started the wave (else it joins the wave in
        progress)."""
        workers, leases, runs = core_table(RunWorkerRow), core_table(CaseLeaseRow), core_table(RunRow)
        with self._write_transaction(lock_run=run_id) as connection:
            alive = _alive_workers(connection, run_id)
            connection.execute(workers.insert(), [worker.model_dump()])
            if alive:
                return False
            connection.execute(leases.delete().where(leases.c.run_id == run_id))
            connection.execute(runs.update().where(runs.c.id == run_id).values(
                **run_changes, queue_total=len(keys), queue_cursor=0))
        return True

    def claim_cases(self, run_id: str, worker_id: str, keys: QueueKeys, limit: int, lease_s: float,
                    grouped: bool = False) -> list[tuple[int, str, int]]:
        """Claim up to ``limit`` queued or expired cases of the run for ``lease_s`` seconds, in queue order:
        (lease id, case id, repetition); ``grouped``: whole claim groups (the groups of the first ``limit`` free
        cases, so a claim may hold more). PostgreSQL skips rows another worker is claiming at this moment
        (FOR UPDATE SKIP LOCKED); SQLite serialises claims (BEGIN IMMEDIATE).

        ``keys`` is the wave's key sequence (every worker of a run loaded the same inputs, so the same sequence):
        when fewer than ``limit`` cases are free and some keys have no lease row yet, the next chunk of them
        (``QUEUE_CHUNK`` or ``limit``, whichever is more) gets its rows, less those already finished. Grouped
        claims write every remaining key at once, so a claim group is never split between rows written and keys
        not yet written (a claim would take the group's written part and another worker the rest)."""
        now = utc_now()
        leases = core_table(CaseLeaseRow)
        is_free = (leases.c.run_id == run_id, leases.c.done == false(),
                   or_(leases.c.worker_id.is_(None), leases.c.expires_at < now))
        column = leases.c.claim_group if grouped else leases.c.id

        def pick(connection: Connection) -> list[int]:
            if grouped:
                return self._pick_groups(connection, run_id, is_free, limit)
            return list(connection.execute(select(column).where(*is_free).order_by(leases.c.id).limit(limit)
                                           .with_for_update(skip_locked=True)).scalars())

        def claim(connection: Connection, picked: list[int]) -> list[tuple[int, str, int]]:
            if not picked:
                return []
            # Two statements, not UPDATE ... WHERE x IN (SELECT ... SKIP LOCKED): PostgreSQL may evaluate that
            # subquery while the UPDATE already holds rows of a group, skip them as locked and pick more groups.
            statement = (leases.update().where(*is_free, column.in_(picked))
                         .values(worker_id=worker_id, expires_at=now + timedelta(seconds=lease_s),
                                 attempts=leases.c.attempts + 1)
                         .returning(leases.c.id, leases.c.case_id, leases.c.repetition))
            return sorted((int(i), case_id, int(rep)) for i, case_id, rep in connection.execute(statement))

        def short(picked: list[int]) -> bool:  # a grouped claim writes every key the first time it is short
            return grouped or len(picked) < limit

        with self._write_transaction() as connection:
            picked = pick(connection)
            if not short(picked) or not _unwritten_keys(connection, run_id):
                return claim(connection, picked)
        # Short of free cases while keys wait: write more rows, serialised by the run's lock. A transaction of
        # its own, since the run's lock must come before any lease row's (join_run and finish_run take them in
        # that order), and the claim above already holds some.
        chunk = len(keys) if grouped else max(limit, QUEUE_CHUNK)
        with self._write_transaction(lock_run=run_id) as connection:
            picked = pick(connection)
            while short(picked) and _write_queue_chunk(connection, run_id, keys, chunk):
                picked = pick(connection)
            return claim(connection, picked)

    @staticmethod
    def _pick_groups(connection: Connection, run_id: str, is_free: Sequence[Any], limit: int) -> list[int]:
        """The claim groups of the first ``limit`` free cases that this transaction can have. PostgreSQL: a group
        is taken with a transaction-scoped advisory try-lock on (run, group), never a wait, so two workers never
        split a group or deadlock over its rows (row locks on part of a group would); SQLite's claims are
        serialised already."""
        leases = core_table(CaseLeaseRow)
        first = select(leases.c.claim_group).where(*is_free).order_by(leases.c.id).limit(limit)
        groups = list(dict.fromkeys(connection.execute(first).scalars()))
        if connection.dialect.name != "postgresql" or not groups:
            return groups
        run_key = zlib.crc32(run_id.encode()) & 0x7FFFFFFF
        return [group for group in groups if connection.execute(
            select(func.pg_try_advisory_xact_lock(run_key, group))).scalar()]

    def heartbeat(self, worker_id: str, lease_s: float) -> None:
        """The worker is alive: its row and its undone claims expire ``lease_s`` seconds from now."""
        now = utc_now()
        expires = now + timedelta(seconds=lease_s)
        workers, leases = core_table(RunWorkerRow), core_table(CaseLeaseRow)
        with self._write_lock, self.engine.begin() as connection:
            connection.execute(workers.update().where(workers.c.id == worker_id).values(
                heartbeat_at=now, expires_at=expires))
            connection.execute(leases.update().where(leases.c.worker_id == worker_id, leases.c.done == false())
                               .values(expires_at=expires))

    def release_cases(self, worker_id: str) -> None:
        """Give back the worker's undone claims (a cancel or a stop): other workers may claim them at once."""
        leases = core_table(CaseLeaseRow)
        with self._write_lock, self.engine.begin() as connection:
            connection.execute(leases.update().where(leases.c.worker_id == worker_id, leases.c.done == false())
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
        """Cases of the run's current wave not yet done (queued, or claimed by a worker). The keys without lease
        rows yet count whole: some of them may have finished before the wave, which their rows would leave out."""
        with self.engine.connect() as connection:
            return _queued(connection, run_id)

    def finish_run(self, run_id: str, final: Callable[[], dict[str, Any]], *, when: str) -> bool:
        """End the run's wave: under the run's lock, and only when ``when`` holds ("drained": no case of the wave
        is left undone, its keys without lease rows included; "alone": no worker is alive), write ``final()`` (its
        status with its summary and finish time) and close the wave (its lease rows dropped), all in one
        transaction: a run is never left finished without its summary. Returns whether it was written."""
        leases, runs = core_table(CaseLeaseRow), core_table(RunRow)
        with self._write_transaction(lock_run=run_id) as connection:
            left = _queued(connection, run_id) if when == "drained" else len(_alive_workers(connection, run_id))
            if left:
                return False
            connection.execute(runs.update().where(runs.c.id == run_id).values(
                **final(), queue_total=None, queue_cursor=None))
            connection.execute(leases.delete().where(leases.c.run_id == run_id))
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

QUEUE_CHUNK = 5000
"""Keys given lease rows at a time: a claim that writes a chunk costs a few milliseconds, where a whole
test split of 134,529 cases would cost the run's start about half a second."""


class QueueKeys:
    """A wave's keys in run order, by index: every case id for repetition 0, then for 1, and so on, each with its
    claim group. A group is one solver group (``claim_group(case id)``) of one repetition, and a case the solver
    does not group is a group of its own (a negative number), so every case is claimable. Keys are made when
    sliced: the store reads a chunk at a time, never the whole sequence."""

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


def _unwritten_keys(connection: Connection, run_id: str) -> int:
    """How many keys of the run's wave have no lease row yet."""
    runs = core_table(RunRow)
    row = connection.execute(select(runs.c.queue_total, runs.c.queue_cursor).where(runs.c.id == run_id)).first()
    # A wave opened before lazily written queues (both unset) has every row written.
    return 0 if row is None or row.queue_total is None else row.queue_total - (row.queue_cursor or 0)


def _queued(connection: Connection, run_id: str) -> int:
    leases = core_table(CaseLeaseRow)
    undone = connection.execute(select(func.count()).select_from(leases).where(
        leases.c.run_id == run_id, leases.c.done == false())).scalar()
    return int(undone or 0) + _unwritten_keys(connection, run_id)


def _write_queue_chunk(connection: Connection, run_id: str, keys: QueueKeys, chunk: int) -> bool:
    """Give the wave's next ``chunk`` keys lease rows, less those with a finished (ok) result, and advance the
    run's cursor past them. The caller holds the run's lock. Returns False when no key was left to write."""
    runs = core_table(RunRow)
    row = connection.execute(select(runs.c.queue_total, runs.c.queue_cursor).where(runs.c.id == run_id)).one()
    if row.queue_total is None or row.queue_cursor >= row.queue_total:
        return False
    stop = min(row.queue_total, row.queue_cursor + chunk)
    batch = keys.slice(row.queue_cursor, stop)
    finished = _finished_among(connection, run_id, sorted({key[0] for key in batch}))
    _insert_queue(connection, run_id, [key for key in batch if key[:2] not in finished])
    connection.execute(runs.update().where(runs.c.id == run_id).values(queue_cursor=stop))
    return True


def _finished_among(connection: Connection, run_id: str, case_ids: list[str]) -> set[tuple[str, int]]:
    """(case id, repetition) of the run's ok results for ``case_ids``. PostgreSQL: one statement with the ids as
    an array (a chunk's 900-id IN lists cost more than its insert there). Filtering in the INSERT instead (NOT
    EXISTS) let PostgreSQL's planner, which expects a run to have few results, scan them once per key."""
    if connection.dialect.name == "postgresql":
        return {(case_id, rep) for case_id, rep in connection.exec_driver_sql(
            "SELECT case_id, repetition FROM case_results WHERE run_id = %s AND status = %s "
            "AND case_id = ANY(%s::varchar[])", (run_id, CaseStatus.OK.value, case_ids))}
    results = core_table(CaseResultRow)
    finished: set[tuple[str, int]] = set()
    for start in range(0, len(case_ids), 900):
        finished.update((case_id, rep) for case_id, rep in connection.execute(
            select(results.c.case_id, results.c.repetition).where(
                results.c.run_id == run_id, results.c.status == CaseStatus.OK,
                results.c.case_id.in_(case_ids[start:start + 900]))))
    return finished


def _insert_queue(connection: Connection, run_id: str, keys: Sequence[QueueKey]) -> None:
    """Lease rows, in queue order, written by the driver directly: SQLAlchemy's per-row parameter processing
    would cost several times the insert. PostgreSQL gets them in one statement from three arrays (an executemany
    costs a round trip per row there)."""
    if not keys:
        return
    if connection.dialect.name == "postgresql":
        case_ids, repetitions, groups = zip(*keys, strict=True)
        connection.exec_driver_sql(
            "INSERT INTO case_leases (run_id, case_id, repetition, claim_group, attempts, done) "
            "SELECT %s, case_id, repetition, claim_group, 0, false "
            "FROM unnest(%s::varchar[], %s::integer[], %s::integer[]) AS t(case_id, repetition, claim_group)",
            (run_id, list(case_ids), list(repetitions), list(groups)))
        return
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    connection.exec_driver_sql(
        f"INSERT INTO case_leases (run_id, case_id, repetition, claim_group, attempts, done) "
        f"VALUES ({mark}, {mark}, {mark}, {mark}, 0, false)",
        [(run_id, *key) for key in keys])


