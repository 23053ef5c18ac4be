"""The SQLModel tables and the only code that opens database sessions.

SQLite (WAL, foreign keys on) is the default; any SQLAlchemy URL works through ``MEDEVAL_DB_URL``. The unique
key on (run, case, repetition) is what makes resume idempotent: a finished case can never be written twice.
The schema is under Alembic (``migrations/``): opening a ``Store`` upgrades an older database to head, keeping
its rows; ``upgrade(url)`` does the same without opening one.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import JSON, Column, Index, Table, Text, UniqueConstraint, cast, event, false, func, or_, text
from sqlalchemy.engine import Connection, Engine, Row, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError
from sqlmodel import Field, Session, SQLModel, col, create_engine, select

from medeval_core.errors import DuplicateResultError, StoreError, one_line
from medeval_core.memory import gc_paused
from medeval_core.records import (
    Annotation,
    CaseRecords,
    CaseResult,
    CaseStatus,
    Judgement,
    ModelCall,
    RunConfig,
    RunKind,
    RunStatus,
    Turn,
    utc_now,
)
from medeval_core.redaction import mask_credentials, redact, register_secret
from medeval_core.store import outage
from medeval_core.store.judge_budget import JudgeBudgetSlotRow  # noqa: F401 - its table joins the metadata
from medeval_core.store.migrations import ensure_schema, upgrade
from medeval_core.store.model_backends import ModelBackendRow  # noqa: F401 - its table joins the metadata

T = TypeVar("T")


class RunRow(SQLModel, table=True):
    __tablename__ = "runs"

    id: str = Field(primary_key=True)
    benchmark: str = Field(index=True)
    label: str = ""
    kind: str = Field(default=RunKind.BATCH, index=True, sa_column_kwargs={"server_default": RunKind.BATCH.value})
    source_run_id: str | None = Field(default=None, index=True)
    status: str = Field(default=RunStatus.PENDING, index=True)
    config: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    settings_hash: str = ""
    versions: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    expected_cases: int | None = None
    queue_total: int | None = None
    """Keys in the current wave's queue (``QueueKeys``); None when no wave is open."""
    queue_cursor: int | None = None
    """How many of the wave's keys have lease rows: the rest are queued but not yet written (see ``claim_cases``)."""
    summary: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    error: str | None = None
    created_at: datetime = Field(default_factory=utc_now)
    started_at: datetime | None = None
    finished_at: datetime | None = None


class CaseResultRow(SQLModel, table=True):
    __tablename__ = "case_results"
    __table_args__ = (UniqueConstraint("run_id", "case_id", "repetition", name="uq_result_run_case_rep"),
                      # result_counts from the index alone (revision 0010_result_status_index)
                      Index("ix_case_results_run_status", "run_id", "status"))

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True)
    case_id: str
    repetition: int = 0
    status: str
    output: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    metrics: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    scores: dict[str, Any] = Field(default_factory=dict,
                                   sa_column=Column(JSON, nullable=False, server_default=text("'{}'")))
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    def to_record(self) -> CaseResult:
        return CaseResult.model_validate(self, from_attributes=True)


