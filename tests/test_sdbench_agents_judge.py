"""SDBench agents and judges: the tag parser on malformed output, the LLM agent over HTTP (one correction, then the
case fails; --model-args in each request), replay files, and both judges (the LLM one over HTTP)."""

from __future__ import annotations

import json

import pytest

from medeval_core.benchmarks.sdbench.agents import (
    ActionsFileError,
    AgentOutputError,
    IncompleteEpisode,
    LLMAgent,
    ReplayAction,
    ReplayAgent,
    load_actions,
    parse_tags,
)
from medeval_core.benchmarks.sdbench.gatekeeper import Diagnosis, Questions, Tests
from medeval_core.benchmarks.sdbench.judge import JudgeFailure, LLMJudge, OfflineJudge, parse_grade
from medeval_core.models.chat import OpenAIChatBackend
from tests.fake_openai import FakeOpenAI, Reply, Script
from tests.sdbench_fixtures import write_jsonl


def backend(server, model="fake", **options):
    return OpenAIChatBackend(base_url=server.url, model=model, api_key_env="MEDEVAL_TEST_NO_KEY",
                             retry_initial_s=0.01, retry_max_s=0.05, timeout_s=10, **options)


def test_tag_parser():
    assert parse_tags("<question>Fever?</question> <question>Smoker?</question>") == \
        Questions(items=["Fever?", "Smoker?"])
    assert parse_tags("I will order:\n<test>CBC</test>\n<TEST> Chest X-ray </TEST>") == \
        Tests(items=["CBC", "Chest X-ray"])
    assert parse_tags("Reasoning...\n<diagnosis>Myasthenia gravis</diagnosis>") == Diagnosis(text="Myasthenia gravis")
    for text, problem in (("<question>Fever?</question><test>CBC</test>", "never mixes"),
                          ("<diagnosis>A</diagnosis><diagnosis>B</diagnosis>", "only one diagnosis"),
                          ("<diagnosis>A</diagnosis><test>CBC</test>", "holds nothing else"),
                          ("Order a CBC please", "has no <question>"), ("<test>CBC", "not closed"),
                          ("<test> </test>", "empty"), ("", "has no")):
        with pytest.raises(ValueError, match=problem):
            parse_tags(text)


def test_llm_agent_is_corrected_once_then_fails():
    script = Script({"Case summary": [Reply(content="<question>Any fever?</question><test>CBC</test>"),
                                      Reply(content="<test>CBC</test>")]},
                    default=Reply(content="<diagnosis>Myasthenia gravis</diagnosis>"))
    with FakeOpenAI(script) as server:
        calls = []
        agent = LLMAgent(backend(server, request_options={"top_p": 0.5, "reasoning_effort": "high"}), "SYSTEM",
                         on_call=calls.append)
        assert agent.act("A 35-year-old woman with diplopia.", must_commit=False) == Tests(items=["CBC"])
        first, second = server.chat_requests()
        assert first.body["messages"][1] == {"role": "user",
                                             "content": "Case summary: A 35-year-old woman with diplopia."}
        assert "never mixes questions and tests" in second.body["messages"][-1]["content"]
        assert first.body["top_p"] == 0.5 and first.body["reasoning_effort"] == "high"  # --model-args merged
        assert [c.role for c in calls] == ["chat", "chat"]
    with FakeOpenAI(Reply(content="I think it is MG.")) as server:
        agent = LLMAgent(backend(server), "SYSTEM")
        with pytest.raises(AgentOutputError, match="malformed twice; last problem: the reply has no"):
            agent.act("summary", must_commit=False)
        assert len(server.chat_requests()) == 2
    with FakeOpenAI(Script(default=Reply(content="<test>MRI brain</test>"))) as server:
        agent = LLMAgent(backend(server), "SYSTEM")
        with pytest.raises(AgentOutputError, match="only a <diagnosis> is accepted now"):
            agent.act("summary", must_commit=True)
        assert "give your final <diagnosis> now" in server.chat_requests()[0].text()


