"""Turns, judgements and model calls: what a case recorded on its way."""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import col, select

from medeval_core.records import (
    Judgement,
    ModelCall,
    Turn,
)
from medeval_core.store.engine import StoreBase
from medeval_core.store.tables import (
    JudgementRow,
    ModelCallRow,
    TurnRow,
)


class TraceStore(StoreBase):
    """What a case recorded on its way."""

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

