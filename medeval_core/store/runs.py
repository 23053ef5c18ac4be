"""Runs: create, read, update, delete a session run; row counts."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlmodel import select

from medeval_core.errors import StoreError
from medeval_core.records import (
    RunConfig,
    RunKind,
    utc_now,
)
from medeval_core.store.engine import StoreBase, core_table
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


class RunStore(StoreBase):
    """A run's row: its parameters, status, summary and timestamps."""

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
            for model in (TurnRow, JudgementRow, ModelCallRow, CaseResultRow, CaseClaimRow, RunWorkerRow, RunRow):
                table = core_table(model)
                column = table.c.id if model is RunRow else table.c.run_id
                connection.execute(table.delete().where(column == run_id))

    def last_turn_times(self, run_ids: Sequence[str]) -> dict[str, datetime]:
        """When each run's latest turn was written (runs without a turn are absent)."""
        if not run_ids:
            return {}
        table = core_table(TurnRow)
        with self.engine.connect() as connection:
            rows = connection.execute(select(table.c.run_id, func.max(table.c.created_at))
                                      .where(table.c.run_id.in_(list(run_ids))).group_by(table.c.run_id)).all()
        return {run_id: moment for run_id, moment in rows if moment is not None}

    def counts(self) -> dict[str, int]:
        """Row counts per table, for the sidebar's store status."""
        tables = {"runs": RunRow, "case_results": CaseResultRow, "judgements": JudgementRow,
                  "model_calls": ModelCallRow, "annotations": AnnotationRow}
        with self.session() as session:
            return {name: session.exec(select(func.count()).select_from(table)).one() for name, table in tables.items()}



def new_run_id(benchmark: str) -> str:
    return f"{benchmark}-{utc_now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