def test_replay_files_and_agent(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [
        {"case_id": "c1", "actions": [{"kind": "question", "text": "Smoker?"}, {"kind": "question", "text": "Fever?"},
                                      {"kind": "test", "text": "CBC"}, {"kind": "diagnosis", "text": "MG"}]},
        {"case_id": "c2", "actions": [{"kind": "test", "text": "CBC"}]}])
    actions = load_actions(path)
    agent = ReplayAgent(actions["c1"])
    assert [agent.act("", False) for _ in range(3)] == [Questions(items=["Smoker?", "Fever?"]), Tests(items=["CBC"]),
                                                        Diagnosis(text="MG")]
    unfinished = ReplayAgent(actions["c2"])
    unfinished.act("", False)
    with pytest.raises(IncompleteEpisode, match="without a diagnosis"):
        unfinished.act("", False)
    capped = ReplayAgent([ReplayAction(kind="test", text="CBC"), ReplayAction(kind="diagnosis", text="MG")])
    assert capped.act("", must_commit=True) == Diagnosis(text="MG")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"case_id": "c1", "actions": [{"kind": "order", "text": "CBC"}]}])
    with pytest.raises(ActionsFileError, match=r"line 1: field 'actions.0.kind'"):
        load_actions(bad)


@pytest.fixture(scope="module")
def offline():
    return OfflineJudge.from_file()


@pytest.mark.parametrize(("reference", "diagnosis", "score"), [
    ("Myasthenia gravis", "myasthenia gravis", 5),
    ("Myasthenia gravis", "Generalized myasthenia gravis", 5),
    ("Myasthenia gravis", "MG", 5),
    ("Progressive multifocal encephalopathy (PML)", "PML", 5),
    ("Acute interstitial nephritis", "Interstitial nephritis", 4),
    ("Diffuse large B-cell lymphoma", "Follicular lymphoma", 3),
    ("Acute interstitial nephritis", "Acute pancreatitis", 2),
    ("Myasthenia gravis", "Lambert-Eaton myasthenic syndrome", 2),
    ("Myasthenia gravis", "Lambert-Eaton syndrome", 1),
    ("Hirschsprung disease", "Crohn disease", 1),
    ("Myasthenia gravis", "", 1),
])
def test_offline_judge_rubric(offline, reference, diagnosis, score):
    grade = offline.grade(reference, diagnosis)
    assert grade.score == score, grade.reasoning
    assert grade.correct == (score >= 4)


def test_offline_judge_on_every_shared_diagnosis(offline, data_dir):
    from medeval_core.benchmarks.sdbench.cases import import_agentclinic
    from tests.sdbench_fixtures import agentclinic_file

    diagnoses = [c.final_diagnosis for c in import_agentclinic(agentclinic_file(data_dir)).cases]
    assert all(offline.grade(d, d).score == 5 for d in diagnoses)
    for shift in (7, 13, 29):  # another case's diagnosis (shifts with no two names of one disease paired)
        wrong = [offline.grade(d, diagnoses[(i + shift) % len(diagnoses)]).score for i, d in enumerate(diagnoses)]
        assert max(wrong) <= 2, [(d, s) for d, s in zip(diagnoses, wrong, strict=True) if s > 2]
    assert offline.grade("Hirschsprung disease", "Hirschsprung’s disease").score == 5
    assert offline.grade("Serum sickness-like reaction", "Serum sickness").score <= 4


def test_llm_judge_over_http():
    replies = [Reply(content="Score: 5"), Reply(content=json.dumps({"score": 4, "reasoning": "Core disease right."}))]
    with FakeOpenAI(Script({"Reference diagnosis": replies})) as server:
        judge = LLMJudge.from_backend(backend(server, model="fake-judge"))
        attempts, calls = [], []
        grade = judge.grade("Acute interstitial nephritis", "Interstitial nephritis <b>", on_call=calls.append,
                            on_attempt=attempts.append)
        assert (grade.score, grade.correct, grade.reasoning) == (4, True, "Core disease right.")
        user = server.chat_requests()[0].body["messages"][1]["content"]
        assert user == ("Reference diagnosis: Acute interstitial nephritis\n"
                        "Physician's diagnosis: Interstitial nephritis <b>")
        assert [a.ok for a in attempts] == [False, True] and attempts[1].verdict["score"] == 4
        assert {a.judge_name for a in attempts} == {"sdbench-llm-judge"} and attempts[1].judge_model == "fake-judge"
        assert [c.role for c in calls] == ["sdbench-judge"] * 2
    with FakeOpenAI(Reply(content='{"score": 7, "reasoning": "x"}')) as server, \
            pytest.raises(JudgeFailure, match="whole number from 1 to 5"):
        LLMJudge.from_backend(backend(server)).grade("A", "B")
    with pytest.raises(ValueError, match="exactly the keys"):
        parse_grade('{"score": 3}')
