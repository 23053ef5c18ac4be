"""Alembic manages the store's schema: a database from before Alembic (commit 6a1c789) is upgraded in place with
every row kept, a new one is created at head, and the migrations end at exactly the models' schema."""

import json
import os
import sqlite3
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from medeval_core.records import CaseRecords, CaseResult, CaseStatus, ModelCall, RunKind, utc_now
from medeval_core.store import SQLModel, Store, upgrade
from medeval_core.store.migrations import BASELINE, HEAD, MIGRATIONS_DIR, alembic_config

OLD_SCHEMA = Path(__file__).resolve().parent / "data" / "store_6a1c789.sql"
OLD_ROWS = {"runs": 2, "case_results": 3, "turns": 2, "judgements": 1, "annotations": 1}


def old_database(tmp_path: Path) -> str:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:
        connection.executescript(OLD_SCHEMA.read_text())
    return f"sqlite:///{path}"


def table_rows(url: str, table: str) -> list[tuple]:
    engine = create_engine(url)
    with engine.connect() as connection:
        rows = [tuple(row) for row in connection.execute(text(f'SELECT * FROM "{table}" ORDER BY 1'))]
    engine.dispose()
    return rows


def database_with_a_running_run(db_url: str, revision: str, rows: str | list[str]) -> None:
    """The database at ``revision`` with one run, 'old', left running by that version, and its ``rows`` (INSERT
    or UPDATE statements)."""
    from alembic import command

    command.upgrade(alembic_config(url=db_url), revision)
    engine = create_engine(db_url)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO runs (id, benchmark, label, kind, status, config, settings_hash, versions, summary, "
            "created_at) VALUES ('old', 'demo', '', 'batch', 'running', '{}', '', '{}', '{}', '2026-01-01')"))
        for statement in [rows] if isinstance(rows, str) else rows:
            connection.execute(text(statement))
    engine.dispose()


def schema_differences(url: str) -> list:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = create_engine(url)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    engine.dispose()
    return differences


def test_head_constant_is_the_newest_revision() -> None:
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    assert scripts.get_current_head() == HEAD
    assert [r.revision for r in scripts.walk_revisions()][-1] == BASELINE
    assert (MIGRATIONS_DIR / "versions" / "__init__.py").exists()  # so the revisions install with the package


def test_a_database_from_before_alembic_is_upgraded_keeping_every_row(tmp_path: Path) -> None:
    url = old_database(tmp_path)
    before = {table: table_rows(url, table) for table in OLD_ROWS}
    assert {table: len(rows) for table, rows in before.items()} == OLD_ROWS

    store = Store(url)
    assert store.schema_action == "upgraded"
    columns = {table: {c["name"] for c in inspect(store.engine).get_columns(table)} for table in OLD_ROWS}
    assert {"kind", "source_run_id"} <= columns["runs"] and "scores" in columns["case_results"]
    assert "model_calls" in inspect(store.engine).get_table_names()
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
    for table, rows in before.items():
        after = table_rows(url, table)
        assert len(after) == len(rows)
        # The old columns keep their values; added columns come last, with their defaults.
        assert [row[:len(rows[0])] for row in after] == rows
    assert {run.id: run.kind for run in store.list_runs()} == {"ddi-old-1": RunKind.BATCH,
                                                              "ddxplus-old-2": RunKind.BATCH}
    [first, failed] = store.results("ddi-old-1")
    assert first.metrics == {"correct": True} and first.scores == {} and first.status == CaseStatus.OK
    assert failed.status == CaseStatus.FAILED and failed.error == "boom"
    assert [t.payload for t in store.turns("ddxplus-old-2", "p1")] == [{"q": "E_0"}, {"q": "E_1"}]

    # The upgraded database takes the new records.
    retry = CaseResult(run_id="ddi-old-1", case_id="c2", status=CaseStatus.OK, metrics={"correct": False},
                       scores={"correct": {"value": False}})
    call = ModelCall(run_id="ddi-old-1", case_id="c2", role="vlm", model="m", messages_sha256="0" * 64,
                     latency_s=0.1)
    assert store.save_case_records([CaseRecords(result=retry, model_calls=[call])]) == [True]
    assert store.result("ddi-old-1", "c2").scores == {"correct": {"value": False}}
    assert len(store.model_calls("ddi-old-1")) == 1
    store.engine.dispose()

    again = Store(url)  # idempotent: nothing to do the second time
    assert again.schema_action == "current"
    assert len(again.results("ddi-old-1")) == 2 and again.counts()["runs"] == 2
    again.engine.dispose()
    assert schema_differences(url) == []


def test_upgrade_function_without_a_store(tmp_path: Path) -> None:
    url = old_database(tmp_path)
    assert upgrade(url) == "upgraded"
    assert upgrade(url) == "current"
    assert len(table_rows(url, "case_results")) == 3


def test_the_migrations_build_exactly_the_models_schema(tmp_path: Path) -> None:
    from alembic import command

    url = f"sqlite:///{tmp_path / 'migrated.db'}"
    command.upgrade(alembic_config(url=url), "head")
    assert schema_differences(url) == []
    assert Store(url).schema_action == "current"


