"""The price cache."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from medeval_core.store.engine import StoreBase
from medeval_core.store.tables import (
    TestPriceRow,
)


class CacheStore(StoreBase):
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

