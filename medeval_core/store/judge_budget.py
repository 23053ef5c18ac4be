"""The judge endpoints' request budgets, kept in the store so that every process using it shares one per endpoint
(revision 0008_judge_budget).

A row is one request's place in its endpoint's budget (``judge_budget_slots``): admitted at ``admitted_at``, in
flight while ``finished_at`` is unset, and held by its process's lease (``expires_at``, renewed while the process
waits for the response). It occupies the budget until one window after it finished; a row whose holder stopped
renewing (a killed process) counts as finished when its lease ran out. So a row occupies the budget while
``coalesce(finished_at, expires_at) > now - window``, and admissions are serialised per endpoint (SQLite: BEGIN
IMMEDIATE; PostgreSQL: a transaction-scoped advisory lock on the endpoint).

Times are seconds since the epoch on the database's clock (PostgreSQL's ``clock_timestamp()``; a SQLite store is
on one host, whose clock every process shares), so hosts whose clocks disagree still agree on every window."""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Index, Table, func, select
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Field, SQLModel


class JudgeBudgetSlotRow(SQLModel, table=True):
    __tablename__ = "judge_budget_slots"
    __table_args__ = (Index("ix_judge_budget_slots_endpoint", "endpoint"),)

    id: int | None = Field(default=None, primary_key=True)
    endpoint: str
    """sha256 of the endpoint's base URL and model (``endpoint_key``): no URL, so no credential, is stored."""
    holder: str
    tokens: int
    admitted_at: float
    expires_at: float
    finished_at: float | None = None


def endpoint_key(base_url: str, model: str) -> str:
    return hashlib.sha256(f"{base_url.rstrip('/')}\n{model}".encode()).hexdigest()


@dataclass(frozen=True)
class Budget:
    max_requests: int
    max_tokens: int
    window_s: float
    lease_s: float


@dataclass(frozen=True)
class Admission:
    """A slot id when admitted; else how long until room is known to come (None: only an answer still in flight
    can make room, so look again later)."""

    slot_id: int | None
    room_in_s: float | None = None


def _table() -> Table:
    return JudgeBudgetSlotRow.__table__  # type: ignore[attr-defined]


def _now(connection: Connection) -> float:
    if connection.dialect.name == "postgresql":
        return float(connection.execute(select(func.extract("epoch", func.clock_timestamp()))).scalar_one())
    return time.time()


@contextmanager
def _endpoint_transaction(engine: Engine, endpoint: str) -> Iterator[Connection]:
    with engine.begin() as connection:
        if connection.dialect.name == "sqlite":
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        elif connection.dialect.name == "postgresql":
            connection.execute(select(func.pg_advisory_xact_lock(zlib.crc32(endpoint.encode()) & 0x7FFFFFFF)))
        yield connection


def admit(engine: Engine, endpoint: str, holder: str, tokens: int, budget: Budget, finished: Sequence[int] = (),
          tidy: bool = False) -> Admission:
    """Take a place in the endpoint's budget for one request of ``tokens`` when both budgets have room. The same
    transaction first marks ``finished`` (this process's requests answered since it last wrote) as finished now,
    which frees them later than their answers did, never sooner; ``tidy`` also deletes the rows that left the
    window (done now and then: the admission itself only reads the rows still in it)."""
    slots = _table()
    with _endpoint_transaction(engine, endpoint) as connection:
        now = _now(connection)
        _mark_finished(connection, finished, now)
        released = func.coalesce(slots.c.finished_at, slots.c.expires_at)
        if tidy:
            connection.execute(slots.delete().where(slots.c.endpoint == endpoint,
                                                    released <= now - budget.window_s))
        rows = connection.execute(select(slots.c.finished_at, slots.c.expires_at, slots.c.tokens)
                                  .where(slots.c.endpoint == endpoint, released > now - budget.window_s)).all()
        used = sum(row.tokens for row in rows)
        if len(rows) < budget.max_requests and used + tokens <= budget.max_tokens:
            inserted = connection.execute(slots.insert().values(
                endpoint=endpoint, holder=holder, tokens=tokens, admitted_at=now,
                expires_at=now + budget.lease_s, finished_at=None).returning(slots.c.id))
            return Admission(slot_id=int(inserted.scalar_one()))
    # Rows whose end is known (finished, or their lease ran out) leave one window after it, earliest first.
    ending = sorted((row.finished_at if row.finished_at is not None else row.expires_at, row.tokens)
                    for row in rows if row.finished_at is not None or row.expires_at <= now)
    requests = len(rows)
    for end, spent in ending:
        requests, used = requests - 1, used - spent
        if requests < budget.max_requests and used + tokens <= budget.max_tokens:
            return Admission(slot_id=None, room_in_s=max(end + budget.window_s - now, 0.0))
    return Admission(slot_id=None)


def _mark_finished(connection: Connection, slot_ids: Sequence[int], now: float) -> None:
    if slot_ids:
        slots = _table()
        connection.execute(slots.update().where(slots.c.id.in_(list(slot_ids)), slots.c.finished_at.is_(None))
                           .values(finished_at=now))


def finish(engine: Engine, slot_ids: Sequence[int]) -> None:
    """The requests' answers (or failures) came back: their places are freed one window from now."""
    with engine.begin() as connection:
        _mark_finished(connection, slot_ids, _now(connection))


def renew(engine: Engine, slot_ids: Sequence[int], lease_s: float) -> None:
    """Extend the leases of requests still in flight (their process is alive, waiting for the answers)."""
    if not slot_ids:
        return
    slots = _table()
    with engine.begin() as connection:
        connection.execute(slots.update().where(slots.c.id.in_(list(slot_ids)), slots.c.finished_at.is_(None))
                           .values(expires_at=_now(connection) + lease_s))