class TurnRow(SQLModel, table=True):
    __tablename__ = "turns"
    __table_args__ = (UniqueConstraint("run_id", "case_id", "repetition", "index", name="uq_turn"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True)
    case_id: str
    repetition: int = 0
    index: int
    actor: str
    action: str
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    cost: float = 0.0
    created_at: datetime = Field(default_factory=utc_now)


class JudgementRow(SQLModel, table=True):
    __tablename__ = "judgements"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str | None = Field(default=None, foreign_key="runs.id", index=True)
    case_id: str = Field(index=True)
    repetition: int = 0
    judge_name: str
    judge_model: str = ""
    attempt: int = 1
    ok: bool
    verdict: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    latency_s: float | None = None
    http_status: int | None = None
    error: str | None = None
    created_at: datetime = Field(default_factory=utc_now)


class ModelCallRow(SQLModel, table=True):
    __tablename__ = "model_calls"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str | None = Field(default=None, foreign_key="runs.id", index=True)
    case_id: str = ""
    repetition: int = 0
    role: str
    model: str
    messages_sha256: str
    latency_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    attempt: int = 1
    ok: bool = True
    error: str | None = None
    created_at: datetime = Field(default_factory=utc_now)


class AnnotationRow(SQLModel, table=True):
    __tablename__ = "annotations"

    id: int | None = Field(default=None, primary_key=True)
    item_id: str = Field(index=True)
    annotator: str = Field(index=True)
    task: str
    criterion: str
    value: str
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    supersedes_id: int | None = None
    """The row this answer replaces (an edit); the newest row of an annotator, item and criterion is current."""
    created_at: datetime = Field(default_factory=utc_now)


class CaseLeaseRow(SQLModel, table=True):
    """One (case, repetition) of a run's current wave of work. A worker claims queued or expired rows (holding
    them until ``expires_at``, extended by its heartbeat) and marks them done in the transaction that stores
    their results; a new wave (a resume when no worker is alive) drops the run's rows, and claims write the new
    wave's a chunk at a time (``Store.claim_cases``)."""

    __tablename__ = "case_leases"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id", "repetition", name="uq_lease_run_case_rep"),
        # A claim reads a run's undone rows in queue order: this index makes it a range scan, not a sort.
        Index("ix_case_leases_queue", "run_id", "done", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id")  # looked up through the two indexes that begin with it
    case_id: str
    repetition: int = 0
    worker_id: str | None = None
    expires_at: datetime | None = None
    attempts: int = 0
    done: bool = False
    claim_group: int | None = None
    """Cases the solver computes together (one generation batch of a repetition): claimed whole."""


class RunWorkerRow(SQLModel, table=True):
    """A process executing a run: alive while ``expires_at`` (its last heartbeat plus the lease time) is ahead
    and ``finished_at`` is unset."""

    __tablename__ = "run_workers"

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True)
    host: str = ""
    pid: int = 0
    threads: int = 1
    started_at: datetime = Field(default_factory=utc_now)
    heartbeat_at: datetime = Field(default_factory=utc_now)
    expires_at: datetime = Field(default_factory=utc_now)
    finished_at: datetime | None = None


class TestPriceRow(SQLModel, table=True):
    """A priced test name (SDBench costing), cached per (method, model, name) so that re-costing reuses it."""

    __tablename__ = "test_prices"
    __table_args__ = (UniqueConstraint("method", "model", "name", name="uq_test_price"),)

    id: int | None = Field(default=None, primary_key=True)
    method: str
    model: str
    name: str
    price: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utc_now)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Several runner threads and the app may write at once; wait for the lock instead of failing.
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _record_as_json(value: object) -> Any:
    """JSON columns hold what a solver wrote; a record (pydantic model) inside an output, score or payload is
    stored as the JSON of its fields, as if the solver had dumped it."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _json_text(value: Any) -> str:
    return json.dumps(value, default=_record_as_json)


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        # Timestamps are stored without a zone and meant as UTC: the session's zone must not shift them. A host
        # that does not answer fails a connection in 10 s, so a worker's outage retries see it (not the OS's
        # two-minute TCP timeout).
        return create_engine(url, pool_pre_ping=True, json_serializer=_json_text,
                             connect_args={"options": "-c timezone=UTC", "connect_timeout": 10})
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, json_serializer=_json_text)
    database = parsed.database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, json_serializer=_json_text)
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def redact_url(url: str) -> str:
    """The URL without any credential (userinfo password, ``password`` query parameter, libpq key=value
    password), for the sidebar, logs and errors; works on text SQLAlchemy cannot parse too."""
    return mask_credentials(url)


class Store:
    """All reads and writes of medeval's records. Methods open and close their own short sessions."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine = make_engine(url)
        except ArgumentError:
            raise StoreError(f"The database URL {redact_url(url)!r} is not a SQLAlchemy URL; set MEDEVAL_DB_URL to "
                             "one such as postgresql+psycopg://USER@HOST/DB or sqlite:///path/medeval.db.") from None
        register_secret(make_url(url).password)
        try:
            self.schema_action = ensure_schema(self.engine, SQLModel.metadata)
        except Exception as exc:
            raise StoreError(f"Could not bring the database {redact_url(url)} to medeval's schema: "
                             f"{one_line(redact(str(exc)))}") from exc
        self._write_lock = threading.Lock()

    def ride_out_outage(self, call: Callable[..., T], *args: Any, on_return: Callable[[], None] | None = None,
                        **kwargs: Any) -> T:
        """``call(*args, **kwargs)`` retried while this database is out of reach (``outage.ride_out``): what a
        worker does with every store operation, so that it rides out a database restart."""
        return outage.ride_out(self.url, call, *args, on_return=on_return, **kwargs)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    # Runs -------------------------------------------------------------------------------------------------

    def create_run(self, config: RunConfig, run_id: str | None = None, expected_cases: int | None = None) -> RunRow:
        row = RunRow(
            id=run_id or new_run_id(config.benchmark),
            benchmark=config.benchmark,
            label=config.label,
            kind=config.kind,
            source_run_id=config.source_run_id,
            config=config.model_dump(mode="json"),
            settings_hash=config.settings_hash,
            versions=config.versions,
            expected_cases=expected_cases,
        )
        with self.session() as session:
            if session.get(RunRow, row.id) is not None:
                raise StoreError(f"A run with id {row.id!r} already exists; resume it or choose another id.")
            session.add(row)
            session.commit()
            session.refresh(row)
        return row

    def get_run(self, run_id: str) -> RunRow:
        with self.session() as session:
            row = session.get(RunRow, run_id)
        if row is None:
            raise StoreError(f"No run with id {run_id!r}; list runs with `python -m medeval_core runs list`.")
        return row

    def find_run(self, run_id: str) -> RunRow | None:
        with self.session() as session:
            return session.get(RunRow, run_id)

    def list_runs(self, benchmark: str | None = None, limit: int = 200) -> list[RunRow]:
        statement = select(RunRow).order_by(RunRow.created_at.desc()).limit(limit)  # type: ignore[attr-defined]
        if benchmark:
            statement = statement.where(RunRow.benchmark == benchmark)
        with self.session() as session:
            return list(session.exec(statement))

    def runs_scoring(self, source_run_id: str) -> list[RunRow]:
        """The score runs over ``source_run_id``, oldest first."""
        statement = (select(RunRow).where(RunRow.source_run_id == source_run_id, RunRow.kind == RunKind.SCORE)
                     .order_by(RunRow.created_at))  # type: ignore[arg-type]
        with self.session() as session:
            return list(session.exec(statement))

    def update_run(self, run_id: str, **changes: Any) -> RunRow:
        with self.session() as session:
            row = session.get(RunRow, run_id)
            if row is None:
                raise StoreError(f"No run with id {run_id!r}.")
            for key, value in changes.items():
                setattr(row, key, value)
            session.add(row)
            session.commit()
            session.refresh(row)
        return row

    def delete_session_run(self, run_id: str) -> None:
        """Remove an interactive session and everything it recorded, in one transaction; a batch or score run is
        refused (their results are kept whatever happens)."""
        row = self.get_run(run_id)
        if row.kind != RunKind.SESSION:
            raise StoreError(f"Run {run_id!r} is a {row.kind} run; only a walkthrough or lesion session can be "
                             "deleted.")
        with self._write_transaction() as connection:
            for model in (TurnRow, JudgementRow, ModelCallRow, CaseResultRow, CaseLeaseRow, RunWorkerRow, RunRow):
                table = _table(model)
                column = table.c.id if model is RunRow else table.c.run_id
                connection.execute(table.delete().where(column == run_id))

    def last_turn_times(self, run_ids: Sequence[str]) -> dict[str, datetime]:
        """When each run's latest turn was written (runs without a turn are absent)."""
        if not run_ids:
            return {}
        table = _table(TurnRow)
        with self.engine.connect() as connection:
            rows = connection.execute(select(table.c.run_id, func.max(table.c.created_at))
                                      .where(table.c.run_id.in_(list(run_ids))).group_by(table.c.run_id)).all()
        return {run_id: moment for run_id, moment in rows if moment is not None}

    def request_cancel(self, run_id: str) -> RunRow:
        """Ask a running run (in any process) to stop after its in-flight cases; it then marks itself cancelled."""
        row = self.get_run(run_id)
        if row.status not in (RunStatus.RUNNING, RunStatus.PENDING):
            raise StoreError(f"Run {run_id!r} is {row.status}; only a pending or running run can be cancelled.")
        if not self.live_workers(run_id):  # nobody would see the request: it is cancelled at once
            return self.update_run(run_id, status=RunStatus.CANCELLED, finished_at=utc_now())
        return self.update_run(run_id, status=RunStatus.CANCELLING)

    # Case leases and workers ----------------------------------------------------------------------------------
    # Every process executing a run is a worker (a row in run_workers with a heartbeat). The run's work is a queue
    # of lease rows; workers claim rows in queue order, extend their claims with the heartbeat, and mark them done
    # with the results. An expired claim (its worker stopped heart-beating) is claimable again. A wave starts as
    # its length alone (runs.queue_total); claims give its keys rows a chunk at a time (runs.queue_cursor), so a
    # run of 134,529 cases starts without writing 134,529 rows.

    @contextmanager
    def _write_transaction(self, lock_run: str | None = None) -> Iterator[Connection]:
        """A write transaction that takes its locks first. SQLite: BEGIN IMMEDIATE takes the database's write lock
        before the first read, so no two workers read the same free leases. PostgreSQL: ``lock_run`` locks that
        run's row (joining a run, finishing it and writing its queue's next chunk are serialised), always before any
        lease row in the transaction; claims lock their rows FOR UPDATE SKIP LOCKED. The run's lock is FOR NO KEY
        UPDATE, not FOR UPDATE: storing a result checks its foreign key with a KEY SHARE lock on the run's row,
        which FOR UPDATE would make wait for a chunk being written, or, while it holds lease rows a joining or
        finishing worker deletes, deadlock with it."""
        with self._write_lock, self.engine.begin() as connection:
            if self.engine.dialect.name == "sqlite":
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            elif lock_run is not None:
                runs = _table(RunRow)
                connection.execute(select(runs.c.id).where(runs.c.id == lock_run).with_for_update(key_share=True))
            yield connection

    def join_run(self, run_id: str, worker: RunWorkerRow, keys: QueueKeys, run_changes: dict[str, Any]) -> bool:
        """Register ``worker`` on the run. When no other worker is alive, start a new wave: the run's queue becomes
        every key of ``keys`` without a finished (ok) result, in that order (failed cases are retried), and
        ``run_changes`` are applied to the run. The queue is recorded as its length only: ``claim_cases`` writes
        its lease rows a chunk at a time. Returns whether this worker started the wave (else it joins the wave in
        progress)."""
        workers, leases, runs = _table(RunWorkerRow), _table(CaseLeaseRow), _table(RunRow)
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
        leases = _table(CaseLeaseRow)
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
        leases = _table(CaseLeaseRow)
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
        workers, leases = _table(RunWorkerRow), _table(CaseLeaseRow)
        with self._write_lock, self.engine.begin() as connection:
            connection.execute(workers.update().where(workers.c.id == worker_id).values(
                heartbeat_at=now, expires_at=expires))
            connection.execute(leases.update().where(leases.c.worker_id == worker_id, leases.c.done == false())
                               .values(expires_at=expires))

    def release_cases(self, worker_id: str) -> None:
        """Give back the worker's undone claims (a cancel or a stop): other workers may claim them at once."""
        leases = _table(CaseLeaseRow)
        with self._write_lock, self.engine.begin() as connection:
            connection.execute(leases.update().where(leases.c.worker_id == worker_id, leases.c.done == false())
                               .values(worker_id=None, expires_at=None))

    def finish_worker(self, worker_id: str) -> None:
        workers = _table(RunWorkerRow)
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
        leases, runs = _table(CaseLeaseRow), _table(RunRow)
        with self._write_transaction(lock_run=run_id) as connection:
            left = _queued(connection, run_id) if when == "drained" else len(_alive_workers(connection, run_id))
            if left:
                return False
            connection.execute(runs.update().where(runs.c.id == run_id).values(
                **final(), queue_total=None, queue_cursor=None))
            connection.execute(leases.delete().where(leases.c.run_id == run_id))
        return True

    # Case results -----------------------------------------------------------------------------------------

    def save_result(self, result: CaseResult) -> CaseResultRow:
        """Insert a result. A failed result may be replaced by a retry; a finished (ok) one never is."""
        with self._write_lock, self.session() as session:
            existing = session.exec(
                select(CaseResultRow).where(
                    CaseResultRow.run_id == result.run_id,
                    CaseResultRow.case_id == result.case_id,
                    CaseResultRow.repetition == result.repetition,
                )
            ).first()
            if existing is not None and existing.status == CaseStatus.OK:
                raise DuplicateResultError(
                    f"Case {result.case_id!r} (repetition {result.repetition}) of run {result.run_id!r} "
                    "is already finished; its result is kept."
                )
            row = existing or CaseResultRow(run_id=result.run_id, case_id=result.case_id, status=result.status)
            for key, value in result.model_dump(exclude={"run_id", "case_id"}).items():
                setattr(row, key, value)
            session.add(row)
            try:
                session.commit()
            except IntegrityError as exc:
                session.rollback()
                if "UNIQUE" in str(exc.orig).upper():
                    raise DuplicateResultError(
                        f"Case {result.case_id!r} of run {result.run_id!r} was written concurrently; the first is kept."
                    ) from exc
                raise StoreError(f"The result of case {result.case_id!r} was rejected ({exc.orig}); "
                                 f"does run {result.run_id!r} exist?") from exc
            session.refresh(row)
        return row

    def save_case_records(self, batch: Sequence[CaseRecords], leases: Sequence[int] = ()) -> list[bool]:
        """Write finished cases (result, turns, judgements, model calls) in one transaction: the runner's group
        commit. Returns, per case, whether it was written; a case already finished (by another worker or an
        earlier attempt) keeps its stored result and records, and a failed one is replaced with its records.
        ``leases`` (ids from ``claim_cases``) are marked done in the same transaction, so a case is never both
        stored and still claimable.
        """
        if not batch:
            return []
        for attempt in range(1, 6):
            try:
                return self._write_case_records(batch, leases)
            except (IntegrityError, OperationalError) as exc:
                # A concurrent writer stored one of these cases (unique key) or held the lock past the busy
                # timeout: the next attempt re-reads what is stored and writes only what is still missing.
                if attempt == 5:
                    raise StoreError(f"Could not store {len(batch)} case results: {exc.orig}") from exc
        raise AssertionError("unreachable")

    def _write_case_records(self, batch: Sequence[CaseRecords], leases: Sequence[int]) -> list[bool]:
        run_ids = {item.result.run_id for item in batch}
        results_table = _table(CaseResultRow)
        with self._write_lock, self.engine.begin() as connection:
            if leases:
                lease_table = _table(CaseLeaseRow)
                for start in range(0, len(leases), 900):
                    connection.execute(lease_table.update().where(lease_table.c.id.in_(leases[start:start + 900]))
                                       .values(done=True))
            stored: dict[tuple[str, str, int], str] = {}
            for run_id in run_ids:
                case_ids = sorted({item.result.case_id for item in batch if item.result.run_id == run_id})
                for start in range(0, len(case_ids), 900):
                    rows = connection.execute(
                        select(results_table.c.case_id, results_table.c.repetition, results_table.c.status).where(
                            results_table.c.run_id == run_id,
                            results_table.c.case_id.in_(case_ids[start:start + 900]),
                        )
                    )
                    stored.update({(run_id, case_id, rep): status for case_id, rep, status in rows})
            written: list[bool] = []
            replace: list[tuple[str, str, int]] = []
            keep: list[CaseRecords] = []
            seen: set[tuple[str, str, int]] = set()
            for item in batch:
                key = (item.result.run_id, item.result.case_id, item.result.repetition)
                previous = stored.get(key)
                if previous == CaseStatus.OK or key in seen:
                    written.append(False)
                    continue
                seen.add(key)
                if previous is not None:
                    replace.append(key)
                keep.append(item)
                written.append(True)
            for run_id, case_id, repetition in replace:
                for table in (results_table, _table(TurnRow)):
                    connection.execute(table.delete().where(
                        table.c.run_id == run_id, table.c.case_id == case_id, table.c.repetition == repetition))
            if keep:
                # The records are flat (each field a column, no nested model, no extra fields): their field dicts
                # (``vars``) are the rows, without model_dump's deep copy of every payload, which JSON-encoding
                # copies again.
                _insert_rows(connection, results_table, [vars(item.result) for item in keep])
                for table, records in (
                    (_table(TurnRow), [t for item in keep for t in item.turns]),
                    (_table(JudgementRow), [j for item in keep for j in item.judgements]),
                    (_table(ModelCallRow), [c for item in keep for c in item.model_calls]),
                ):
                    if records:
                        now = utc_now()
                        _insert_rows(connection, table, [{"created_at": now, **vars(r)} for r in records])
        return written

    def results(self, run_id: str, status: CaseStatus | None = None) -> list[CaseResult]:
        """A run's results in insertion order. Read with SQLAlchemy Core, the JSON columns decoded in one call, and
        built without re-validation (the rows were validated on the way in)."""
        table = _table(CaseResultRow)
        statement = select(*_result_columns(table)).where(table.c.run_id == run_id)
        if status is not None:
            statement = statement.where(table.c.status == status)
        with gc_paused(), self.engine.connect() as connection:
            rows = connection.execute(statement.order_by(table.c.id)).all()
            return _result_records(rows)

    def metric_rows(self, run_id: str) -> list[tuple[str, int, dict[str, Any]]]:
        """(case id, repetition, metrics) of a run's finished results, in insertion order: what summaries need,
        without the outputs, scores and timestamps."""
        table = _table(CaseResultRow)
        statement = (select(table.c.case_id, table.c.repetition, cast(table.c.metrics, Text))
                     .where(table.c.run_id == run_id, table.c.status == CaseStatus.OK.value).order_by(table.c.id))
        with gc_paused(), self.engine.connect() as connection:
            rows = _driver_rows(connection, statement)
            metrics = _decode_json([row[2] for row in rows])
            return [(row[0], row[1], values) for row, values in zip(rows, metrics, strict=True)]

    def results_frame(self, run_id: str) -> Any:
        """A run's finished results as a pandas DataFrame: case_id, repetition, then one column per metric."""
        import pandas as pd

        rows = self.metric_rows(run_id)
        frame = pd.DataFrame.from_records([row[2] for row in rows])
        frame.insert(0, "repetition", [row[1] for row in rows])
        frame.insert(0, "case_id", [row[0] for row in rows])
        return frame

    def case_page(self, run_id: str, status: CaseStatus | None = None, search: str = "", offset: int = 0,
                  limit: int = 50) -> tuple[list[tuple[str, int, str, str | None, dict[str, Any]]], int]:
        """One page of a run's results in insertion order, (case id, repetition, status, error, metrics) each,
        without their outputs, and how many results match: ``status`` and ``search`` (a piece of the case id or
        the error, any case) filter in SQL, so a page of a 134,529-result run reads 50 rows."""
        table = _table(CaseResultRow)
        where = [table.c.run_id == run_id]
        if status is not None:
            where.append(table.c.status == status)
        needle = search.strip()
        if needle:
            pattern = f"%{needle}%"
            where.append(or_(table.c.case_id.ilike(pattern), table.c.error.ilike(pattern)))
        with self.engine.connect() as connection:
            total = int(connection.execute(select(func.count()).where(*where)).scalar() or 0)
            columns: list[Any] = [table.c.case_id, table.c.repetition, table.c.status, table.c.error,
                                  cast(table.c.metrics, Text)]
            rows = connection.execute(
                select(*columns).where(*where).order_by(table.c.id).offset(offset).limit(limit)).all()
        metrics = _decode_json([row[4] for row in rows])
        return [(row[0], row[1], row[2], row[3], values) for row, values in zip(rows, metrics, strict=True)], total

    def results_stamp(self, run_id: str) -> tuple[int, int | None]:
        """(number of results, newest row id) of a run: changes whenever a result is added or replaced, so it
        keys caches of summaries."""
        table = _table(CaseResultRow)
        with self.engine.connect() as connection:
            count, newest = connection.execute(
                select(func.count(), func.max(table.c.id)).where(table.c.run_id == run_id)).one()
        return int(count), newest

    def result(self, run_id: str, case_id: str, repetition: int = 0) -> CaseResult | None:
        table = _table(CaseResultRow)
        statement = select(*_result_columns(table)).where(
            table.c.run_id == run_id, table.c.case_id == case_id, table.c.repetition == repetition)
        with self.engine.connect() as connection:
            rows = connection.execute(statement).all()
        return _result_records(rows)[0] if rows else None

    def finished_keys(self, run_id: str) -> set[tuple[str, int]]:
        statement = select(CaseResultRow.case_id, CaseResultRow.repetition).where(
            CaseResultRow.run_id == run_id, CaseResultRow.status == CaseStatus.OK
        )
        with self.session() as session:
            return {(case_id, repetition) for case_id, repetition in session.exec(statement)}

    def finished_since(self, run_id: str, since: datetime) -> int:
        """How many of the run's results finished at or after ``since`` (a run's rate since it restarted)."""
        table = _table(CaseResultRow)
        with self.engine.connect() as connection:
            return int(connection.execute(select(func.count()).where(
                table.c.run_id == run_id, table.c.finished_at >= since)).scalar() or 0)

    def result_counts(self, run_id: str) -> dict[str, int]:
        statement = (
            select(CaseResultRow.status, func.count())
            .where(CaseResultRow.run_id == run_id)
            .group_by(CaseResultRow.status)
        )
        with self.session() as session:
            return dict(session.exec(statement).all())

    # Turns, judgements, annotations --------------------------------------------------------------------------

    def add_turns(self, turns: Sequence[Turn]) -> None:
        """Write a dialogue's turns in one transaction: all of them or none."""
        with self._write_lock, self.session() as session:
            session.add_all(TurnRow(**turn.model_dump()) for turn in turns)
            session.commit()

    def turns(self, run_id: str, case_id: str, repetition: int = 0) -> list[Turn]:
        statement = (
            select(TurnRow)
            .where(TurnRow.run_id == run_id, TurnRow.case_id == case_id, TurnRow.repetition == repetition)
            .order_by(col(TurnRow.index))
        )
        with self.session() as session:
            return [Turn.model_validate(row, from_attributes=True) for row in session.exec(statement)]

    def add_judgement(self, judgement: Judgement) -> JudgementRow:
        row = JudgementRow(**judgement.model_dump())
        with self._write_lock, self.session() as session:
            session.add(row)
            session.commit()
            session.refresh(row)
        return row

    def judgements(self, run_id: str | None = None, case_id: str | None = None) -> list[Judgement]:
        statement = select(JudgementRow).order_by(col(JudgementRow.id))
        if run_id is not None:
            statement = statement.where(JudgementRow.run_id == run_id)
        if case_id is not None:
            statement = statement.where(JudgementRow.case_id == case_id)
        with self.session() as session:
            return [Judgement.model_validate(row, from_attributes=True) for row in session.exec(statement)]

    def add_model_calls(self, calls: Sequence[ModelCall]) -> None:
        with self._write_lock, self.session() as session:
            session.add_all(ModelCallRow(**call.model_dump()) for call in calls)
            session.commit()

    def model_calls(self, run_id: str, case_id: str | None = None) -> list[ModelCall]:
        statement = select(ModelCallRow).where(ModelCallRow.run_id == run_id).order_by(col(ModelCallRow.id))
        if case_id is not None:
            statement = statement.where(ModelCallRow.case_id == case_id)
        with self.session() as session:
            return [ModelCall.model_validate(row, from_attributes=True) for row in session.exec(statement)]

    def add_annotation(self, annotation: Annotation) -> AnnotationRow:
        row = AnnotationRow(**annotation.model_dump())
        with self._write_lock, self.session() as session:
            session.add(row)
            session.commit()
            session.refresh(row)
        return row

    def annotations(self, task: str | None = None) -> list[AnnotationRow]:
        statement = select(AnnotationRow).order_by(col(AnnotationRow.id))
        if task is not None:
            statement = statement.where(AnnotationRow.task == task)
        with self.session() as session:
            return list(session.exec(statement))

    def cached_price(self, method: str, model: str, name: str) -> dict[str, Any] | None:
        statement = select(TestPriceRow.price).where(TestPriceRow.method == method, TestPriceRow.model == model,
                                                     TestPriceRow.name == name)
        with self.session() as session:
            found = session.exec(statement).first()
        return dict(found) if found is not None else None

    def cache_price(self, method: str, model: str, name: str, price: dict[str, Any]) -> None:
        """Keep a test's price; a price another worker cached first for the same key stands."""
        with self._write_lock, self.session() as session:
            session.add(TestPriceRow(method=method, model=model, name=name, price=price))
            try:
                session.commit()
            except IntegrityError:
                session.rollback()

    def counts(self) -> dict[str, int]:
        """Row counts per table, for the sidebar's store status."""
        tables = {"runs": RunRow, "case_results": CaseResultRow, "judgements": JudgementRow,
                  "model_calls": ModelCallRow, "annotations": AnnotationRow}
        with self.session() as session:
            return {name: session.exec(select(func.count()).select_from(table)).one() for name, table in tables.items()}


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
    workers = _table(RunWorkerRow)
    statement = workers.select().where(workers.c.finished_at.is_(None), workers.c.expires_at > utc_now())
    if run_id is not None:
        statement = statement.where(workers.c.run_id == run_id)
    return [row for row in connection.execute(statement)
            if row.host != HOST or _process_exists(row.pid)]


