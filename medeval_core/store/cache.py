"""A key-value cache of JSON values that any benchmark may keep in the store (revision 0011_generic_cache): a
value computed once (a priced test name, say) is reused by later runs and by every worker of a run. Each user
keeps its keys under a namespace of its own, so the store knows no user."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, UniqueConstraint
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, SQLModel, select

from medeval_core.records import utc_now
from medeval_core.store.engine import StoreBase


class CacheEntryRow(SQLModel, table=True):
    """One cached value under (namespace, key); the first value written for a key stands."""

    __tablename__ = "cache_entries"
    __table_args__ = (UniqueConstraint("namespace", "key", name="uq_cache_entry"),)

    id: int | None = Field(default=None, primary_key=True)
    namespace: str
    key: str
    value: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utc_now)


class CacheStore(StoreBase):
    """The key-value cache."""

    def cached(self, namespace: str, key: str) -> dict[str, Any] | None:
        """The value cached under ``key`` of ``namespace``, or None."""
        statement = select(CacheEntryRow.value).where(CacheEntryRow.namespace == namespace, CacheEntryRow.key == key)
        with self.session() as session:
            found = session.exec(statement).first()
        return dict(found) if found is not None else None

    def cache(self, namespace: str, key: str, value: dict[str, Any]) -> None:
        """Keep ``value`` under ``key`` of ``namespace``; a value another worker cached first for the key stands."""
        with self._write_lock, self.session() as session:
            session.add(CacheEntryRow(namespace=namespace, key=key, value=value))
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
