"""The SDBench gatekeeper: the offline one on structured cases (REAL with the case's text, SYNTHETIC normal
results, REFUSED vague orders), never the diagnosis or a source tag in what the agent reads; the LLM one over
HTTP; the episode's turns and costs."""

from __future__ import annotations

import json

import pytest

from medeval_core.benchmark import ModelRoles, RecordingContext
from medeval_core.benchmarks.sdbench.benchmark import open_episode, output_of
from medeval_core.benchmarks.sdbench.cases import SDBenchCase, load_cases
from medeval_core.benchmarks.sdbench.costing import Pricer, load_prices
from medeval_core.benchmarks.sdbench.gatekeeper import (
    CaseEnvironment,
    Diagnosis,
    LLMGatekeeper,
    OfflineGatekeeper,
    Questions,
    Tests,
    render,
)
from medeval_core.context import current_settings
from medeval_core.interaction import EpisodeError, Limits
from medeval_core.models.chat import OpenAIChatBackend
from medeval_core.prompts import load_prompt
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply
from tests.sdbench_fixtures import case_row, write_jsonl

TAGS = ("REAL", "SYNTHETIC", "REFUSED")


@pytest.fixture
def case(tmp_path) -> SDBenchCase:
    return load_cases(write_jsonl(tmp_path / "c.jsonl", [case_row()]))[0]


def test_own_tests_come_back_real_with_the_case_text(shared_cases, catalog):
    for case in shared_cases:
        gatekeeper = OfflineGatekeeper(case, catalog)
        for answer in gatekeeper.answer("tests", list(case.findings.tests)):
            assert answer.source == "REAL", (case.case_id, answer.request)
            expected = case.findings.tests[answer.request]
            if not answer.withheld:
                assert answer.text == expected
            else:  # an interpretive clause naming the diagnosis is withheld; the findings stay verbatim
                assert all(part in expected for part in answer.withheld)


def test_synonyms_components_missing_and_vague_orders(case, catalog):
    gatekeeper = OfflineGatekeeper(case, catalog)
    answers = gatekeeper.answer("tests", ["AChR antibodies", "CT chest", "hemoglobin", "full blood count",
                                          "MRI brain", "chest x-ray", "serum lipase", "blood work", "all labs"])
    sources = [a.source for a in answers]
    assert sources == ["REAL", "REAL", "REAL", "REAL", "SYNTHETIC", "SYNTHETIC", "SYNTHETIC", "REFUSED", "REFUSED"]
    assert answers[0].text == "Present (elevated)" and answers[0].matched == "Acetylcholine Receptor Antibodies"
    assert answers[2].text == "Hemoglobin: 13.5 g/dL" and answers[2].matched == "Complete Blood Count: Hemoglobin"
    assert answers[3].text.startswith("WBC: 7,500/mm3")
    assert answers[5].matched == "chest x-ray" and "consolidation" in answers[5].text  # not the case's chest CT
    assert answers[6].text == "30 U/L"


def test_the_agent_never_reads_the_diagnosis_or_a_source(case, catalog):
    gatekeeper = OfflineGatekeeper(case, catalog)
    answers = gatekeeper.answer("tests", ["Chest CT", "CBC", "MRI brain", "imaging"])
    shown = render("tests", answers)
    assert shown.startswith("Test Results:\n1. Chest CT: Normal, no thymoma.\n2. CBC: WBC: 7,500/mm3; ")
    assert "myasthenia" not in shown.lower() and not any(tag in shown for tag in TAGS)
    assert answers[0].withheld == ["consistent with myasthenia gravis without thymoma"]
    questions = gatekeeper.answer("questions", ["Do you smoke?", "What is the heart rate?", "Any rashes?"])
    assert [q.source for q in questions] == ["REAL", "REAL", "SYNTHETIC"]
    assert questions[0].text == "Non-smoker. Works as a designer." and "72 bpm" in questions[1].text
    assert render("questions", questions).startswith("Answers:\n1. Do you smoke? Non-smoker") is False
    assert render("questions", questions).startswith("Answers:\n1. Do you smoke?: Non-smoker")


