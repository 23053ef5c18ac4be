"""Case results: the runner's group commit and the reads of summaries, pages and exports."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from pydantic import BaseModel
from sqlalchemy import JSON, Table, Text, cast, func, or_
from sqlalchemy.engine import Connection, Dialect, Row
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.types import TypeEngine
from sqlmodel import select

from medeval_core.errors import DuplicateResultError, StoreError
from medeval_core.memory import gc_paused
from medeval_core.records import (
    CaseRecords,
    CaseResult,
    CaseStatus,
    utc_now,
)
from medeval_core.store.engine import StoreBase, core_table, json_text
from medeval_core.store.tables import (
    CaseClaimRow,
    CaseResultRow,
    JudgementRow,
    ModelCallRow,
    TurnRow,
)


class ResultStore(StoreBase):
    """A run's case results."""

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

    def save_case_records(self, batch: Sequence[CaseRecords], done_claims: Sequence[int] = ()) -> list[bool]:
        """Write finished cases (result, turns, judgements, model calls) in one transaction: the runner's group
        commit. Returns, per case, whether it was written; a case already finished (by another worker or an
        earlier attempt) keeps its stored result and records, and a failed one is replaced with its records.
        ``done_claims`` (ids from ``claim_cases`` whose every case has a result once this batch is stored) are
        marked done in the same transaction, so a claim is never done without its results.
        """
        if not batch:
            return []
        for attempt in range(1, 6):
            try:
                return self._write_case_records(batch, done_claims)
            except (IntegrityError, OperationalError) as exc:
                # A concurrent writer stored one of these cases (unique key) or held the lock past the busy
                # timeout: the next attempt re-reads what is stored and writes only what is still missing.
                if attempt == 5:
                    raise StoreError(f"Could not store {len(batch)} case results: {exc.orig}") from exc
        raise AssertionError("unreachable")

    def _write_case_records(self, batch: Sequence[CaseRecords], done_claims: Sequence[int]) -> list[bool]:
        run_ids = {item.result.run_id for item in batch}
        results_table = core_table(CaseResultRow)
        with self._write_lock, self.engine.begin() as connection:
            if done_claims:
                claims, ids = core_table(CaseClaimRow), sorted(set(done_claims))
                for start in range(0, len(ids), 900):
                    connection.execute(claims.update().where(claims.c.id.in_(ids[start:start + 900])).values(done=True))
            stored: dict[tuple[str, str, int], str] = {}
            for run_id in run_ids:
                case_ids = sorted({item.result.case_id for item in batch if item.result.run_id == run_id})
                stored.update({(run_id, case_id, rep): status for (case_id, rep), status
                               in stored_statuses(connection, run_id, case_ids).items()})
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
                for table in (results_table, core_table(TurnRow)):
                    connection.execute(table.delete().where(
                        table.c.run_id == run_id, table.c.case_id == case_id, table.c.repetition == repetition))
            if keep:
                # The records are flat (each field a column, no nested model, no extra fields): their fields are
                # read as they are, without model_dump's deep copy of every payload, which JSON-encoding copies
                # again.
                _insert_rows(connection, results_table, [item.result for item in keep])
                now = utc_now()
                for table, records in (
                    (core_table(TurnRow), [t for item in keep for t in item.turns]),
                    (core_table(JudgementRow), [j for item in keep for j in item.judgements]),
                    (core_table(ModelCallRow), [c for item in keep for c in item.model_calls]),
                ):
                    _insert_rows(connection, table, records, {"created_at": now})
        return written

    def results(self, run_id: str, status: CaseStatus | None = None) -> list[CaseResult]:
        """A run's results in insertion order. Read with SQLAlchemy Core, the JSON columns decoded in one call, and
        built without re-validation (the rows were validated on the way in)."""
        table = core_table(CaseResultRow)
        statement = select(*_result_columns(table)).where(table.c.run_id == run_id)
        if status is not None:
            statement = statement.where(table.c.status == status)
        with gc_paused(), self.engine.connect() as connection:
            rows = connection.execute(statement.order_by(table.c.id)).all()
            return _result_records(rows)

    def metric_rows(self, run_id: str) -> list[tuple[str, int, dict[str, Any]]]:
        """(case id, repetition, metrics) of a run's finished results, in insertion order: what summaries need,
        without the outputs, scores and timestamps."""
        table = core_table(CaseResultRow)
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
        table = core_table(CaseResultRow)
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
        table = core_table(CaseResultRow)
        with self.engine.connect() as connection:
            count, newest = connection.execute(
                select(func.count(), func.max(table.c.id)).where(table.c.run_id == run_id)).one()
        return int(count), newest

    def result(self, run_id: str, case_id: str, repetition: int = 0) -> CaseResult | None:
        table = core_table(CaseResultRow)
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
        table = core_table(CaseResultRow)
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


