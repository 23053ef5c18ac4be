"""The engine (SQLite pragmas, JSON of records), the store's sessions and its write transactions."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Table, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlmodel import Session, SQLModel, create_engine, select

from medeval_core.errors import StoreError, one_line
from medeval_core.redaction import mask_credentials, redact, register_secret
from medeval_core.store import outage
from medeval_core.store.migrations import ensure_schema
from medeval_core.store.tables import RunRow

T = TypeVar("T")


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


json_text = json.JSONEncoder(default=_record_as_json).encode
"""``json.dumps(value, default=_record_as_json)``, without building an encoder per value (json.dumps does when
given ``default``): a runner writes four JSON columns per case."""


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        # Timestamps are stored without a zone and meant as UTC: the session's zone must not shift them. A host
        # that does not answer fails a connection in 10 s, so a worker's outage retries see it (not the OS's
        # two-minute TCP timeout).
        return create_engine(url, pool_pre_ping=True, json_serializer=json_text,
                             connect_args={"options": "-c timezone=UTC", "connect_timeout": 10})
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, json_serializer=json_text)
    database = parsed.database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, json_serializer=json_text)
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def redact_url(url: str) -> str:
    """The URL without any credential (userinfo password, ``password`` query parameter, libpq key=value
    password), for the sidebar, logs and errors; works on text SQLAlchemy cannot parse too."""
    return mask_credentials(url)

class StoreBase:
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

    @contextmanager
    def _write_transaction(self, lock_run: str | None = None) -> Iterator[Connection]:
        """A write transaction that takes its locks first. SQLite: BEGIN IMMEDIATE takes the database's write lock
        before the first read, so no two workers read the same free claim. PostgreSQL: ``lock_run`` locks that
        run's row (joining a run, finishing it and making a new claim on its queue are serialised), always before
        any claim row in the transaction; taking over a free claim locks its row FOR UPDATE SKIP LOCKED. The run's
        lock is FOR NO KEY UPDATE, not FOR UPDATE: storing a result checks its foreign key with a KEY SHARE lock on
        the run's row, which FOR UPDATE would make wait for a claim being made, or, while it holds claim rows a
        joining or finishing worker deletes, deadlock with it."""
        with self._write_lock, self.engine.begin() as connection:
            if self.engine.dialect.name == "sqlite":
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            elif lock_run is not None:
                runs = core_table(RunRow)
                connection.execute(select(runs.c.id).where(runs.c.id == lock_run).with_for_update(key_share=True))
            yield connection


def core_table(model: type[SQLModel]) -> Table:
    """A table model's Core table (SQLModel sets ``__table__`` at class creation; typing does not know it)."""
    return model.__table__  # type: ignore[attr-defined]


