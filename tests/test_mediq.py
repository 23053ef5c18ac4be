"""MEDIQ: the loader, the offline and LLM patients, the LLM expert's abstention strategies over HTTP, replay runs
through the runner and the CLI (resumable, answers stored as turns), and the MediQ result-file scorer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from medeval_core.benchmark import ModelRoles, RecordingContext
from medeval_core.benchmarks.mediq.benchmark import MediqSolver, build_params
from medeval_core.benchmarks.mediq.cases import MediqFileError, load_cases
from medeval_core.benchmarks.mediq.experts import LLMExpert, ReplayExpert, ReplayLine, load_actions
from medeval_core.benchmarks.mediq.interaction import consult
from medeval_core.benchmarks.mediq.patients import REFUSAL, FactSelectPatient, LLMPatient, states_answer
from medeval_core.benchmarks.mediq.scoring import score_result_file
from medeval_core.context import current_settings, current_store
from medeval_core.models.chat import OpenAIChatBackend
from medeval_core.runs import service
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply

REPO_ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [
    "Do you have a fever?", "What is your temperature?", "What is your blood pressure?", "How old are you?",
    "Do you have any past medical history?", "Do you smoke or drink alcohol?", "Any pain when urinating?",
    "What medications do you take?", "Is anyone in your family ill?", "What did the examination show?",
    "What is the answer?", "Which of the following is the most likely diagnosis?", "What is the diagnosis?",
    "Tell me everything about your case.", "", "Have you travelled abroad recently?",
]


@pytest.fixture(scope="module")
def imedqa(data_dir):
    return load_cases(data_dir / "mediq" / "imedqa_sample200.jsonl")


@pytest.fixture(scope="module")
def craft(data_dir):
    return load_cases(data_dir / "mediq" / "icraftmd.jsonl")


def ctx(case_id: str = "", models: dict | None = None) -> RecordingContext:
    return RecordingContext("test", case_id, 0, None, ModelRoles(models))  # type: ignore[arg-type]


def test_loader_reads_both_files_and_keeps_answer_mismatches(imedqa, craft):
    assert len(imedqa.cases) == 200 and not imedqa.skipped
    assert len(craft.cases) == 140
    first = imedqa.cases[0]
    assert first.case_id == "3" and first.initial_info.startswith("A 37-year-old female")
    assert first.facts[0] == "A 37-year-old female presents to the emergency department."  # numbering removed
    assert [c.case_id for c in craft.cases if c.answer_mismatch] == ["112", "124", "129", "132"]
    assert not any(c.answer_mismatch for c in imedqa.cases)
    # two knowledge questions of the sample have no vignette: nothing to start from, nothing to answer with
    bare = [c for c in imedqa.cases if not c.facts]
    assert [c.case_id for c in bare] == ["298", "779"] and all(c.initial_info == "" for c in bare)
    assert FactSelectPatient(bare[0]).answer("Do you have a fever?").text == REFUSAL


def test_a_bad_row_refuses_the_file_unless_skipped_and_reported_with_its_line(tmp_path, imedqa):
    good = json.loads((Path(imedqa.path)).read_text(encoding="utf-8").splitlines()[0])
    rows = [json.dumps(good), "{not json", json.dumps({**good, "id": 7, "answer_idx": "E"}),
            json.dumps({**good, "id": 8, "options": {"A": "x"}}), json.dumps({**good, "id": 9, "facts": "none"}),
            json.dumps(good), json.dumps({**good, "id": 10, "context": "One. Two", "initial_info": "Seen first"})]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(MediqFileError, match=r"cases.jsonl line 2: not valid JSON .*--skip-bad-lines"):
        load_cases(path)
    loaded = load_cases(path, skip_bad_lines=True)
    assert [c.case_id for c in loaded.cases] == ["3", "10"]
    assert loaded.cases[1].initial_info == "Seen first" and loaded.cases[1].context == ["One", "Two"]
    assert [(row.line, row.reason.split(" (")[0]) for row in loaded.skipped] == [
        (2, "not valid JSON"), (3, "answer_idx must be one of A-D, not 'E'"),
        (4, "options must map A, B, C and D to non-empty texts"), (5, "facts must be a list of sentences"),
        (6, "id 3 appears earlier in the file")]
    assert "5 rows skipped: line 2" in loaded.summary()
    with pytest.raises(MediqFileError, match="does not exist"):
        load_cases(tmp_path / "missing.jsonl")


def test_offline_patient_answers_only_with_its_own_facts_or_refuses(imedqa, craft):
    every_fact = {fact for loaded in (imedqa, craft) for case in loaded.cases for fact in case.facts}
    for case in [*imedqa.cases[:20], *craft.cases[:10]]:
        patient = FactSelectPatient(case)
        own = set(case.facts)
        for question in [*QUESTIONS, case.question, case.correct_option, f"Is it {case.correct_option}?"]:
            answer = patient.answer(question)
            if answer.refused:
                assert answer.text == REFUSAL and answer.facts == []
                continue
            used = [case.facts[i] for i in answer.facts]
            assert answer.text == " ".join(used)
            assert set(used) <= own and all(fact in every_fact for fact in used)
    case = imedqa.cases[0]
    patient = FactSelectPatient(case)
    fever = patient.answer("Do you have a fever?")
    assert fever.facts == [2] and fever.text == case.facts[2] and fever.similarities[0] >= 0.35
    assert patient.answer("Have you travelled abroad recently?").text == REFUSAL
    assert patient.answer("What is your blood pressure?").text == "Her blood pressure is 114/82 mmHg."


def test_facts_stating_the_answer_are_given_as_mediq_does_unless_the_run_withholds_them(imedqa, craft,
                                                                                         isolated_store):
    # MediQ's fact-select patient lists every atomic fact: one that contains the answer text is given too.
    case = next(c for loaded in (imedqa, craft) for c in loaded.cases if any(states_answer(f, c) for f in c.facts))
    stating = [i for i, fact in enumerate(case.facts) if states_answer(fact, case)]
    question = case.facts[stating[0]].rstrip(".") + "?"
    given = FactSelectPatient(case, threshold=0.0, max_facts=len(case.facts)).answer(question)
    assert set(stating) <= set(given.facts)
    withheld = FactSelectPatient(case, threshold=0.0, max_facts=len(case.facts), withhold_answer_facts=True)
    answer = withheld.answer(question)
    assert not set(stating) & set(answer.facts) and withheld.describe()["withhold_answer_facts"] is True
    # The option is recorded with the run and reaches the patient.
    settings = current_settings()
    plain = build_params(settings, imedqa.path, "replay")
    chosen = build_params(settings, imedqa.path, "replay", withhold_answer_facts=True)
    assert plain.withhold_answer_facts is False and chosen.withhold_answer_facts is True
    assert MediqSolver(chosen, None).patient(case, ctx(case.case_id)).allowed == [
        i for i in range(len(case.facts)) if i not in stating]
    assert MediqSolver(plain, None).patient(case, ctx(case.case_id)).allowed == list(range(len(case.facts)))


def test_a_prepared_patient_answers_as_an_unprepared_one(imedqa):
    questions = [*QUESTIONS, "Do you have a fever?", "  What is your   blood pressure? "]
    for case in imedqa.cases[:5]:
        prepared = FactSelectPatient(case)
        prepared.prepare(questions)
        for question in questions:
            normalised = " ".join(question.split())
            expected, got = FactSelectPatient(case).answer(normalised), prepared.answer(normalised)
            assert (got.text, got.facts) == (expected.text, expected.facts)
            assert np.allclose(got.similarities, expected.similarities, atol=1e-3)


def _backend(server, model="fake"):
    return OpenAIChatBackend(base_url=server.url, model=model, api_key_env="MEDEVAL_TEST_NO_KEY",
                             retry_initial_s=0.01, retry_max_s=0.05, timeout_s=10)


def test_llm_patient_is_constrained_to_the_facts_over_http(imedqa):
    case = imedqa.cases[0]
    replies = [Reply(content='{"facts": [99], "answer": "I feel fine"}'),
               Reply(content='{"facts": [5], "answer": "My temperature was 102 F."}'),
               Reply(content='{"facts": [], "answer": ""}')]
    recorder = ctx(case.case_id)
    with FakeOpenAI(lambda request: replies.pop(0)) as server:
        patient = LLMPatient(case, _backend(server, "fake-patient"))
        first = patient.answer("What was your temperature?", recorder)
        second = patient.answer("Do you travel?", recorder)
        requests = server.chat_requests()
    assert first.text == "My temperature was 102 F." and first.facts == [4] and not first.refused
    assert second.text == REFUSAL and second.refused
    system = requests[0].body["messages"][0]["content"]
    assert "5. Her temperature is 102 deg F (39.4 deg C)." in system and case.correct_option not in system
    assert "fact numbers run from 1 to" in requests[1].text()
    assert [c.role for c in recorder.model_calls] == ["patient"] * 3


def expert_server(strategy: str):
    """An expert that asks two questions, then chooses B; the reply depends on the prompt's task."""

    def respond(request: RecordedRequest) -> Reply:
        text = request.text()
        asked = text.count("Doctor:")
        if "Reply {\"decision\"" in text:
            return Reply(content=json.dumps({"decision": "YES" if asked >= 2 else "NO"}))
        if "Likert" in text or "scale of 1 to 5" in text:
            return Reply(content=json.dumps({"confidence": 5 if asked >= 2 else 2}))
        if "Reply {\"question\"" in text:
            return Reply(content=json.dumps({"question": ["Do you have a fever?", "Any pain when urinating?",
                                                          "Any flank pain?"][min(asked, 2)]}))
        return Reply(content="```json\n" + json.dumps({"choice": "B" if asked else "A"}) + "\n```")

    return respond


