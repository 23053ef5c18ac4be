"""Revision 0006_annotations on an existing database: a store at 0002 with runs, results and an answer is upgraded in
place, every row kept, and the annotation tables then take accounts, tasks and superseding answers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from medeval_core.annotation import accounts
from medeval_core.records import Annotation
from medeval_core.store import Store
from medeval_core.store.migrations import HEAD, alembic_config
from tests.test_migrations import old_database, schema_differences, table_rows

PREVIOUS = "0002_kinds_scores_model_calls"
NEW_TABLES = {"annotators", "sign_in_attempts", "annotation_tasks", "annotation_items", "annotation_assignments",
              "sign_in_sessions"}


def database_at_previous_revision(tmp_path: Path) -> str:
    from alembic import command

    url = old_database(tmp_path)
    engine = create_engine(url)
    with engine.begin() as connection:
        config = alembic_config(connection)
        command.stamp(config, "0001_baseline")
        command.upgrade(config, PREVIOUS)
    engine.dispose()
    return url


def test_upgrade_from_0002_keeps_every_row_and_adds_the_annotation_tables(tmp_path: Path) -> None:
    url = database_at_previous_revision(tmp_path)
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone() == (PREVIOUS,)
        assert not NEW_TABLES & {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    before = {table: table_rows(url, table) for table in ("runs", "case_results", "turns", "judgements",
                                                          "annotations", "model_calls")}
    assert before["annotations"]

    store = Store(url)
    assert store.schema_action == "upgraded"
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone() == (HEAD,)
    assert set(inspect(store.engine).get_table_names()) >= NEW_TABLES
    for table, rows in before.items():
        after = table_rows(url, table)
        assert [row[:len(rows[0])] if rows else row for row in after] == rows, table
    with store.engine.connect() as connection:
        [(old_supersedes,)] = connection.execute(text("SELECT supersedes_id FROM annotations")).all()
    assert old_supersedes is None  # the answer from before is current, superseding nothing

    accounts.add_annotator(store, "dr.ada", "a-long-passcode")
    first = store.add_annotation(Annotation(item_id="i1", annotator="dr.ada", task="t", criterion="c", value="x"))
    edit = store.add_annotation(Annotation(item_id="i1", annotator="dr.ada", task="t", criterion="c", value="y",
                                           supersedes_id=first.id))
    assert edit.supersedes_id == first.id and len(store.annotations()) == 3
    assert accounts.sign_in(store, "dr.ada", "a-long-passcode").name == "dr.ada"
    store.engine.dispose()
    assert schema_differences(url) == []


def test_the_annotation_tables_render_for_postgresql(capsys: pytest.CaptureFixture[str]) -> None:
    from alembic import command

    command.upgrade(alembic_config(url="postgresql://medeval@localhost/medeval"), f"{PREVIOUS}:head", sql=True)
    ddl = capsys.readouterr().out
    for table in NEW_TABLES:
        assert f"CREATE TABLE {table}" in ddl
    assert "ALTER TABLE annotations ADD COLUMN supersedes_id INTEGER" in ddl
    assert "_alembic_tmp" not in ddl