def test_a_new_database_is_created_at_head_cheaply(tmp_path: Path) -> None:
    started = time.perf_counter()
    stores = [Store(f"sqlite:///{tmp_path / f'new-{i}.db'}") for i in range(5)]
    elapsed = (time.perf_counter() - started) / len(stores)
    assert {store.schema_action for store in stores} == {"created"}
    with stores[0].engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
    assert schema_differences(stores[0].url) == []
    reopened = Store(stores[0].url)
    assert reopened.schema_action == "current"
    assert elapsed < 0.5, f"Store() on a new database took {elapsed:.3f}s"


def test_a_database_with_only_some_tables_is_refused(tmp_path: Path) -> None:
    from medeval_core.store import StoreError

    path = tmp_path / "odd.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE runs (id VARCHAR PRIMARY KEY)")
    with pytest.raises(StoreError, match="not a medeval store"):
        Store(f"sqlite:///{path}")


def test_the_migrations_render_for_postgresql(capsys: pytest.CaptureFixture[str]) -> None:
    """No PostgreSQL server here: render the whole chain as PostgreSQL DDL (offline) and check it is plain ALTERs."""
    from alembic import command

    command.upgrade(alembic_config(url="postgresql://medeval@localhost/medeval"), "head", sql=True)
    ddl = capsys.readouterr().out
    assert "CREATE TABLE runs" in ddl and "CREATE TABLE model_calls" in ddl
    assert "ALTER TABLE runs ADD COLUMN kind VARCHAR DEFAULT 'batch' NOT NULL" in ddl
    assert "ALTER TABLE case_results ADD COLUMN scores JSON DEFAULT '{}' NOT NULL" in ddl
    assert "_alembic_tmp" not in ddl and "PRAGMA" not in ddl  # no SQLite table copies
    assert f"UPDATE alembic_version SET version_num='{HEAD}'" in ddl


def test_a_database_at_0002_is_upgraded_to_case_leases_keeping_its_rows(db_url: str) -> None:
    """0003_case_leases (and on to ranged claims) on SQLite and PostgreSQL: a store from before the leases keeps
    every run and result, gets the claim and worker tables, and its runs can be worked on by workers."""
    from medeval_core.records import RunStatus

    database_with_a_running_run(
        db_url, "0002_kinds_scores_model_calls",
        "INSERT INTO case_results (run_id, case_id, repetition, status, output, metrics, scores) VALUES "
        "('old', 'c1', 0, 'ok', '{}', '{\"x\": 1}', '{}'), ('old', 'c2', 0, 'failed', '{}', '{}', '{}')")
    before = table_rows(db_url, "case_results")

    store = Store(db_url)
    assert store.schema_action == "upgraded"
    assert {"case_claims", "run_workers"} <= set(inspect(store.engine).get_table_names())
    assert table_rows(db_url, "case_results") == before
    assert schema_differences(db_url) == []
    # A run the old version left "running" shows as interrupted (no worker alive), and a worker takes it up.
    from medeval_core.runs.service import run_overview

    assert run_overview(store, "old").state == "interrupted"
    from medeval_core.records import CaseOutcome
    from medeval_core.runs.runner import BatchRunner
    from medeval_core.settings import load_settings
    from tests.support.counting_benchmark import make_cases

    cases = [case.model_copy(update={"case_id": f"c{i}"}) for i, case in enumerate(make_cases(3), start=1)]
    report = BatchRunner(store, load_settings()).execute("old", cases, lambda case, ctx: CaseOutcome(), 1)
    assert report.status == RunStatus.COMPLETED and (report.done, report.failed) == (3, 0)
    assert store.result("old", "c1").metrics == {"x": 1}  # the finished case was kept, not redone
    store.engine.dispose()


def test_the_migrations_build_exactly_the_models_schema_on_each_database(db_url: str) -> None:
    from alembic import command

    command.upgrade(alembic_config(url=db_url), "head")
    assert schema_differences(db_url) == []
    store = Store(db_url)
    assert store.schema_action == "current"
    store.engine.dispose()


def upgraded_keeping(db_url: str, revision: str, statement: str | list[str], table: str) -> Store:
    """A database at ``revision`` with a running run (and ``statement`` run in it), opened by this version: it is
    upgraded to the current schema with every row of ``table`` kept (each value of every column it had)."""
    database_with_a_running_run(db_url, revision, statement)
    before = table_rows(db_url, table)
    store = Store(db_url)
    assert store.schema_action == "upgraded"
    assert schema_differences(db_url) == []
    after = table_rows(db_url, table)
    # Columns added since ``revision`` come after the ones the rows had.
    assert [row[:len(kept)] for row, kept in zip(after, before, strict=True)] == before
    return store