@pytest.mark.parametrize(("strategy", "questions", "timed_out"), [("binary", 2, False), ("scale", 2, False),
                                                                  ("fixed", 3, True)])
def test_llm_expert_strategies_over_http(imedqa, strategy, questions, timed_out):
    case = imedqa.cases[0]
    recorder = ctx(case.case_id)
    with FakeOpenAI(expert_server(strategy)) as server:
        expert = LLMExpert(_backend(server, "fake-expert"), abstention=strategy)
        output = consult(expert, case, FactSelectPatient(case), recorder, max_turns=3)
    assert output.num_questions == questions and output.timed_out is timed_out
    assert output.choice == "B" and output.correct and output.answer_idx == "B"
    assert output.initial_choice == "A" and output.initial_correct is False
    assert output.answers[0] == case.facts[2]
    turns = recorder.turns
    assert turns[0].action == "start" and turns[0].payload["initial_info"] == case.initial_info
    asked = [t for t in turns if t.action == "question"]
    assert [t.payload["question"] for t in asked] == output.questions
    assert asked[0].payload["facts"] == [2] and asked[0].payload["provenance"]["patient"] == "offline"
    assert turns[-1].action == "choice" and turns[-1].payload["forced"] is timed_out
    assert {c.role for c in recorder.model_calls} == {"expert"}
    assert set(output.facts_uncovered) == set(range(len(case.facts))) - {i for f in output.facts_used for i in f}