def stored_statuses(connection: Connection, run_id: str, case_ids: Sequence[str]) -> dict[tuple[str, int], str]:
    """The status of each stored result of the run for ``case_ids``, by (case id, repetition). PostgreSQL: one
    statement with the ids as an array; SQLite: driver-level IN lists of 900. SQLAlchemy's expanding IN compiles a
    bind parameter per id on every call, which cost more than the query (a group commit checks thousands of ids,
    and so does a claim on a resumed run)."""
    if connection.dialect.name == "postgresql":
        return {(case_id, rep): status for case_id, rep, status in connection.exec_driver_sql(
            "SELECT case_id, repetition, status FROM case_results WHERE run_id = %s "
            "AND case_id = ANY(%s::varchar[])", (run_id, list(case_ids)))}
    mark = _placeholder(connection.dialect)
    statuses: dict[tuple[str, int], str] = {}
    for start in range(0, len(case_ids), 900):
        chunk = case_ids[start:start + 900]
        statuses.update({(case_id, rep): status for case_id, rep, status in connection.exec_driver_sql(
            f"SELECT case_id, repetition, status FROM case_results WHERE run_id = {mark} "
            f"AND case_id IN ({', '.join([mark] * len(chunk))})", (run_id, *chunk))})
    return statuses


def _placeholder(dialect: Dialect) -> str:
    """The driver's parameter mark, for SQL written for the driver itself."""
    return "?" if dialect.paramstyle == "qmark" else "%s"


def _insert_rows(connection: Connection, table: Table, records: Sequence[BaseModel],
                 constants: dict[str, Any] | None = None) -> None:
    """Insert one row per record (flat records of one type: each field a column) with ``constants`` (column: one
    value for every row) in the connection's transaction: COPY on PostgreSQL, one driver-level ``executemany`` on
    SQLite. Each value goes through its column type's own bind processor, so what is stored is what
    ``table.insert()`` would store; SQLAlchemy's generic per-row parameter handling (about 45 % of a runner's write
    at thousands of results per second) is skipped."""
    if not records:
        return
    dialect = connection.dialect
    constants = constants or {}
    fields = list(vars(records[0]))
    keys = [*fields, *constants]

    def processed(key: str, column: list[Any]) -> list[Any]:
        process = _driver_processor(table.c[key].type, dialect)
        return column if process is None else list(map(process, column))

    # Column by column, read straight from the records: one map per column type instead of a generator step per
    # value, and no dict per row (a dialogue benchmark writes ten turns per case).
    by_column = [processed(key, list(map(attrgetter(key), records))) for key in fields]
    by_column += [processed(key, [value]) * len(records) for key, value in constants.items()]
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
    marks = ", ".join([_placeholder(dialect)] * len(keys))
    connection.exec_driver_sql(f"INSERT INTO {quote.format_table(table)} ({columns}) VALUES ({marks})", values)


def _driver_processor(column_type: TypeEngine[Any], dialect: Dialect) -> Callable[[Any], Any] | None:
    """The column type's bind processor, except for JSON on PostgreSQL: COPY takes the serializer's text as it is,
    where SQLAlchemy's processor wraps each value in psycopg's ``Json`` for psycopg to call the same serializer on
    (the runner wrote 21 % more results per second at concurrency 1 without the wrapper)."""
    if dialect.name == "postgresql" and isinstance(column_type, JSON):
        return json_text
    return column_type.dialect_impl(dialect).bind_processor(dialect)


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


