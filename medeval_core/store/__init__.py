"""The SQLModel tables and the only code that opens database sessions.

``Store`` is the union of the store's concerns, each in a module of its own: ``runs``, ``leases`` (case leases
and workers), ``results``, ``traces`` (turns, judgements, model calls), ``annotations``, ``cache`` (a key-value
cache any benchmark may keep under its own namespace); ``tables`` holds the run-record tables and ``engine`` the
engine, sessions and write transactions they share.

SQLite (WAL, foreign keys on) is the default; any SQLAlchemy URL works through ``MEDEVAL_DB_URL``. The unique
key on (run, case, repetition) is what makes resume idempotent: a finished case can never be written twice.
The schema is under Alembic (``migrations/``): opening a ``Store`` upgrades an older database to head, keeping
its rows; ``upgrade(url)`` does the same without opening one."""

from __future__ import annotations

import threading

from sqlmodel import SQLModel  # noqa: F401 - tests and migrations reach the metadata here

from medeval_core.errors import DuplicateResultError, StoreError
from medeval_core.store.annotations import AnnotationStore
from medeval_core.store.cache import CacheEntryRow, CacheStore
from medeval_core.store.engine import make_engine, redact_url
from medeval_core.store.judge_budget import JudgeBudgetSlotRow  # noqa: F401 - its table joins the metadata
from medeval_core.store.leases import HOST, LeaseStore, QueueKeys
from medeval_core.store.migrations import upgrade
from medeval_core.store.model_backends import ModelBackendRow  # noqa: F401 - its table joins the metadata
from medeval_core.store.results import ResultStore
from medeval_core.store.runs import new_run_id
from medeval_core.store.tables import (
    AnnotationRow,
    CaseClaimRow,
    CaseResultRow,
    JudgementRow,
    ModelCallRow,
    RunRow,
    RunWorkerRow,
    TurnRow,
)
from medeval_core.store.traces import TraceStore


class Store(LeaseStore, ResultStore, TraceStore, AnnotationStore, CacheStore):
    """All reads and writes of medeval's records. Methods open and close their own short sessions."""


__all__ = [
    "HOST",
    "AnnotationRow",
    "CacheEntryRow",
    "CaseClaimRow",
    "CaseResultRow",
    "DuplicateResultError",
    "JudgementRow",
    "ModelCallRow",
    "QueueKeys",
    "RunRow",
    "RunWorkerRow",
    "Store",
    "StoreError",
    "TurnRow",
    "make_engine",
    "new_run_id",
    "open_store",
    "redact_url",
    "upgrade",
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