def test_replay_expert_chooses_at_the_budget():
    line = ReplayLine(case_id="3", actions=[{"kind": "question", "text": "Fever?"}] * 4 + [
        {"kind": "choice", "option": "c"}])
    expert = ReplayExpert(line)
    assert expert.choose(None) == "C"  # type: ignore[arg-type]


def write_actions(path: Path, cases, questions: list[str], option=None) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for case in cases:
            actions = [{"kind": "question", "text": q} for q in questions]
            actions.append({"kind": "choice", "option": option or case.answer_idx})
            handle.write(json.dumps({"case_id": int(case.case_id), "actions": actions}) + "\n")
    return path


def test_replay_run_through_the_service_is_resumable_and_stores_turns(tmp_path, imedqa):
    settings, store = current_settings(), current_store()
    actions = write_actions(tmp_path / "actions.jsonl", imedqa.cases[:6],
                            ["What symptoms brought you in?", "Any past medical history?", "What are your vital "
                             "signs?"])
    # The last case has no actions: it fails with a clear error and the others finish.
    params = build_params(settings, imedqa.path, "replay", actions, limit=7)
    report = service.launch("mediq", params, settings, store, run_id="mediq-replay")
    summary = service.stored_summary(store, report.run_id)
    assert (summary.counts.done, summary.counts.failed) == (6, 1)
    assert summary.metric("accuracy").value == 1.0 and summary.metric("Ave-Q").value == 3.0
    assert summary.metric("timeout rate").value == 0.0 and summary.metric("accuracy without asking") is None
    failed = [r for r in store.results(report.run_id) if not r.ok]
    assert "no line for case" in failed[0].error
    turns = store.turns(report.run_id, "3")
    assert [t.action for t in turns] == ["start", "question", "question", "question", "choice"]
    assert turns[1].actor == "replay" and "answer" in turns[1].payload and "facts" in turns[1].payload
    # Resume after fixing the input is refused (the actions file changed); the same file resumes nothing new.
    again = service.launch("mediq", params, settings, store, run_id="mediq-replay")
    assert again.run_id == report.run_id
    with actions.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"case_id": imedqa.cases[6].case_id, "actions": [{"kind": "choice",
                                                                                  "option": "A"}]}) + "\n")
    with pytest.raises(Exception, match="changed"):
        service.resume(report.run_id, settings, store)


