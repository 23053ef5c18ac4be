"""Open diagnosis (DynamiCare): the record format and its validation, the AgentClinic importer, the patient
simulators, the LLM doctor and the DynamiCare team over HTTP, replay runs through the runner and the CLI, and the
walkthrough page under AppTest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core import context
from medeval_core.benchmark import ModelRoles, RecordingContext
from medeval_core.benchmarks.dynamicare.benchmark import build_params
from medeval_core.benchmarks.dynamicare.cases import (
    RecordFileError,
    agentclinic_case,
    import_agentclinic,
    load_records,
    parse_record,
)
from medeval_core.benchmarks.dynamicare.doctors import (
    DynamiCareTeam,
    LLMDoctor,
    merge,
    parse_vote,
)
from medeval_core.benchmarks.dynamicare.interaction import Ask, Consultation, consult
from medeval_core.benchmarks.dynamicare.patients import UNKNOWN, LLMRecordPatient, RecordRetrievalPatient
from medeval_core.context import current_settings, current_store
from medeval_core.interaction import EpisodeError
from medeval_core.models.chat import OpenAIChatBackend
from medeval_core.runs import service
from medeval_core.vocabularies.icd9 import Icd9Mapper, display_code
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGE = str(REPO_ROOT / "medeval_core" / "benchmarks" / "dynamicare" / "page_walkthrough.py")

RECORD = {
    "case_id": "p-1", "chief_complaint": "58-year-old man with two days of breathlessness",
    "record": {"History": "Two days of worsening shortness of breath and ankle swelling.",
               "Vitals": {"Blood pressure": "168/100 mmHg", "Heart rate": "104 bpm"},
               "Past medical history": ["Long-standing hypertension", "Type 2 diabetes"],
               "Social history": "Smokes 20 cigarettes a day."},
    "icd9": ["428.0", {"code": "401.9", "name": "Hypertension NOS"}, "E849.0", "V45.81"],
}


@pytest.fixture(scope="module")
def mapper():
    return Icd9Mapper()


@pytest.fixture(scope="module")
def agentclinic(data_dir):
    return data_dir / "agentclinic" / "agentclinic_medqa.jsonl"


def ctx(case_id: str = "p-1") -> RecordingContext:
    return RecordingContext("test", case_id, 0, None, ModelRoles())  # type: ignore[arg-type]


def test_record_shape_is_validated(tmp_path):
    record = parse_record(RECORD)
    assert [c.code for c in record.icd9] == ["4280", "4019", "E8490", "V4581"]
    assert record.categories == ["428", "401", "E849", "V45"]
    assert ("Vitals / Blood pressure", "168/100 mmHg") in record.fields()
    assert ("Past medical history", "Long-standing hypertension; Type 2 diabetes") in record.fields()
    rows = [RECORD, {**RECORD, "case_id": "p-2", "icd9": ["not-a-code"]}, {**RECORD, "case_id": "p-3", "icd9": []},
            {**RECORD, "case_id": "p-4", "record": {}}, {**RECORD, "case_id": "p-5", "chief_complaint": " "},
            {**RECORD, "icd9": ["428"]}]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "{broken\n", encoding="utf-8")
    loaded = load_records(path, skip_bad_lines=True)
    assert [r.case_id for r in loaded.records] == ["p-1"]
    assert [(s.line, s.reason.split(" (")[0]) for s in loaded.skipped] == [
        (2, "'not-a-code' is not an ICD-9 code"), (3, "icd9 must list 1 to 5 ground-truth codes"),
        (4, "record must be a non-empty JSON object"), (5, "chief_complaint must be a non-empty string"),
        (6, "case_id p-1 appears earlier"), (7, "not valid JSON")]


def test_agentclinic_importer_maps_each_diagnosis_and_keeps_the_confidence(tmp_path, agentclinic, mapper):
    lines = agentclinic.read_text(encoding="utf-8").splitlines()[:3]
    source = tmp_path / "agentclinic.jsonl"
    source.write_text("\n".join([*lines, "{broken"]) + "\n", encoding="utf-8")
    out = tmp_path / "records.jsonl"
    # A line that is not JSON refuses the file by its number (issue 19), and nothing is written.
    with pytest.raises(RecordFileError, match=r"agentclinic.jsonl line 4: not valid JSON"):
        import_agentclinic([("ac", source)], out, mapper)
    assert not out.exists()
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = import_agentclinic([("ac", source)], out, mapper)
    assert report.written == 3 and report.skipped == []
    records = load_records(out).records
    first = records[0]
    assert first.case_id == "ac-1" and first.diagnosis == "Myasthenia gravis"
    assert first.chief_complaint == "35-year-old female, double vision"
    assert first.icd9[0].code == "3580" and first.icd9[0].method == "exact" and first.icd9[0].confidence == 1.0
    assert "Myasthenia" not in json.dumps(first.record)  # the diagnosis never enters the patient's record
    assert report.mappings[0] == {"case_id": "ac-1", "diagnosis": "Myasthenia gravis", "code": "358.0",
                                  "description": "Myasthenia gravis", "confidence": 1.0, "method": "exact",
                                  "matched": "Myasthenia gravis"}
    # every written case's truth is a mapping, counted by method for the summaries
    assert sum(report.truth_mapped.values()) == 3 and report.truth_mapped["exact"] >= 1
    assert agentclinic_case(agentclinic, 1, mapper).icd9[0].code == "3580"


def test_offline_record_patient_answers_from_fields_or_does_not_know():
    patient = RecordRetrievalPatient(parse_record(RECORD))
    answer = patient.answer("What is your blood pressure?")
    assert answer.text.startswith("Vitals / Blood pressure: 168/100 mmHg.") and 1 in answer.facts
    assert patient.answer("Do you smoke?").text == "Social history: Smokes 20 cigarettes a day."
    unknown = patient.answer("Have you been to Peru?")
    assert unknown.text == UNKNOWN and unknown.refused


def test_the_patient_never_gives_test_results_which_come_only_through_the_test_channel(agentclinic, mapper):
    record = agentclinic_case(agentclinic, 1, mapper)  # myasthenia gravis (AgentClinic MedQA case 1)
    assert record.diagnosis == "Myasthenia gravis"
    assert record.objective.startswith("Assess and diagnose the patient presenting with double vision")
    assert "Acetylcholine" not in json.dumps(record.record) and "Acetylcholine" in json.dumps(record.measurements)
    measured = [text for _, text in record.measurement_fields()]
    patient = RecordRetrievalPatient(record)
    for question in ("When did the symptoms start?", "What tests have you had?", "What did your blood tests show?",
                     "Do you have antibodies?", "What did the examination show?", "Any imaging?",
                     "What is your blood pressure?"):
        answer = patient.answer(question)
        assert not any(text in answer.text for text in measured), (question, answer.text)
        assert "Acetylcholine" not in answer.text and "RESULTS" not in answer.text
    started = patient.answer("When did the symptoms start?")
    assert "1-month history" in started.text
    consultation = Consultation(record, patient, mapper)
    assert consultation.start().objective == record.objective == consultation.view().objective
    step = consultation.step(Ask(text="REQUEST TEST: Acetylcholine receptor antibodies"))
    assert step.observation.answer.startswith("RESULTS: ")
    assert "Acetylcholine Receptor Antibodies: Present (elevated)" in step.observation.answer
    assert step.provenance["channel"] == "test" and step.provenance["patient"] == "measurement"
    absent = consultation.step(Ask(text="request test: lumbar puncture opening pressure"))
    assert absent.observation.answer == "RESULTS: NORMAL READINGS" and absent.provenance["channel"] == "test"
    asked = consultation.step(Ask(text="When did the symptoms start?"))
    assert asked.provenance["channel"] == "patient" and asked.observation.answer == started.text
    assert len(consultation.replies) == 3  # a test request is a turn, as in AgentClinic
    with pytest.raises(EpisodeError, match="Name the test"):
        consultation.step(Ask(text="REQUEST TEST:  "))


def test_a_record_written_before_measurements_keeps_agentclinic_tests_out_of_the_patient(agentclinic):
    raw = json.loads(agentclinic.read_text(encoding="utf-8").splitlines()[0])["OSCE_Examination"]
    old_line = {"case_id": "ac-1", "chief_complaint": "35-year-old female, double vision",
                "record": {key: raw[key] for key in ("Patient_Actor", "Physical_Examination_Findings",
                                                     "Test_Results")},
                "icd9": ["358.0"]}
    record = parse_record(old_line)
    assert set(record.record) == {"Patient_Actor"}
    assert set(record.measurements) == {"Physical_Examination_Findings", "Test_Results"}
    assert not any("Acetylcholine" in text for _, text in record.fields())


def _backend(server, model="fake"):
    return OpenAIChatBackend(base_url=server.url, model=model, api_key_env="MEDEVAL_TEST_NO_KEY",
                             retry_initial_s=0.01, retry_max_s=0.05, timeout_s=10)


def test_llm_patient_answers_in_the_first_person_over_http():
    replies = [Reply(content="My blood pressure was 168 over 100."), Reply(content="I don't know.")]
    recorder = ctx()
    with FakeOpenAI(lambda request: replies.pop(0)) as server:
        patient = LLMRecordPatient(parse_record(RECORD), _backend(server, "fake-patient"))
        first = patient.answer("What is your blood pressure?", recorder)
        second = patient.answer("Where were you born?", recorder)
        system = server.chat_requests()[0].body["messages"][0]["content"]
    assert first.text == "My blood pressure was 168 over 100." and not first.refused
    assert second.text == UNKNOWN and second.refused
    assert "168/100 mmHg" in system and "428" not in system and "Hypertension NOS" not in system
    assert [c.role for c in recorder.model_calls] == ["patient", "patient"]


def doctor_script(request: RecordedRequest) -> Reply:
    text = request.text()
    asked = text.count("Doctor:")
    if '"confidence": "very low"' in text:
        return Reply(content=json.dumps({"confidence": "very high" if asked >= 2 else "low"}))
    if 'Reply {"question"' in text:
        return Reply(content=json.dumps({"question": ["What is your blood pressure?", "Do you smoke?"][asked]}))
    return Reply(content=json.dumps({"diagnoses": ["Congestive heart failure", "hypertension", "401.9",
                                                   "Pneumonia"]}))


def test_llm_doctor_asks_until_confident_then_ranks_over_http(mapper):
    recorder = ctx()
    record = parse_record(RECORD)
    with FakeOpenAI(doctor_script) as server:
        output = consult(LLMDoctor(_backend(server, "fake-doctor")), record, RecordRetrievalPatient(record), mapper,
                         recorder)
    assert output.questions == ["What is your blood pressure?", "Do you smoke?"] and output.num_questions == 2
    assert [d.category for d in output.diagnoses] == ["428", "401", "401", "486"]
    assert output.metrics == {"Hit@5": 1.0, "Rec@5": 0.5, "Hit@10": 1.0, "Rec@10": 0.5}
    assert output.matched["@5"] == ["428", "401"]
    turns = recorder.turns
    assert [t.action for t in turns] == ["start", "question", "question", "diagnosis"]
    assert turns[1].payload["notes"] == {"confidence": "low"} and turns[1].payload["answer"].startswith("Vitals")
    assert {c.role for c in recorder.model_calls} == {"doctor"}


def test_votes_are_parsed_strictly():
    assert parse_vote('{"vote": "agree"}') is True
    assert parse_vote('{"vote": "Disagree"}') is False
    assert parse_vote('{"vote": false}') is False
    with pytest.raises(ValueError, match='"vote" must be'):
        parse_vote('{"vote": "I do not disagree"}')
    assert merge([[("Heart failure", 0.6), ("Pneumonia", 0.5)], [("pneumonia", 0.4), ("COPD", 0.2)]]) == [
        "Pneumonia", "Heart failure", "COPD"]


def team_script(log: list[str]):
    """Triage to six specialists (kept to five); round 1: the cardiologist disagrees; round 2: all agree."""

    def respond(request: RecordedRequest) -> Reply:
        text = request.text()
        rounds = text.count("Doctor:")
        if "choose the specialists" in text:
            log.append("triage")
            return Reply(content=json.dumps({"specialists": ["Cardiologist", "Pulmonologist", "Nephrologist",
                                                             "Endocrinologist", "Internist", "Geriatrician"]}))
        if "Give the diagnoses you consider likely" in text:
            specialist = text.split("You are the ")[1].split(" on the team")[0]
            log.append(f"propose {specialist}")
            return Reply(content=json.dumps({"diagnoses": [
                {"name": "Heart failure", "confidence": 0.7 if specialist == "Cardiologist" else 0.3},
                {"name": "Essential hypertension", "confidence": 0.5}]}))
        if "Do you agree" in text:
            specialist = text.split("You are the ")[1].split(" on the team")[0]
            vote = "disagree" if specialist == "Cardiologist" and rounds == 0 else "agree"
            log.append(f"vote {specialist} {vote}")
            return Reply(content=json.dumps({"vote": vote}))
        log.append("coordinate")
        return Reply(content=json.dumps({"question": "What is your blood pressure?",
                                         "specialists": ["Cardiologist", "Nephrologist"]}))

    return respond


def test_dynamicare_team_triages_votes_and_coordinates_over_http(mapper):
    record = parse_record(RECORD)
    log: list[str] = []
    recorder = ctx()
    with FakeOpenAI(team_script(log)) as server:
        team = DynamiCareTeam(_backend(server, "fake-team"))
        output = consult(team, record, RecordRetrievalPatient(record), mapper, recorder)
    assert log[0] == "triage" and sum(entry.startswith("propose") for entry in log[:7]) == 5  # five at most
    assert "vote Cardiologist disagree" in log and log.count("coordinate") == 1
    assert team.team == ["Cardiologist", "Nephrologist"] and team.rounds == 2
    assert output.questions == ["What is your blood pressure?"]
    assert [d.text for d in output.diagnoses] == ["Heart failure", "Essential hypertension"]
    assert output.metrics["Hit@5"] == 1.0 and output.metrics["Rec@5"] == 0.5
    final = recorder.turns[-1].payload["notes"]
    assert final["ended"] == "agreement" and final["votes"] == {"Cardiologist": True, "Nephrologist": True}
    assert recorder.turns[1].payload["notes"]["votes"]["Cardiologist"] is False


def test_replay_runs_through_the_service_and_the_cli(tmp_path, isolated_store):
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps(RECORD) + "\n" + json.dumps({**RECORD, "case_id": "p-2", "icd9": ["E815.0"]})
                       + "\n", encoding="utf-8")
    actions = tmp_path / "actions.jsonl"
    actions.write_text("\n".join(json.dumps(line) for line in [
        {"case_id": "p-1", "actions": [{"kind": "question", "text": "Do you smoke?"},
                                       {"kind": "diagnosis", "diagnoses": ["428.0", "hypertension"]}]},
        {"case_id": "p-2", "actions": [{"kind": "diagnosis", "diagnoses": ["E816", "E8159"]}]},
    ]) + "\n", encoding="utf-8")
    settings, store = current_settings(), current_store()
    report = service.launch("dynamicare", build_params(settings, records, "replay", actions), settings, store)
    summary = service.stored_summary(store, report.run_id)
    assert summary.counts.done == 2
    assert summary.metric("Hit@5").value == 1.0 and summary.metric("Rec@5").value == pytest.approx(0.75)
    assert summary.metric("Ave-Q").value == 0.5
    assert summary.extras["truth_mapped"] == {} and not any("Ground truth" in note for note in summary.notes)
    turns = store.turns(report.run_id, "p-1")
    assert [t.action for t in turns] == ["start", "question", "diagnosis"]
    assert turns[1].payload["answer"] == "Social history: Smokes 20 cigarettes a day."
    env = {**os.environ, "MEDEVAL_DB_URL": isolated_store}
    done = subprocess.run([sys.executable, "-m", "medeval_core", "run", "dynamicare", "--cases", str(records),
                           "--doctor", "replay", "--actions", str(actions), "--json"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["Hit@10"] == 1.0 and figures["Rec@10"] == pytest.approx(0.75) and figures["unmapped"] == []
    refused = subprocess.run([sys.executable, "-m", "medeval_core", "run", "dynamicare", "--cases", str(records),
                              "--doctor", "llm"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 2 and "No doctor model is configured" in refused.stderr


def test_open_diagnosis_page_maps_corrects_and_scores():
    app = AppTest.from_file(PAGE, default_timeout=120)
    app.run()
    assert not app.exception, app.exception
    app.selectbox(key="od_case").set_value(1).run()
    app.button(key="od_start").click().run()
    walk_id = app.query_params["walkthrough"]
    shown = [t.value for t in app.text]
    assert "35-year-old female, double vision" in shown
    assert any(text.startswith("Assess and diagnose the patient presenting with double vision") for text in shown)
    app.text_input(key="od_question").set_value("Do you have weakness?")
    next(b for b in app.button if b.label == "Ask").click().run()
    assert not app.exception, app.exception
    assert not any("Acetylcholine" in t.value for t in app.text)
    reloaded = AppTest.from_file(PAGE, default_timeout=120)
    reloaded.query_params["walkthrough"] = walk_id
    reloaded.run()
    assert next(m.value for m in reloaded.metric if m.label == "Questions asked") == "1 / 10"
    reloaded.text_area(key="od_ranked").set_value("1. Lambert-Eaton syndrome\n2. hypertension").run()
    boxes = [box for box in reloaded.text_input if box.label.endswith("ICD-9 code")]
    hypertension = Icd9Mapper().map("hypertension")
    assert boxes[1].value == display_code(hypertension.code) and boxes[1].value.startswith("401")
    assert any(t.value.startswith("hypertension\n") and t.value.endswith(
        f"(how mapped: {hypertension.method}, score {hypertension.confidence:.2f})") for t in reloaded.text)
    boxes[0].set_value("358.00").run()  # the person corrects the first mapping to myasthenia gravis
    reloaded.button(key="od_submit").click().run()
    assert not reloaded.exception, reloaded.exception
    assert next(m.value for m in reloaded.metric if m.label == "Hit@5") == "1.00"
    assert "Categories matched in the top 10: 358" in [t.value for t in reloaded.text]
    (result,) = context.current_store().results(walk_id)
    first = result.output["diagnoses"][0]
    assert (first["code"], first["method"]) == ("35800", "corrected") and result.output["num_questions"] == 1
    # st.dataframe's key names no element in AppTest (a table without selection is not a widget): find it by column.
    (table,) = [frame.value for frame in reloaded.dataframe if "how mapped" in frame.value.columns]
    assert table["how mapped"].tolist() == ["corrected", hypertension.method]
    assert table["score"].tolist() == [1.0, round(hypertension.confidence, 2)]


def test_import_records_validates_your_own_records(tmp_path, isolated_store):
    source = tmp_path / "mimic.jsonl"
    source.write_text(json.dumps(RECORD) + "\n" + json.dumps({**RECORD, "case_id": "p-9", "icd9": ["12345.6"]})
                      + "\n", encoding="utf-8")
    out = tmp_path / "checked.jsonl"
    env = {**os.environ, "MEDEVAL_DB_URL": isolated_store}
    done = subprocess.run([sys.executable, "-m", "medeval_core", "import-records", "--input", str(source), "--out",
                           str(out), "--skip-bad-lines"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "skipped line 2: '12345.6' is not an ICD-9 code" in done.stderr
    (checked,) = load_records(out).records
    assert [code.code for code in checked.icd9] == ["4280", "4019", "E8490", "V4581"]
    assert json.loads(out.read_text(encoding="utf-8"))["icd9"][2]["code"] == "E849.0"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("{}\n", encoding="utf-8")
    refused = subprocess.run([sys.executable, "-m", "medeval_core", "import-records", "--input", str(empty),
                              "--out", str(tmp_path / "none.jsonl")], cwd=REPO_ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
    assert refused.returncode == 2 and "empty.jsonl line 1: case_id must be a non-empty string" in refused.stderr
    assert refused.stderr.count("\n") == 1 and not (tmp_path / "none.jsonl").exists()
