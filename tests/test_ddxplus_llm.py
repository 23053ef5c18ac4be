"""The DDXPlus LLM agent against a real OpenAI-compatible HTTP server on 127.0.0.1 (tests/fake_openai.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medeval_core import registry
from medeval_core.benchmarks.ddxplus.benchmark import build_params
from medeval_core.benchmarks.ddxplus.interaction import Consultation, OfflineContext, consult
from medeval_core.benchmarks.ddxplus.kb import load_kb
from medeval_core.benchmarks.ddxplus.llm_agent import LLMAgent, LLMOutputError
from medeval_core.benchmarks.ddxplus.patients import load_patients
from medeval_core.context import current_settings, current_store, reset
from medeval_core.models import for_role
from medeval_core.models.chat import ChatBackendError, OpenAIChatBackend
from medeval_core.records import CaseStatus
from medeval_core.runs import service
from medeval_core.settings import load_settings
from tests.ddxplus_fixtures import ddxplus_dir, sample_csv
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply

REPO_ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ["E_91", "E_53", "E_201"]
DIAGNOSIS = {"action": "diagnose", "differential": {"URTI": 0.6, "Influenza": 0.3, "Bronchitis": 0.1}}


def doctor(request: RecordedRequest) -> Reply:
    """Asks three questions (one per turn), then diagnoses: decided from the conversation the agent sent."""
    asked = sum(1 for m in request.body["messages"] if m["role"] == "assistant")
    if asked < len(QUESTIONS):
        return Reply(content=json.dumps({"action": "ask", "code": QUESTIONS[asked]}))
    return Reply(content="```json\n" + json.dumps(DIAGNOSIS) + "\n```")


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


@pytest.fixture(scope="module")
def patient(kb):
    return load_patients(sample_csv(), kb, limit=3).patient(2)


def _agent(kb, server, **kwargs):
    backend = OpenAIChatBackend(base_url=server.url, model="fake-doctor", api_key_env="MEDEVAL_TEST_NO_KEY",
                                retry_initial_s=0.01, retry_max_s=0.05, timeout_s=10)
    return LLMAgent(kb, backend, **kwargs)


def test_llm_agent_asks_by_code_and_ends_with_a_validated_differential(kb, patient):
    with FakeOpenAI(doctor) as server:
        agent = _agent(kb, server)
        ctx = OfflineContext(patient.case_id)
        episode = consult(agent, kb, patient, ctx)
        result = episode.output()
        requests = server.chat_requests()
    assert agent.reads_kb is False and agent.params()["reads_kb"] is False
    assert result.inquired == QUESTIONS
    assert result.differential == DIAGNOSIS["differential"]
    assert episode.verdict.metrics["IL"] == 4.0
    assert len(requests) == 4
    # Every request is recorded on the case's context as a chat model call.
    assert len(ctx.model_calls) == 4 and {c.role for c in ctx.model_calls} == {"chat"}
    assert {c.model for c in ctx.model_calls} == {"fake-doctor"} and all(c.ok for c in ctx.model_calls)
    first = requests[0].body
    assert first["model"] == "fake-doctor" and first["temperature"] == 0.0
    system = first["messages"][0]["content"]
    assert "E_91: Do you have a fever" in system and "Guillain-Barré syndrome" in system
    assert f"{patient.age}-year-old" in first["messages"][1]["content"]
    # The patient's answers come back in words.
    last = requests[-1].body["messages"]
    answer = episode.answers[0].text(kb)
    assert {"role": "user", "content": f"Patient (E_91): {answer}."} in last
    assert [t.actor for t in ctx.turns[1:]] == ["llm"] * 4


def test_invalid_output_is_corrected_then_accepted(kb, patient):
    replies = iter([Reply(content="I think it is the flu."),
                    Reply(content=json.dumps({"action": "ask", "code": "E_00000"})),
                    Reply(content=json.dumps({"action": "diagnose", "differential": {"Dragon pox": 1.0}}))])

    def script(request):
        return next(replies, None) or Reply(content=json.dumps(DIAGNOSIS))

    with FakeOpenAI(script) as server:
        agent = _agent(kb, server, max_invalid=3)
        session = agent.start(Consultation(kb, patient).intake())
        assert session.next_question() is None
        assert session.differential() == DIAGNOSIS["differential"]
        assert session.invalid_replies == 3
        corrections = [m["content"] for m in server.chat_requests()[-1].body["messages"]
                       if m["role"] == "user" and m["content"].startswith("That reply was not valid")]
    assert len(corrections) == 3
    assert "no JSON object" in corrections[0] and "E_00000" in corrections[1] and "Dragon pox" in corrections[2]


def test_persistently_invalid_output_fails(kb, patient):
    with FakeOpenAI(Reply(content="no idea")) as server:
        agent = _agent(kb, server, max_invalid=1)
        with pytest.raises(LLMOutputError, match="no valid action in 2 tries"):
            consult(agent, kb, patient, OfflineContext())
        assert len(server.chat_requests()) == 2


def test_transient_errors_are_retried_and_hard_errors_explained(kb, patient):
    statuses = iter([500, 429])

    def flaky(request):
        status = next(statuses, None)
        return Reply(status=status) if status else doctor(request)

    with FakeOpenAI(flaky) as server:
        result = consult(_agent(kb, server), kb, patient, OfflineContext()).output()
        assert result.inquired == QUESTIONS
        assert len(server.chat_requests()) == 6
    with FakeOpenAI(Reply(status=404)) as server, pytest.raises(ChatBackendError, match="answered HTTP 404"):
        _agent(kb, server).backend.complete([{"role": "user", "content": "hi"}])
    with pytest.raises(ChatBackendError, match="MEDEVAL_CHAT_BASE_URL"):
        for_role("chat", load_settings({}))


def test_batch_run_records_failures_and_the_kb_condition(kb, monkeypatch):
    def half_broken(request):
        if "-year-old male" in request.body["messages"][1]["content"]:
            return Reply(content="not an action")
        return doctor(request)

    with FakeOpenAI(half_broken) as server:
        monkeypatch.setenv("MEDEVAL_CHAT_BASE_URL", server.url)
        monkeypatch.setenv("MEDEVAL_CHAT_MODEL", "fake-doctor")
        reset()
        settings = current_settings()
        params = build_params(settings, sample_csv(), "llm", limit=6, agent_params={"max_invalid": 1}, concurrency=3)
        assert params.reads_kb is False and params.agent_params["model"] == "fake-doctor"
        report = service.launch("ddxplus", params, settings, current_store(), run_id="llm-run")
    store = current_store()
    results = store.results("llm-run")
    sexes = [c.sex for c in registry.benchmark("ddxplus").cases(params, settings)]
    assert report.failed == sexes.count("M") and report.done == sexes.count("F")
    assert all("no valid action" in r.error for r in results if r.status == CaseStatus.FAILED)
    summary = service.stored_summary(store, "llm-run").extras
    assert summary["reads_kb"] is False and summary["failed"] == sexes.count("M")
    # Failed consultations are counted apart (summary["failed"]), not averaged in as IL 1: IL is over the finished.
    assert summary["metrics"]["IL"] == pytest.approx(4.0)
    # The model calls of each finished case are stored with it (four requests: three questions, a diagnosis).
    done = next(r for r in results if r.ok)
    calls = store.model_calls("llm-run", done.case_id)
    assert len(calls) == 4 and {c.role for c in calls} == {"chat"}


def test_run_command_with_the_llm_agent(tmp_path):
    with FakeOpenAI(doctor) as server:
        env = {**os.environ, "MEDEVAL_CHAT_BASE_URL": server.url, "MEDEVAL_CHAT_MODEL": "fake-doctor"}
        done = subprocess.run(
            [sys.executable, "-m", "medeval_core", "run", "ddxplus", "--patients", str(sample_csv()), "--agent",
             "llm", "--limit", "2", "--json"], capture_output=True, text=True, cwd=REPO_ROOT, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["IL"] == 4.0
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDEVAL_CHAT")}
    missing = subprocess.run(
        [sys.executable, "-m", "medeval_core", "run", "ddxplus", "--patients", str(sample_csv()), "--agent", "llm",
         "--limit", "1"], capture_output=True, text=True, cwd=REPO_ROOT, env=env, check=False)
    assert missing.returncode == 2 and "MEDEVAL_CHAT_BASE_URL" in missing.stderr