def _cli(*args: str, env_db: str) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "MEDEVAL_DB_URL": env_db}
    return subprocess.run([sys.executable, "-m", "medeval_core", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, env=env)


def test_run_mediq_command_with_replay_and_json(tmp_path, imedqa, isolated_store):
    actions = write_actions(tmp_path / "a.jsonl", imedqa.cases[:3], ["Do you have a fever?"], option="A")
    done = _cli("run", "mediq", "--cases", imedqa.path, "--expert", "replay", "--actions", str(actions),
                "--limit", "3", "--max-turns", "5", "--json", env_db=isolated_store)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    expected = sum(c.answer_idx == "A" for c in imedqa.cases[:3]) / 3
    assert figures["accuracy"] == pytest.approx(expected) and figures["Ave-Q"] == 1.0
    withheld = _cli("run", "mediq", "--cases", imedqa.path, "--expert", "replay", "--actions", str(actions),
                    "--limit", "1", "--withhold-answer-facts", "--json", env_db=isolated_store)
    assert withheld.returncode == 0, withheld.stderr
    runs = {run_id: current_store().get_run(run_id).config["params"]["withhold_answer_facts"]
            for run_id in (figures["run_id"], json.loads(withheld.stdout)["run_id"])}
    assert list(runs.values()) == [False, True]
    missing = _cli("run", "mediq", "--cases", imedqa.path, "--expert", "replay", env_db=isolated_store)
    assert missing.returncode == 2 and "needs --actions FILE" in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case_id": 3, "actions": [{"kind": "choice", "option": "Z"}]}\n', encoding="utf-8")
    refused = _cli("run", "mediq", "--cases", imedqa.path, "--expert", "replay", "--actions", str(bad),
                   env_db=isolated_store)
    assert refused.returncode == 2 and "line 1: the choice must be one of A, B, C, D" in refused.stderr
    assert load_actions(actions)["3"].actions[0].text == "Do you have a fever?"


def mediq_result_line(case, choice, questions, intermediate):
    """A line in the layout of stellalisy/mediQ's mediQ_benchmark.py (tests/data/upstream/mediq/ holds real ones)."""
    return {"id": int(case.case_id),
            "info": {"context": " ".join(case.context), "correct_answer": case.answer,
                     "correct_answer_idx": case.answer_idx, "question": case.question, "options": case.options},
            "interactive_system": {"letter_choice": choice, "questions": questions,
                                   "answers": ["..."] * len(questions), "num_questions": len(questions),
                                   "intermediate_choices": intermediate, "correct": choice == case.answer_idx,
                                   "temp_additional_info": []}}


def test_mediq_result_files_are_scored_on_the_same_scorer(tmp_path, imedqa, isolated_store):
    cases = imedqa.cases[:4]
    wrong = {"A": "B", "B": "C", "C": "D", "D": "A"}
    truth = [case.answer_idx for case in cases]
    lines = [mediq_result_line(cases[0], truth[0], ["q1", "q2"], [wrong[truth[0]], truth[0], truth[0]]),
             mediq_result_line(cases[1], wrong[truth[1]], ["q"] * 10, [truth[1]] * 10 + [wrong[truth[1]]]),
             mediq_result_line(cases[2], truth[2], [], [truth[2]]),
             mediq_result_line(cases[3], None, ["q"], [])]
    path = tmp_path / "mediq_out.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    scores = score_result_file(path, max_questions=10)
    assert [s.correct for s in scores] == [True, False, True, False]
    assert [s.timed_out for s in scores] == [False, True, False, False]
    assert [s.initial_correct for s in scores] == [False, True, True, None]
    done = _cli("score", "mediq", "--results", str(path), "--max-questions", "10", "--json", env_db=isolated_store)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"accuracy": 0.5, "Ave-Q": 3.25, "timeout rate": 0.25, "Avg. Turns": 3.75,
                                       "accuracy without asking": pytest.approx(2 / 3), "n": 4}
    text = _cli("score", "mediq", "--results", str(path), "--cases", imedqa.path, env_db=isolated_store)
    assert "accuracy" in text.stdout and "95% CI" in text.stdout
    path.write_text(path.read_text() + json.dumps(lines[0]) + "\n", encoding="utf-8")
    refused = _cli("score", "mediq", "--results", str(path), env_db=isolated_store)
    assert refused.returncode == 2 and "line 5: case 3 is scored on an earlier line" in refused.stderr
    evaluate_py_layout = {**lines[0], "interactive_system": {"choice": truth[0], "questions": []}}
    path.write_text(json.dumps(evaluate_py_layout) + "\n", encoding="utf-8")
    refused = _cli("score", "mediq", "--results", str(path), env_db=isolated_store)
    assert refused.returncode == 2 and 'has no "letter_choice"' in refused.stderr