QueueKey = tuple[str, int, int | None]
"""(case id, repetition, claim group) of one case of a wave."""

QUEUE_CHUNK = 5000
"""Keys given lease rows at a time: a claim that writes a chunk costs a few milliseconds, where the whole DDXPlus
test split (134,529 rows) would cost the run's start about half a second."""


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
    runs = _table(RunRow)
    row = connection.execute(select(runs.c.queue_total, runs.c.queue_cursor).where(runs.c.id == run_id)).first()
    # A wave opened before lazily written queues (both unset) has every row written.
    return 0 if row is None or row.queue_total is None else row.queue_total - (row.queue_cursor or 0)


def _queued(connection: Connection, run_id: str) -> int:
    leases = _table(CaseLeaseRow)
    undone = connection.execute(select(func.count()).select_from(leases).where(
        leases.c.run_id == run_id, leases.c.done == false())).scalar()
    return int(undone or 0) + _unwritten_keys(connection, run_id)


def _write_queue_chunk(connection: Connection, run_id: str, keys: QueueKeys, chunk: int) -> bool:
    """Give the wave's next ``chunk`` keys lease rows, less those with a finished (ok) result, and advance the
    run's cursor past them. The caller holds the run's lock. Returns False when no key was left to write."""
    runs = _table(RunRow)
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
    results = _table(CaseResultRow)
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


