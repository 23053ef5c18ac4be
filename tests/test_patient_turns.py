"""One patient-turn shape for every dialogue benchmark: a patient-answers rating task is made from a DDXPlus, a
MEDIQ, a DynamiCare and an SDBench run alike, and turns stored in the older shapes are still read."""

from __future__ import annotations

import json
from pathlib import Path

from medeval_core.annotation.accounts import add_annotator, get_annotator
from medeval_core.annotation.tasks import Assignment, create_patient_answer_task, task_items
from medeval_core.context import current_settings, current_store
from medeval_core.interaction import PatientTurn
from medeval_core.records import CaseResult, CaseStatus, RunConfig, Turn
from medeval_core.runs import service
from medeval_core.store import Store
from tests.test_dynamicare import RECORD
from tests.test_mediq import write_actions
from tests.test_sdbench_runs import cases_file, cases_of, transcripts, write_jsonl  # noqa: F401 - fixture

ANNOTATOR = "dr.turns"


def answer_items(store: Store, run_id: str) -> list[dict]:
    if get_annotator(store, ANNOTATOR) is None:
        add_annotator(store, ANNOTATOR, "a long passcode 123")
    task = create_patient_answer_task(store, current_settings(), [run_id],
                                      Assignment(annotators=[ANNOTATOR], per_item=1), created_by="test", seed=1)
    return [item.payload for item in task_items(store, task.id)]


def check_items(items: list[dict]) -> None:
    assert items, "the run gives patient answers to rate"
    assert all(item["question"] and isinstance(item["answer"], str) and item["answer"] for item in items)


def test_ddxplus_run_gives_patient_answers(data_dir: Path) -> None:
    from medeval_core.benchmarks.ddxplus.benchmark import build_params

    settings, store = current_settings(), current_store()
    report = service.launch("ddxplus", build_params(settings, data_dir / "ddxplus" / "patients_sample_en.csv",
                                                    "kb-bayes", limit=2), settings, store)
    check_items(answer_items(store, report.run_id))


def test_mediq_run_gives_patient_answers(tmp_path: Path, data_dir: Path) -> None:
    from medeval_core.benchmarks.mediq.benchmark import build_params
    from medeval_core.benchmarks.mediq.cases import load_cases

    cases = load_cases(data_dir / "mediq" / "imedqa_sample200.jsonl")
    actions = write_actions(tmp_path / "actions.jsonl", cases.cases[:2], ["What symptoms brought you in?"])
    settings, store = current_settings(), current_store()
    report = service.launch("mediq", build_params(settings, cases.path, "replay", actions, limit=2), settings,
                            store)
    items = answer_items(store, report.run_id)
    check_items(items)
    assert {item["question"] for item in items} == {"What symptoms brought you in?"}


def test_dynamicare_run_gives_patient_answers(tmp_path: Path) -> None:
    from medeval_core.benchmarks.dynamicare.benchmark import build_params

    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps(RECORD) + "\n", encoding="utf-8")
    actions = tmp_path / "actions.jsonl"
    actions.write_text(json.dumps({"case_id": RECORD["case_id"], "actions": [
        {"kind": "question", "text": "Do you smoke?"}, {"kind": "diagnosis", "diagnoses": ["428.0"]}]}) + "\n",
        encoding="utf-8")
    settings, store = current_settings(), current_store()
    report = service.launch("dynamicare", build_params(settings, records, "replay", actions), settings, store)
    [item] = answer_items(store, report.run_id)
    assert item["question"] == "Do you smoke?" and item["answer"].startswith("Social history")


def test_sdbench_run_gives_gatekeeper_answers(tmp_path: Path, cases_file: Path) -> None:  # noqa: F811
    from medeval_core.cli import main

    cases = cases_of(cases_file)
    actions = write_jsonl(tmp_path / "actions.jsonl", transcripts(cases))
    assert main(["run", "sdbench", "--cases", str(cases_file), "--agent", "replay", "--actions", str(actions),
                 "--gatekeeper", "offline", "--judge", "offline", "--limit", "1", "--run-id", "sd-turns",
                 "--json"]) == 0
    items = answer_items(current_store(), "sd-turns")
    check_items(items)
    assert "Do you smoke?; Any past medical history?" in {item["question"] for item in items}  # one turn, two
    assert all(item["answer"] != "Diagnosis recorded." for item in items)


def test_turns_stored_in_the_older_shapes_are_still_read() -> None:
    assert PatientTurn.read({"question": "Fever?", "text": "Yes.", "facts": [1]}) == PatientTurn(
        question="Fever?", answer="Yes.")  # MEDIQ and DynamiCare before the one shape
    assert PatientTurn.read({"requests": ["CBC", "Chest X-ray"], "answer": "CBC: normal."}) == PatientTurn(
        question="CBC; Chest X-ray", answer="CBC: normal.")  # SDBench before
    assert PatientTurn.read({"diagnosis": "Flu", "answer": "Diagnosis recorded."}) is None
    assert PatientTurn.read({"initial_info": "A woman", "question": "Which drug?"}) is None
    store = current_store()
    store.create_run(RunConfig(benchmark="mediq"), run_id="old-mediq")
    store.save_result(CaseResult(run_id="old-mediq", case_id="1", status=CaseStatus.OK))
    store.add_turns([Turn(run_id="old-mediq", case_id="1", index=1, actor="replay", action="question",
                          payload={"question": "Fever?", "text": "Yes, since Monday.", "facts": [2]})])
    from medeval_core.annotation.items import dialogue_lines

    assert dialogue_lines(store.turns("old-mediq", "1")) == [("Question", "Fever?"), ("Patient", "Yes, since Monday.")]