UPSTREAM_MEDIQ = Path(__file__).parent / "data" / "upstream" / "mediq"


def printed_by_mediq() -> dict[str, float]:
    """The figures MediQ's mediQ_benchmark.py printed for its own file ("Accuracy: 12 / 30 = 0.4", ...)."""
    figures = {}
    for line in (UPSTREAM_MEDIQ / "printed_by_mediq.txt").read_text(encoding="utf-8").splitlines():
        name, printed = line.split(": ", 1)
        figures[name] = float(printed.rsplit(" ", 1)[-1])
    return figures


def test_a_file_written_by_mediqs_own_benchmark_scores_as_mediq_printed_it(isolated_store):
    printed = printed_by_mediq()
    assert set(printed) == {"Accuracy", "Timeout Rate", "Avg. Turns"}
    done = _cli("score", "mediq", "--results", str(UPSTREAM_MEDIQ / "results_imedqa_first30_max5.jsonl"),
                "--max-questions", "5", "--json", env_db=isolated_store)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["accuracy"] == printed["Accuracy"]
    assert figures["timeout rate"] == printed["Timeout Rate"]
    assert figures["Avg. Turns"] == printed["Avg. Turns"]
    assert figures["Avg. Turns"] == pytest.approx(figures["Ave-Q"] + 1)
    assert 0 < figures["accuracy"] < 1 and 0 < figures["timeout rate"] < 1


