"""Annotation answers."""

from __future__ import annotations

from sqlmodel import col, select

from medeval_core.records import (
    Annotation,
)
from medeval_core.store.engine import StoreBase
from medeval_core.store.tables import (
    AnnotationRow,
)


class AnnotationStore(StoreBase):
    """Annotators' answers."""

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