def test_a_database_at_0011_is_upgraded_to_ranged_claims_closing_a_wave_and_keeping_its_results(db_url: str) -> None:
    """0012_ranged_claims on SQLite and PostgreSQL: the lease table goes, a wave left open by the previous version
    (its workers stopped) is closed with every result kept, a resume opens a new wave that claims only the
    unfinished cases, and a downgrade brings the lease table back, empty."""
    from alembic import command

    from medeval_core.store import QueueKeys, RunWorkerRow

    store = upgraded_keeping(
        db_url, "0011_generic_cache",
        ["UPDATE runs SET queue_total = 3, queue_cursor = 3 WHERE id = 'old'",
         "INSERT INTO case_leases (run_id, case_id, repetition, attempts, done) VALUES "
         "('old', 'c1', 0, 1, true), ('old', 'c2', 0, 1, false), ('old', 'c3', 0, 0, false)",
         "INSERT INTO case_results (run_id, case_id, repetition, status, output, metrics, scores) VALUES "
         "('old', 'c1', 0, 'ok', '{}', '{}', '{}')"], "case_results")
    tables = set(inspect(store.engine).get_table_names())
    assert "case_leases" not in tables and "case_claims" in tables
    run = store.get_run("old")
    assert (run.queue_total, run.queue_cursor) == (None, None) and store.queued_cases("old") == 0
    keys = QueueKeys(["c1", "c2", "c3"], 1)
    now = utc_now()
    worker = RunWorkerRow(id="w", run_id="old", host="test", pid=os.getpid(), started_at=now, heartbeat_at=now,
                          expires_at=now + timedelta(seconds=30))
    assert store.join_run("old", worker, keys, {"status": "running"})
    assert [case_id for _, case_id, _ in store.claim_cases("old", "w", keys, 10, lease_s=30)] == ["c2", "c3"]
    store.engine.dispose()
    command.downgrade(alembic_config(url=db_url), "0011_generic_cache")
    assert table_rows(db_url, "case_leases") == [] and len(table_rows(db_url, "case_results")) == 1


def test_a_database_at_0007_is_upgraded_to_judge_budgets_keeping_its_rows(db_url: str) -> None:
    """0008_judge_budget on SQLite and PostgreSQL: the shared judge budget table is added, a run left running by
    the previous version is kept, and the new table takes admissions at once."""
    from medeval_core.judges.ratelimit import SharedWindowLimiter

    store = upgraded_keeping(db_url, "0007_lazy_queue", "SELECT 1", "runs")
    with SharedWindowLimiter(store, "http://judge.invalid/v1", "m", 2, 100, 1.0).slot(10) as waited:
        assert waited < 1.0
    assert len(table_rows(db_url, "judge_budget_slots")) == 1
    store.engine.dispose()


def test_a_database_at_0009_is_upgraded_to_the_result_status_index_keeping_its_rows(db_url: str) -> None:
    """0010_result_status_index on SQLite and PostgreSQL: the index is added, the rows are kept, and on SQLite the
    runs page's count by status reads the index alone."""
    store = upgraded_keeping(
        db_url, "0009_sign_in_sessions",
        "INSERT INTO case_results (run_id, case_id, repetition, status, output, metrics, scores) VALUES "
        "('old', 'c1', 0, 'ok', '{}', '{}', '{}'), ('old', 'c2', 0, 'failed', '{}', '{}', '{}')", "case_results")
    assert store.result_counts("old") == {"ok": 1, "failed": 1}
    if db_url.startswith("sqlite"):
        with store.engine.connect() as connection:
            plan = " ".join(str(row) for row in connection.execute(text(
                "EXPLAIN QUERY PLAN SELECT status, count(*) FROM case_results WHERE run_id = 'old' GROUP BY status")))
        assert "COVERING INDEX ix_case_results_run_status" in plan, plan
    store.engine.dispose()


def test_a_database_at_0010_is_upgraded_to_the_generic_cache_keeping_its_prices(db_url: str) -> None:
    """0011_generic_cache on SQLite and PostgreSQL: the SDBench price table's rows move into the key-value cache
    under the costing's namespace (re-costing reuses them), the price table goes, and a downgrade brings it back
    with the same rows."""
    from alembic import command

    from medeval_core.benchmarks.sdbench.costing import StorePriceCache, TestPrice

    price = TestPrice(name="cbc", kind="lab", price=20.0, codes=["85025"], method="alias",
                      estimated=False).model_dump(mode="json")
    store = upgraded_keeping(
        db_url, "0010_result_status_index",
        "INSERT INTO test_prices (method, model, name, price, created_at) VALUES "
        f"('v1:prices=abc', 'offline', 'cbc', '{json.dumps(price)}', '2026-01-01'), "
        "('v1:prices=abc', 'offline', 'chest x-ray', '{\"name\": \"chest x-ray\"}', '2026-01-02')", "runs")
    assert "test_prices" not in inspect(store.engine).get_table_names()
    assert StorePriceCache(store).get("v1:prices=abc", "offline", "cbc") == TestPrice.model_validate(price)
    assert StorePriceCache(store).get("v1:prices=abc", "offline", "mri") is None
    assert len(table_rows(db_url, "cache_entries")) == 2
    store.engine.dispose()
    command.downgrade(alembic_config(url=db_url), "0010_result_status_index")
    restored = table_rows(db_url, "test_prices")
    assert [(row[1], row[2], row[3]) for row in restored] == [("v1:prices=abc", "offline", "cbc"),
                                                              ("v1:prices=abc", "offline", "chest x-ray")]
