"""SDBench batch runs through the CLI: replayed transcripts on converted AgentClinic cases (offline gatekeeper and
judge), the summary, resume, `recost` with the price cache, every LLM role over HTTP, and the price-cache
migration keeping an existing database's rows."""

from __future__ import annotations

import csv
import json
import sqlite3

import pytest
from sqlalchemy import create_engine, inspect, text

from medeval_core import context
from medeval_core.benchmarks.sdbench.costing import PRICE_NAMESPACE, price_key
from medeval_core.cli import main
from medeval_core.records import CaseStatus
from medeval_core.store import Store
from medeval_core.store.migrations import HEAD, alembic_config
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply
from tests.sdbench_fixtures import agentclinic_file, replay_line, write_jsonl


@pytest.fixture
def cases_file(tmp_path, data_dir, capsys):
    rows = agentclinic_file(data_dir).read_text().splitlines()[:4]
    source = write_jsonl(tmp_path / "ac.jsonl", rows)
    out = tmp_path / "cases.jsonl"
    assert main(["cases", "import", "agentclinic", str(source), "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def cases_of(path):
    return {row["id"]: row for row in map(json.loads, path.read_text().splitlines())}


def prices(data_dir):
    with (data_dir / "costing" / "cms_prices.csv").open() as handle:
        return {r["code"]: float(r["national_price_usd"]) for r in csv.DictReader(handle)}


def run_json(capsys, *args):
    code = main(["run", "sdbench", *args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def transcripts(cases, wrong=()):
    lines = []
    ids = list(cases)
    for number, (case_id, row) in enumerate(cases.items()):
        own = list(row["findings"]["tests"])[:2]
        diagnosis = cases[ids[(number + 1) % len(ids)]]["final_diagnosis"] if case_id in wrong \
            else row["final_diagnosis"]
        lines.append(replay_line(case_id, ("question", "Do you smoke?"), ("question", "Any past medical history?"),
                                 *[("test", name) for name in own], ("test", "Serum lipase"),
                                 ("question", "Any allergies?"), ("test", "Hemoglobin A1c"),
                                 ("diagnosis", diagnosis)))
    return lines


def test_replayed_transcripts_offline(tmp_path, capsys, cases_file, data_dir):
    cases = cases_of(cases_file)
    ids = list(cases)
    actions = write_jsonl(tmp_path / "actions.jsonl", transcripts(cases, wrong={ids[1]}))
    payload = run_json(capsys, "--cases", str(cases_file), "--agent", "replay", "--actions", str(actions),
                       "--gatekeeper", "offline", "--judge", "offline", "--run-id", "sd-replay")
    summary = payload["summary"]
    assert summary["counts"] == {"expected": 4, "done": 4, "failed": 0, "pending": 0}
    headline = {m["name"]: m for m in summary["headline"]}
    accuracy = headline["accuracy (sdbench-offline-judge)"]
    assert accuracy["value"] == 0.75 and accuracy["n"] == 4 and accuracy["interval"][0] < 0.75
    expected_tests = sum(min(2, len(row["findings"]["tests"])) + 2 for row in cases.values()) / len(cases)
    assert headline["mean visits"]["value"] == 2 and headline["mean tests"]["value"] == expected_tests
    dumped = json.dumps(summary).lower()
    for row in cases.values():  # figures only: no diagnosis, no finding
        assert row["final_diagnosis"].lower() not in dumped
        assert not any(text.lower() in dumped for text in row["findings"]["tests"].values())

    store = context.current_store()
    table = prices(data_dir)
    for result in store.results("sd-replay"):
        row = cases[result.case_id]
        assert result.metrics["offline_judge_score"] >= 4 if result.case_id != ids[1] else \
            result.metrics["offline_judge_score"] <= 2
        turns = store.turns("sd-replay", result.case_id)
        assert [t.action for t in turns] == ["start", "questions", "tests", "questions", "tests", "diagnosis"]
        assert turns[0].payload == {"case_summary": row["case_summary"]}
        own = turns[2].payload["provenance"]["answers"]
        assert [a["source"] for a in own] == ["REAL"] * (len(own) - 1) + ["SYNTHETIC"]
        for answer in own[:-1]:  # the case's own text (an interpretive clause naming the diagnosis withheld)
            original = row["findings"]["tests"][answer["request"]]
            assert all(line.rstrip(".") in original for line in answer["text"].splitlines())
            assert all(part in original for part in answer["withheld"])
        assert turns[4].payload["provenance"]["answers"][0]["source"] == "SYNTHETIC"
        for turn in turns:
            assert row["final_diagnosis"].lower() not in json.dumps(turn.payload.get("answer", "")).lower()
            assert not any(tag in turn.payload.get("answer", "") for tag in ("REAL", "SYNTHETIC", "REFUSED"))
        tests_cost = sum(p["price"] for t in turns for p in t.payload.get("provenance", {}).get("prices", []))
        assert result.metrics["cost"] == pytest.approx(2 * 300 + tests_cost)
        assert result.metrics["visits"] == 2
        lipase = next(p for p in turns[2].payload["provenance"]["prices"] if p["name"] == "Serum lipase")
        assert lipase["codes"] == ["83690"] and lipase["price"] == table["83690"] and not lipase["estimated"]
        assert sum(t.cost for t in turns) == pytest.approx(result.metrics["cost"])
    judgements = store.judgements(run_id="sd-replay")
    assert {j.judge_name for j in judgements} == {"sdbench-offline-judge"} and len(judgements) == 4

    # the runs page shows the summary like any benchmark's
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    runs_page = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")
    app = AppTest.from_file(runs_page, default_timeout=120).run()
    assert not app.exception, app.exception
    shown = app.table[0].value
    assert "accuracy (sdbench-offline-judge)" in shown.index and "mean cost per case ($)" in shown.index


def test_errored_and_incomplete_cases_are_flagged_and_kept_out(tmp_path, capsys, cases_file):
    cases = cases_of(cases_file)
    ids = list(cases)
    lines = transcripts({k: cases[k] for k in ids[:2]})
    lines.append(replay_line(ids[2], ("test", "CBC")))  # stops without a diagnosis
    actions = write_jsonl(tmp_path / "actions.jsonl", lines)  # ids[3] has no actions: errors
    payload = run_json(capsys, "--cases", str(cases_file), "--agent", "replay", "--actions", str(actions),
                       "--run-id", "sd-flags")
    summary = payload["summary"]
    assert summary["counts"]["failed"] == 1 and summary["extras"]["incomplete"] == 1
    accuracy = next(m for m in summary["headline"] if m["name"].startswith("accuracy"))
    assert accuracy["n"] == 2 and accuracy["value"] == 1.0
    assert any("incomplete" in note for note in summary["notes"]) and any("errored" in n for n in summary["notes"])
    (failed,) = context.current_store().results("sd-flags", status=CaseStatus.FAILED)
    assert failed.case_id == ids[3] and "has no actions for case" in failed.error
    # the same --run-id resumes: finished cases stay, the failed one is retried (and fails again)
    again = run_json(capsys, "--cases", str(cases_file), "--agent", "replay", "--actions", str(actions),
                     "--run-id", "sd-flags")
    assert again["run"]["done"] == 3 and again["run"]["failed"] == 1


def test_recost_reprices_without_rerunning_and_reuses_the_cache(tmp_path, capsys, cases_file):
    cases = cases_of(cases_file)
    actions = write_jsonl(tmp_path / "actions.jsonl", transcripts(cases))
    run_json(capsys, "--cases", str(cases_file), "--agent", "replay", "--actions", str(actions), "--run-id", "sd-rc")
    store = context.current_store()
    turns_before = sum(len(store.turns("sd-rc", case_id)) for case_id in cases)
    charge_master = tmp_path / "hospital.csv"
    charge_master.write_text("code,price\n83690,100\n83036,50\n85025,20\n")
    assert main(["recost", "sd-rc", "--prices", str(charge_master), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ordered = sum(min(2, len(row["findings"]["tests"])) + 2 for row in cases.values())
    assert report["cases"] == 4 and report["tests"] == ordered
    assert report["priced_by_code"] >= 8 and report["estimated"] == ordered - report["priced_by_code"]
    score_run = report["run_id"]
    for result in store.results(score_run):
        assert result.metrics["cost"] >= 600 + 100 + 50
    with store.engine.connect() as connection:
        cached = connection.execute(text("SELECT count(*) FROM cache_entries")).scalar()
    assert cached > 0
    assert main(["recost", "sd-rc", "--prices", str(charge_master)]) == 0
    printed = capsys.readouterr().out
    assert "Priced by code:" in printed and "Estimated:" in printed
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM cache_entries")).scalar() == cached  # all reused
    assert sum(len(store.turns("sd-rc", case_id)) for case_id in cases) == turns_before  # nothing replayed
    assert main(["recost", "sd-missing"]) == 2
    assert capsys.readouterr().err.startswith("error: No run with id 'sd-missing'")


def everyone(request: RecordedRequest) -> Reply:
    """One fake endpoint for every role, told apart by the system prompt."""
    messages = request.body["messages"]
    system = messages[0]["content"]
    if system.startswith("You are the gatekeeper"):
        asked = [line.split(". ", 1)[1] for line in messages[-1]["content"].splitlines()[1:]]
        return Reply(content=json.dumps({"results": [{"request": r, "result": "Within normal limits.",
                                                      "source": "SYNTHETIC"} for r in asked]}))
    if system.startswith("You grade"):
        return Reply(content=json.dumps({"score": 5, "reasoning": "Same disease."}))
    if system.startswith("You are a physician"):
        turn = sum(m["role"] == "assistant" for m in messages)
        return Reply(content=["<question>Do you smoke?</question>", "<test>CBC</test><test>Chest X-ray</test>",
                              "<diagnosis>Myasthenia gravis</diagnosis>"][min(turn, 2)])
    return Reply(content="$123")


def test_every_llm_role_over_http(tmp_path, capsys, cases_file, monkeypatch):
    with FakeOpenAI(everyone) as server:
        for role in ("CHAT", "GATEKEEPER", "SDBENCH_JUDGE", "SDBENCH_PRICING"):
            monkeypatch.setenv(f"MEDEVAL_{role}_BASE_URL", server.url)
            monkeypatch.setenv(f"MEDEVAL_{role}_MODEL", f"fake-{role.lower()}")
        context.reset()
        payload = run_json(capsys, "--cases", str(cases_file), "--agent", "llm", "--limit", "1", "--run-id", "sd-llm",
                           "--model-args", '{"top_p": 0.3}', "--split", "test")
        agent_requests = [r for r in server.chat_requests() if r.body["messages"][0]["content"].startswith(
            "You are a physician")]
        assert len(agent_requests) == 3 and all(r.body["top_p"] == 0.3 for r in agent_requests)
        others = [r for r in server.chat_requests() if r not in agent_requests]
        assert all("top_p" not in r.body for r in others)
    summary = payload["summary"]
    assert summary["extras"]["gatekeeper"] == "llm" and summary["extras"]["judge"] == "llm"
    assert next(m for m in summary["headline"] if m["name"] == "accuracy (sdbench-llm-judge)")["value"] == 1.0
    store = context.current_store()
    (result,) = store.results("sd-llm")
    assert result.metrics["llm_judge_score"] == 5 and "offline_judge_score" not in result.metrics
    roles = {call.role for call in store.model_calls("sd-llm")}
    assert roles == {"chat", "gatekeeper", "sdbench-judge"}
    turns = store.turns("sd-llm", result.case_id)
    assert [t.actor for t in turns] == ["gatekeeper", "llm", "llm", "llm"]
    (judged,) = store.judgements(run_id="sd-llm")
    assert judged.judge_name == "sdbench-llm-judge" and judged.verdict["reasoning"] == "Same disease."
    assert judged.judge_model == "fake-sdbench_judge"


def test_bad_inputs_are_one_line_errors(tmp_path, capsys, cases_file):
    for args, message in (
        (["--agent", "replay"], "--agent replay needs --actions"),
        (["--agent", "replay", "--actions", str(tmp_path / "none.jsonl")], "does not exist"),
        (["--agent", "llm"], "No chat model is configured"),
        (["--agent", "replay", "--actions", str(cases_file), "--model-args", "[1]"], "must be a JSON object"),
    ):
        assert main(["run", "sdbench", "--cases", str(cases_file), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert context.current_store().list_runs(benchmark="sdbench") == []


def test_the_price_cache_migration_keeps_an_existing_databases_rows(tmp_path):
    from alembic import command

    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url=url), "0002_kinds_scores_model_calls")
    with sqlite3.connect(tmp_path / "old.db") as connection:
        connection.execute("INSERT INTO runs (id, benchmark, label, kind, status, config, settings_hash, versions, "
                           "summary, created_at) VALUES ('r1', 'ddi', '', 'batch', 'completed', '{}', '', '{}', '{}', "
                           "'2026-01-01 00:00:00')")
    store = Store(url)
    assert store.schema_action == "upgraded"
    assert "cache_entries" in inspect(store.engine).get_table_names()
    assert [run.id for run in store.list_runs()] == ["r1"]
    store.cache(PRICE_NAMESPACE, price_key("m", "offline", "cbc"), {"price": 1.0})
    store.cache(PRICE_NAMESPACE, price_key("m", "offline", "cbc"), {"price": 2.0})  # the first price stands
    assert store.cached(PRICE_NAMESPACE, price_key("m", "offline", "cbc")) == {"price": 1.0}
    with create_engine(url).connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD


def test_turn_cap_budget_repetitions_and_concurrency(tmp_path, capsys, cases_file):
    cases = cases_of(cases_file)
    actions = write_jsonl(tmp_path / "actions.jsonl", transcripts(cases))
    capped = run_json(capsys, "--cases", str(cases_file), "--agent", "replay", "--actions", str(actions),
                      "--max-turns", "1", "--repetitions", "2", "--concurrency", "2", "--run-id", "sd-cap")
    assert capped["summary"]["counts"] == {"expected": 8, "done": 8, "failed": 0, "pending": 0}
    store = context.current_store()
    for result in store.results("sd-cap"):
        turns = store.turns("sd-cap", result.case_id, result.repetition)
        assert [t.action for t in turns] == ["start", "questions", "diagnosis"]  # the cap moved it to its diagnosis
        assert result.metrics["offline_judge_score"] == 5 and result.metrics["cost"] == 300
    budget = run_json(capsys, "--cases", str(cases_file), "--agent", "replay", "--actions", str(actions),
                      "--max-cost", "300", "--limit", "1", "--run-id", "sd-budget")
    (result,) = store.results("sd-budget")
    assert [t.action for t in store.turns("sd-budget", result.case_id)] == ["start", "questions", "diagnosis"]
    assert budget["summary"]["counts"]["done"] == 1
