from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from medeval_core.records import Annotation, CaseResult, CaseStatus, Judgement, RunConfig, RunStatus, Turn
from medeval_core.store import DuplicateResultError, Store, StoreError, redact_url


@pytest.fixture
def store(db_url: str) -> Store:
    """A store on SQLite and on PostgreSQL (``tests/db_support.py``)."""
    return Store(db_url)


def ok_result(run_id: str, case_id: str, value: float = 1.0) -> CaseResult:
    return CaseResult(run_id=run_id, case_id=case_id, status=CaseStatus.OK, metrics={"value": value})


def test_sqlite_runs_in_wal_mode_with_foreign_keys(isolated_store: str) -> None:
    store = Store(isolated_store)
    with store.engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_default_database_file_lives_under_the_ignored_var_folder() -> None:
    from medeval_core.settings import default_db_url

    assert default_db_url().endswith("/var/medeval.db")
    ignored = (Path(__file__).resolve().parent.parent / ".gitignore").read_text().split()
    assert "var/" in ignored


def test_run_round_trip_keeps_config_and_provenance(store: Store) -> None:
    config = RunConfig(benchmark="demo", label="first", params={"limit": 3}, settings_hash="abc",
                       versions={"torch": "2.13.0"})
    row = store.create_run(config, run_id="demo-1", expected_cases=3)
    loaded = store.get_run(row.id)
    assert loaded.status == RunStatus.PENDING
    assert RunConfig.model_validate(loaded.config) == config
    assert loaded.settings_hash == "abc" and loaded.versions == {"torch": "2.13.0"}
    with pytest.raises(StoreError, match="already exists"):
        store.create_run(config, run_id="demo-1")
    with pytest.raises(StoreError, match="No run with id"):
        store.get_run("missing")


def test_a_finished_result_cannot_be_written_twice(store: Store) -> None:
    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    store.save_result(ok_result("r", "c1", 1.0))
    with pytest.raises(DuplicateResultError):
        store.save_result(ok_result("r", "c1", 2.0))
    [kept] = store.results("r")
    assert kept.metrics == {"value": 1.0}


def test_unique_key_holds_at_the_database_level(store: Store) -> None:
    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    store.save_result(ok_result("r", "c1"))
    with store.engine.begin() as connection, pytest.raises(Exception, match=r"(?i)unique"):
        connection.execute(text(
            "INSERT INTO case_results (run_id, case_id, repetition, status, output, metrics) "
            "VALUES ('r', 'c1', 0, 'ok', '{}', '{}')"
        ))


def test_a_failed_result_is_replaced_by_its_retry(store: Store) -> None:
    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    store.save_result(CaseResult(run_id="r", case_id="c1", status=CaseStatus.FAILED, error="boom"))
    store.save_result(ok_result("r", "c1"))
    [only] = store.results("r")
    assert only.status == CaseStatus.OK and only.error is None


def test_foreign_keys_reject_results_of_unknown_runs(store: Store) -> None:
    with pytest.raises(StoreError, match=r"(?is)foreign key.*does run 'no-such-run' exist"):
        store.save_result(ok_result("no-such-run", "c1"))
    assert store.results("no-such-run") == []


def test_turns_judgements_and_annotations_are_stored(store: Store) -> None:
    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    store.add_turns([
        Turn(run_id="r", case_id="c1", index=i, actor="agent", action="ask", payload={"q": f"E_{i}"}) for i in range(3)
    ])
    assert [t.payload["q"] for t in store.turns("r", "c1")] == ["E_0", "E_1", "E_2"]
    store.add_judgement(Judgement(run_id="r", case_id="c1", judge_name="offline", ok=False, error="429", attempt=1))
    store.add_judgement(Judgement(run_id="r", case_id="c1", judge_name="offline", ok=True, attempt=2,
                                  verdict={"correct": True}))
    assert [j.attempt for j in store.judgements(run_id="r")] == [1, 2]
    store.add_annotation(Annotation(item_id="i1", annotator="dr-a", task="pairwise", criterion="accuracy", value="A"))
    store.add_annotation(Annotation(item_id="i1", annotator="dr-a", task="pairwise", criterion="accuracy", value="B"))
    assert [a.value for a in store.annotations("pairwise")] == ["A", "B"]  # edits append, never overwrite
    assert store.counts() == {"runs": 1, "case_results": 0, "judgements": 2, "model_calls": 0, "annotations": 2}