def test_llm_roles_are_bound_from_the_settings_and_kept_for_a_resume(imedqa, monkeypatch):
    def respond(request: RecordedRequest) -> Reply:
        if "You are a patient" in request.text():
            return Reply(content=json.dumps({"facts": [1], "answer": "I am 37."}))
        return expert_server("scale")(request)

    with FakeOpenAI(respond) as server:
        for role in ("EXPERT", "PATIENT"):
            monkeypatch.setenv(f"MEDEVAL_{role}_BASE_URL", server.url)
            monkeypatch.setenv(f"MEDEVAL_{role}_MODEL", f"fake-{role.lower()}")
        from medeval_core import context as medeval_context

        medeval_context.reset()
        settings, store = current_settings(), current_store()
        params = build_params(settings, imedqa.path, "llm", patient="llm", limit=2)
        report = service.launch("mediq", params, settings, store)
        # The roles' backends are stored once, with the run's settings (a resume reads them back from there).
        stored = store.get_run(report.run_id).config
        assert {role: (stored["settings"]["roles"][role]["base_url"], stored["settings"]["roles"][role]["model"])
                for role in ("expert", "patient")} == {"expert": (server.url, "fake-expert"),
                                                       "patient": (server.url, "fake-patient")}
        assert stored["params"]["models"] == {}
        models = {body["model"] for body in (r.body for r in server.chat_requests())}
    summary = service.stored_summary(store, report.run_id)
    assert summary.counts.done == 2 and summary.metric("accuracy without asking") is not None
    assert models == {"fake-expert", "fake-patient"}
    assert store.turns(report.run_id, "3")[1].payload["answer"] == "I am 37."
    monkeypatch.delenv("MEDEVAL_EXPERT_BASE_URL")
    medeval_context.reset()
    with pytest.raises(Exception, match="No expert model is configured"):
        build_params(current_settings(), imedqa.path, "llm")


def test_the_turn_budget_is_max_turns_and_runs_stored_as_max_questions_still_read(imedqa, tmp_path, isolated_store):
    """One name for the question budget (``interaction.Limits.max_turns``): a run stored when MEDIQ called it
    ``max_questions`` reads the same, and the old option still works, saying the new name."""
    from medeval_core.benchmarks.mediq.params import MediqParams

    old = MediqParams.model_validate({"cases": imedqa.path, "expert": "replay", "max_questions": 4})
    assert old.max_turns == 4 and "max_questions" not in old.model_dump()
    actions = write_actions(tmp_path / "a.jsonl", imedqa.cases[:1], ["Do you have a fever?"], option="A")
    done = _cli("run", "mediq", "--cases", imedqa.path, "--expert", "replay", "--actions", str(actions),
                "--limit", "1", "--max-questions", "0", "--json", env_db=isolated_store)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("--max-questions is now called --max-turns") == 1
    assert json.loads(done.stdout)["Ave-Q"] == 0.0  # the replayed question is past the budget of 0


def test_a_run_stored_before_the_renames_continues_under_its_id(imedqa, tmp_path, isolated_store):
    """A run stored when its params said ``max_questions`` and ``workers`` is the same run as one asked with
    ``max_turns`` and ``concurrency``: launching it again under its id continues it instead of refusing it as one
    with other parameters."""
    from sqlalchemy import create_engine, text

    settings, store = current_settings(), current_store()
    actions = write_actions(tmp_path / "a.jsonl", imedqa.cases[:2], ["Do you have a fever?"])
    params = build_params(settings, imedqa.path, "replay", actions, limit=2, max_turns=5)
    first = service.launch("mediq", params, settings, store, run_id="before-renames")
    stored = store.get_run(first.run_id).config
    old_params = {("max_questions" if key == "max_turns" else "workers" if key == "concurrency" else key): value
                  for key, value in stored["params"].items()}
    with create_engine(isolated_store).begin() as connection:
        connection.execute(text("UPDATE runs SET config = :config WHERE id = :id"),
                           {"config": json.dumps({**stored, "params": old_params}), "id": first.run_id})
    again = service.launch("mediq", params, settings, store, run_id="before-renames")
    assert again.run_id == first.run_id
    assert service.stored_summary(store, first.run_id).counts.done == 2
    other = build_params(settings, imedqa.path, "replay", actions, limit=2, max_turns=6)
    with pytest.raises(Exception, match="other parameters"):  # a real difference is still refused
        service.launch("mediq", other, settings, store, run_id="before-renames")