def test_episode_records_every_exchange_with_costs(case, catalog, data_dir):
    pricer = Pricer(catalog, load_prices(data_dir / "costing" / "cms_prices.csv"))
    environment = CaseEnvironment(case, OfflineGatekeeper(case, catalog), pricer)
    ctx = RecordingContext("run", case.case_id, 0, current_settings(), ModelRoles())
    episode = open_episode(environment, ctx, Limits())
    episode.act(Questions(items=["Do you smoke?"]), actor="agent")
    episode.act(Questions(items=["Any past medical history?"]), actor="agent")
    episode.act(Tests(items=["CBC", "chest x-ray", "blood work"]), actor="agent")
    episode.act(Questions(items=["Any allergies?"]), actor="agent")
    episode.act(Diagnosis(text="Myasthenia gravis"), actor="agent")
    assert [t.action for t in ctx.turns] == ["start", "questions", "questions", "tests", "questions", "diagnosis"]
    assert ctx.turns[0].payload == {"case_summary": case.case_summary}
    costs = [t.cost for t in ctx.turns]
    assert costs[:3] == [0.0, 300.0, 0.0] and costs[4] == 300.0
    assert costs[3] == pytest.approx(pricer.price("CBC").price + pricer.price("chest x-ray").price)
    assert [a["source"] for a in ctx.turns[3].payload["provenance"]["answers"]] == ["REAL", "SYNTHETIC", "REFUSED"]
    assert not any(tag in ctx.turns[3].payload["answer"] for tag in TAGS)
    output = output_of(environment, "agent")
    assert (output.visits, output.questions, output.tests, output.diagnosis) == (2, 3, 3, "Myasthenia gravis")
    assert output.cost == pytest.approx(sum(costs)) and output.sources == {"REAL": 3, "SYNTHETIC": 2, "REFUSED": 1}
    with pytest.raises(EpisodeError, match="finished"):
        episode.act(Tests(items=["CBC"]), actor="agent")


def test_a_case_without_findings_needs_the_llm_gatekeeper(tmp_path, catalog):
    row = case_row()
    del row["findings"]
    (case,) = load_cases(write_jsonl(tmp_path / "plain.jsonl", [row]))
    with pytest.raises(EpisodeError, match="--gatekeeper llm"):
        OfflineGatekeeper(case, catalog)


def gatekeeper_model(request: RecordedRequest) -> Reply:
    last = next(m["content"] for m in reversed(request.body["messages"])
                if m["role"] == "user" and m["content"].startswith(("Test orders:", "Questions:")))
    requests = [line.split(". ", 1)[1] for line in last.splitlines()[1:]]
    if "lipase" in last and not any(m["role"] == "assistant" for m in request.body["messages"]):
        return Reply(content="Sure! The lipase is fine.")  # malformed: asked again once
    results = [{"request": r, "result": "Present (elevated)" if "AChR" in r else "Within normal limits.",
                "source": "REAL" if "AChR" in r else "SYNTHETIC"} for r in requests]
    return Reply(content=json.dumps({"results": results}))


def test_llm_gatekeeper_over_http(case):
    with FakeOpenAI(gatekeeper_model) as server:
        backend = OpenAIChatBackend(base_url=server.url, model="fake-gatekeeper", api_key_env="MEDEVAL_TEST_NO_KEY",
                                    retry_initial_s=0.01, retry_max_s=0.05, timeout_s=10)
        calls = []
        gatekeeper = LLMGatekeeper(case, backend, load_prompt("sdbench_gatekeeper_system"), on_call=calls.append)
        answers = gatekeeper.answer("tests", ["serum lipase", "AChR antibodies", "all labs"])
        assert [a.source for a in answers] == ["SYNTHETIC", "REAL", "REFUSED"]
        assert answers[1].text == "Present (elevated)"
        system = server.chat_requests()[0].body["messages"][0]["content"]
        assert case.full_text in system and "never mention the final diagnosis" in system
        assert len(server.chat_requests()) == 2 and "not valid" in server.chat_requests()[1].text()
        sent = server.chat_requests()[0].body["messages"][-1]["content"]
        assert sent == "Test orders:\n1. serum lipase\n2. AChR antibodies"  # the refused order is never sent
        assert {c.role for c in calls} == {"gatekeeper"} and len(calls) == 2