def test_a_dialogue_is_written_whole_or_not_at_all(store: Store) -> None:
    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    duplicate_index = [Turn(run_id="r", case_id="c1", index=0, actor="a", action="ask")] * 2
    with pytest.raises(Exception, match=r"(?i)unique"):
        store.add_turns(duplicate_index)
    assert store.turns("r", "c1") == []


def test_cancel_request_only_for_active_runs(store: Store) -> None:
    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    # No worker is on the pending run to see the request, so it is cancelled at once instead of left cancelling.
    assert store.request_cancel("r").status == RunStatus.CANCELLED
    store.update_run("r", status=RunStatus.COMPLETED)
    with pytest.raises(StoreError, match="only a pending or running run"):
        store.request_cancel("r")


def test_urls_are_shown_without_passwords() -> None:
    assert "secret" not in redact_url("postgresql://user:secret@db.example/medeval")


def test_results_read_back_equal_validated_records(store: Store) -> None:
    from datetime import UTC, datetime

    from medeval_core.records import CaseRecords

    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    stamp = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    written = [
        CaseResult(run_id="r", case_id="c1", repetition=1, status=CaseStatus.OK, output={"a": [1, "x"]},
                   metrics={"correct": True, "cost": 2.5}, scores={"correct": {"value": True}}, started_at=stamp,
                   finished_at=stamp),
        CaseResult(run_id="r", case_id="c2", status=CaseStatus.FAILED, error="boom"),
    ]
    store.save_case_records([CaseRecords(result=r) for r in written])
    loaded = store.results("r")
    assert loaded == [CaseResult.model_validate(r.model_dump()) for r in loaded] == written
    assert loaded[0].model_dump() == written[0].model_dump() and loaded[1].status is CaseStatus.FAILED
    assert store.result("r", "c1", repetition=1) == written[0] and store.result("r", "c9") is None
    assert store.metric_rows("r") == [("c1", 1, {"correct": True, "cost": 2.5})]
    frame = store.results_frame("r")
    assert list(frame.columns) == ["case_id", "repetition", "correct", "cost"] and len(frame) == 1
    assert store.results_stamp("r")[0] == 2


def test_a_model_inside_an_output_or_payload_is_stored_as_its_json(store: Store) -> None:
    """A solver may put a record (a pydantic model) inside its output, scores or a turn's payload; the group commit
    stores it as the JSON of its fields, as it stores the dict a solver would have written by hand."""
    from medeval_core.benchmark import Score
    from medeval_core.records import CaseRecords

    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    score = Score(value=0.5, explanation="half")
    records = CaseRecords(
        result=CaseResult(run_id="r", case_id="c1", status=CaseStatus.OK, output={"score": score},
                          metrics={"value": 0.5}, scores={"value": score}),
        turns=[Turn(run_id="r", case_id="c1", index=0, actor="agent", action="ask", payload={"score": score})])
    assert store.save_case_records([records]) == [True]
    (stored,) = store.results("r")
    assert stored.output["score"] == stored.scores["value"] == score.model_dump(mode="json")
    assert store.turns("r", "c1")[0].payload == {"score": score.model_dump(mode="json")}


def test_the_group_commit_stores_what_an_orm_insert_stores(store: Store) -> None:
    """The group commit writes through the driver (COPY on PostgreSQL, JSON as the serializer's text); every
    column, read back as text, equals what SQLAlchemy's ``table.insert()`` stores for the same record."""
    from datetime import UTC, datetime

    from medeval_core.benchmark import Score
    from medeval_core.records import CaseRecords
    from medeval_core.store.engine import core_table
    from medeval_core.store.tables import CaseResultRow

    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    stamp = datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)
    values: dict[str, Any] = {
        "output": {"text": "é ✓ \"quoted\"\n", "nested": [1, 2.5, None, {"b": False}], "score": Score(value=1)},
        "metrics": {"correct": True, "cost": 0.1 + 0.2}, "scores": {}, "started_at": stamp, "finished_at": stamp,
        "status": CaseStatus.OK, "repetition": 0, "error": None}
    store.save_case_records([CaseRecords(result=CaseResult(run_id="r", case_id="copied", **values))])
    table = core_table(CaseResultRow)
    with store.engine.begin() as connection:
        connection.execute(table.insert().values(run_id="r", case_id="inserted", **values))
        columns = [column.name for column in table.c if column.name not in ("id", "case_id")]
        rows = {case_id: rest for case_id, *rest in connection.execute(text(
            f"SELECT case_id, {', '.join(f'CAST({name} AS TEXT)' for name in columns)} FROM case_results"))}
    assert rows["copied"] == rows["inserted"]