def _insert_rows(connection: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts with the same keys, column names) in the connection's transaction: COPY on
    PostgreSQL, one driver-level ``executemany`` on SQLite. Each value goes through its column type's own bind
    processor, so what is stored is what ``table.insert()`` would store; SQLAlchemy's generic per-row parameter
    handling (about 45 % of a runner's write at thousands of results per second) is skipped."""
    if not rows:
        return
    dialect = connection.dialect
    keys = list(rows[0])
    processors = [table.c[key].type.dialect_impl(dialect).bind_processor(dialect) for key in keys]
    # Column by column: one map per column type instead of a generator step per value (a DDXPlus run writes ten
    # turns per patient, and this loop was a tenth of its case phase).
    by_column = []
    for key, process in zip(keys, processors, strict=True):
        column = [row[key] for row in rows]
        if process is not None:
            first = column[0]
            # A column holding one object throughout (the batch's ``created_at``) is converted once.
            column = ([process(first)] * len(column) if all(value is first for value in column)
                      else list(map(process, column)))
        by_column.append(column)
    values = list(zip(*by_column, strict=True))
    quote = dialect.identifier_preparer
    columns = ", ".join(quote.format_column(table.c[key]) for key in keys)
    if dialect.name == "postgresql":
        driver = connection.connection.driver_connection
        copy_sql = f"COPY {quote.format_table(table)} ({columns}) FROM STDIN"
        with driver.cursor() as cursor, cursor.copy(copy_sql) as copy:  # type: ignore[union-attr]
            for value in values:
                copy.write_row(value)
        return
    marks = ", ".join(("?" if dialect.paramstyle == "qmark" else "%s") for _ in keys)
    connection.exec_driver_sql(f"INSERT INTO {quote.format_table(table)} ({columns}) VALUES ({marks})", values)


def _driver_rows(connection: Connection, statement: Any) -> list[tuple[Any, ...]]:
    """The rows of ``statement`` (plain columns, parameters that need no conversion) from the driver's own cursor:
    over 100,000 rows SQLAlchemy's result rows cost more than the query itself (0.16 s against 0.07 s on
    SQLite)."""
    compiled = statement.compile(dialect=connection.dialect)
    values = tuple(compiled.params[name] for name in compiled.positiontup or ()) if compiled.positional \
        else compiled.params
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(compiled.string, values)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _table(model: type[SQLModel]) -> Table:
    """A table model's Core table (SQLModel sets ``__table__`` at class creation; typing does not know it)."""
    return model.__table__  # type: ignore[attr-defined]


_RESULT_FIELDS = tuple(CaseResult.model_fields)
_JSON_FIELDS = ("output", "metrics", "scores")
_STATUSES = {status.value: status for status in CaseStatus}


def _result_columns(table: Any) -> list[Any]:
    # JSON columns come back as text (CAST works on SQLite and PostgreSQL) and are decoded together below.
    return [cast(table.c[name], Text).label(name) if name in _JSON_FIELDS else table.c[name]
            for name in _RESULT_FIELDS]


def _decode_json(texts: Sequence[str | None]) -> list[Any]:
    """Decode many JSON documents in one ``json.loads`` call (per-call overhead dominates for small documents)."""
    if not texts:
        return []
    return json.loads("[" + ",".join(text if text is not None else "{}" for text in texts) + "]")


def _result_records(rows: Sequence[Row[Any]]) -> list[CaseResult]:
    """CaseResults from stored rows without re-validation: what ``CaseResult.model_construct`` does when every field
    is given (tests/test_store.py checks they equal validated records), at a fraction of its cost per row."""
    with gc_paused():
        return _construct_records(rows)


def _construct_records(rows: Sequence[Row[Any]]) -> list[CaseResult]:
    positions = [_RESULT_FIELDS.index(name) for name in _JSON_FIELDS]
    decoded = [_decode_json([row[position] for row in rows]) for position in positions]
    status_at = _RESULT_FIELDS.index("status")
    records = []
    new, set_attribute, fields = CaseResult.__new__, object.__setattr__, _RESULT_FIELDS
    for i, row in enumerate(rows):
        values = list(row)
        for position, column in zip(positions, decoded, strict=True):
            values[position] = column[i]
        values[status_at] = _STATUSES.get(values[status_at], values[status_at])
        record = new(CaseResult)
        set_attribute(record, "__dict__", dict(zip(fields, values, strict=True)))
        set_attribute(record, "__pydantic_fields_set__", set(fields))
        set_attribute(record, "__pydantic_extra__", None)
        set_attribute(record, "__pydantic_private__", None)
        records.append(record)
    return records


def new_run_id(benchmark: str) -> str:
    return f"{benchmark}-{utc_now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


__all__ = [
    "HOST", "AnnotationRow", "CaseLeaseRow", "CaseResultRow", "DuplicateResultError", "JudgementRow", "ModelCallRow",
    "QueueKeys", "RunRow", "RunWorkerRow", "Store", "StoreError", "TestPriceRow", "TurnRow", "make_engine",
    "new_run_id", "open_store", "redact_url", "upgrade",
]

# The annotation tables join SQLModel's metadata here, so every Store creates and checks them.
from medeval_core.store import annotation_tables  # noqa: E402, F401

_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()


def open_store(url: str) -> Store:
    """One ``Store`` (and so one connection pool) per URL per process."""
    with _stores_lock:
        if url not in _stores:
            _stores[url] = Store(url)
        return _stores[url]
