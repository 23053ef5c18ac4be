"""Annotation tasks from real stored runs: balanced seeded sides, assignment with overlap, blinding of every run and
model name, append-only answers that supersede, and queues that never show another annotator's answer."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from medeval_core.annotation import answers, tasks
from medeval_core.annotation.items import HIDDEN, Blinder, ItemError
from medeval_core.cli import main
from medeval_core.context import current_settings, current_store
from medeval_core.store import AnnotationRow
from tests.annotation_fixtures import (
    MODEL_A,
    SECRET_NAMES,
    SeededRuns,
    create_task,
)

# The seeded runs and accounts (fixtures ``seeded`` and ``seeded_template``).
pytest_plugins = ("tests.annotation_seeded",)


@pytest.mark.parametrize("n", [*range(12), 57, 158])
def test_sides_are_balanced_for_any_number_of_items(n: int) -> None:
    for seed in range(20):
        sides = tasks.balanced_sides(n, random.Random(seed))
        assert len(sides) == n and abs(sides.count(True) - sides.count(False)) <= n % 2


def test_sides_follow_the_seed_and_are_shuffled() -> None:
    first = tasks.balanced_sides(40, random.Random(11))
    assert first == tasks.balanced_sides(40, random.Random(11))
    assert first != tasks.balanced_sides(40, random.Random(12))
    assert first != [True] * 20 + [False] * 20


def test_round_robin_assignment_gives_each_item_distinct_annotators_evenly() -> None:
    plan = tasks.assign_round_robin(10, ["a", "b", "c"], 2)
    assert all(len(set(names)) == 2 for names in plan)
    assert sorted(Counter(name for names in plan for name in names).values()) == [6, 7, 7]
    with pytest.raises(ItemError):
        tasks.assign_round_robin(3, ["a", "b"], 3)


def test_pairwise_task_is_balanced_seeded_blinded_and_assigned(seeded: SeededRuns) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators",
                       "dr.ada,dr.bo,dr.cy", "--per-item", "2", "--seed", "5")
    assert task["config"]["seed"] == 5 and task["criteria"] == list(tasks.DEFAULT_PAIRWISE_CRITERIA)
    items = tasks.task_items(current_store(), task["id"])
    assert len(items) == 6
    assert Counter(item.key["left"] for item in items) == {"A": 3, "B": 3}
    # Blinding: nothing an annotator is shown (payload, task title, item ids) names a run or model.
    shown = json.dumps([item.payload for item in items]) + task["title"] + " ".join(item.id for item in items)
    assert not [name for name in SECRET_NAMES if name.lower() in shown.lower()]
    assert all(Path(item.payload["case"]["image"]).is_file() for item in items)  # the lesion image is shown
    # The left text is run A's response exactly when the key says A is on the left.
    store = current_store()
    outputs = {run: {r.case_id: r.output["response"] for r in store.results(run)}
               for run in (seeded.run_a, seeded.run_b)}
    for item in items:
        left_run = seeded.run_a if item.key["left"] == "A" else seeded.run_b
        assert item.payload["left"]["text"] == outputs[left_run][item.case_id]
    again = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators",
                        "dr.ada", "--seed", "5")
    sides = {i.case_id: i.key["left"] for i in tasks.task_items(store, again["id"])}
    assert sides == {i.case_id: i.key["left"] for i in items}  # the recorded seed reproduces the sides
    queues = {name: len(answers.my_items(store, name, task["id"])) for name in ("dr.ada", "dr.bo", "dr.cy")}
    assert queues == {"dr.ada": 4, "dr.bo": 4, "dr.cy": 4}


def test_a_title_that_names_a_model_is_refused(seeded: SeededRuns, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["annotations", "task", "create", "pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b,
                 "--annotators", "dr.ada", "--title", f"{MODEL_A} against the other"]) == 2
    assert "must not name a run or model" in capsys.readouterr().err
    assert main(["annotations", "task", "create", "pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b,
                 "--annotators", "nobody"]) == 2
    assert "not an active annotator" in capsys.readouterr().err
    assert main(["annotations", "task", "create", "pairwise", "--run-a", seeded.judge_run_a, "--run-b",
                 seeded.run_b, "--annotators", "dr.ada"]) == 2
    assert f"compare the runs whose outputs were scored, such as {seeded.run_a}" in capsys.readouterr().err
    assert tasks.list_tasks(current_store()) == []


def test_blinder_scrubs_names_in_any_case_and_ignores_generic_words() -> None:
    blinder = Blinder({"Skin-VLM-7B", "openai", "abc", "ddi-run-1"})
    assert blinder.scrub({"text": "skin-vlm-7b said so (ddi-run-1)", "n": 3}) == {
        "text": f"{HIDDEN} said so ({HIDDEN})", "n": 3}
    assert blinder.text("openai abc") == "openai abc"


def test_patient_answer_items_come_from_the_stored_turns(seeded: SeededRuns) -> None:
    store = current_store()
    task = create_task("patient-answers", "--run", seeded.ddxplus_run, "--annotators", "dr.ada,dr.bo",
                       "--seed", "1")
    items = tasks.task_items(store, task["id"])
    result_ids = [r.case_id for r in store.results(seeded.ddxplus_run)]
    stored_answers = [t for case in result_ids for t in store.turns(seeded.ddxplus_run, case)
                      if isinstance(t.payload.get("answer"), str)]
    assert len(items) == len(stored_answers) > 0
    turn = {(t.case_id, t.index): t for t in stored_answers}
    for item in items:
        source = turn[(item.case_id, item.key["turn_index"])]
        assert item.payload["answer"] == source.payload["answer"]
        assert item.payload["question"] == source.payload["question"]
        assert item.payload["case"]["fields"]["pathology"]  # the record is shown
        assert item.key["patient_system"] == "ddxplus simulated patient"
    assert task["criteria"] == ["truthfulness", "relevance"]
    assert "kb-bayes" not in json.dumps([i.payload for i in items])  # the agent's name is hidden


def test_pairwise_over_two_agents_dialogues_hides_both_agents(seeded: SeededRuns) -> None:
    from medeval_core.benchmarks.ddxplus.benchmark import build_params
    from medeval_core.runs import service

    settings, store = current_settings(), current_store()
    assert seeded.ddxplus_patients is not None
    service.launch("ddxplus", build_params(settings, seeded.ddxplus_patients,
                                           "tests.test_ddxplus_runs:FirstQuestionsAgent"),
                   settings, store, run_id="ddx-first-questions")
    task = create_task("pairwise", "--run-a", seeded.ddxplus_run, "--run-b", "ddx-first-questions",
                       "--annotators", "dr.ada", "--seed", "6")
    items = tasks.task_items(store, task["id"])
    assert len(items) == 2
    for item in items:
        for side in ("left", "right"):
            speakers = [speaker for speaker, _ in item.payload[side]["dialogue"]]
            assert speakers[0] == "Intake" and "Patient" in speakers and speakers[-1] == "Conclusion"
            assert item.payload[side]["text"].startswith("Differential: ")
    shown = json.dumps([item.payload for item in items]).lower()
    assert not [name for name in ("kb-bayes", "first-questions", "firstquestionsagent", "ddx-kb-run")
                if name in shown]


def test_judge_review_items_show_reference_response_and_verdict(seeded: SeededRuns) -> None:
    store = current_store()
    task = tasks.create_judge_review_task(store, current_settings(), seeded.judge_run_a,
                                          tasks.Assignment(annotators=["dr.ada"], per_item=1), "admin.eve")
    items = tasks.task_items(store, task.id)
    verdicts = {r.case_id: r.metrics["correct"] for r in store.results(seeded.judge_run_a)}
    assert len(items) == 6
    for item in items:
        assert item.key["judge_correct"] is verdicts[item.case_id]
        assert item.payload["verdict"]["call"] == ("correct" if verdicts[item.case_id] else "incorrect")
        assert item.payload["case"]["fields"]["reference"] and item.payload["response"]["text"]
    assert "offline-rules-v1" not in json.dumps([i.payload for i in items])


def test_answers_are_appended_and_supersede_never_overwrite(seeded: SeededRuns) -> None:
    store = current_store()
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators",
                       "dr.ada,dr.bo", "--seed", "2")
    first_item = answers.my_items(store, "dr.ada", task["id"])[0]
    criterion = task["criteria"][0]
    original = answers.record_answer(store, "dr.ada", first_item.item_id, criterion, "left")
    assert original is not None and original.supersedes_id is None
    assert answers.record_answer(store, "dr.ada", first_item.item_id, criterion, "left") is None  # double click
    edit = answers.record_answer(store, "dr.ada", first_item.item_id, criterion, "tie")
    assert edit is not None and edit.supersedes_id == original.id and edit.created_at >= original.created_at
    rows = store.annotations(task["id"])
    assert [(r.value, r.supersedes_id) for r in rows] == [("left", None), ("tie", original.id)]
    assert answers.my_items(store, "dr.ada", task["id"])[0].answers == {criterion: "tie"}
    # The other annotator's queue shows none of dr.ada's answers.
    assert all(item.answers == {} for item in answers.my_items(store, "dr.bo", task["id"]))
    with pytest.raises(answers.AnswerError, match="not one of the choices"):
        answers.record_answer(store, "dr.ada", first_item.item_id, criterion, "A")
    with pytest.raises(answers.AnswerError, match="not in your queue"):
        answers.record_answer(store, "dr.cy", first_item.item_id, criterion, "left")
    assert len(store.annotations(task["id"])) == 2 and all(isinstance(r, AnnotationRow) for r in rows)


def test_queue_progress_and_resume_point(seeded: SeededRuns) -> None:
    store = current_store()
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators", "dr.ada",
                       "--criteria", "accuracy,coverage", "--seed", "3")
    items = answers.my_items(store, "dr.ada", task["id"])
    for item in items[:2]:
        for criterion in ("accuracy", "coverage"):
            answers.record_answer(store, "dr.ada", item.item_id, criterion, "right")
    answers.record_answer(store, "dr.ada", items[2].item_id, "accuracy", "left")  # half-done item
    reloaded = answers.my_items(store, "dr.ada", task["id"])
    assert [i.complete for i in reloaded] == [True, True, False, False, False, False]
    assert answers.first_open(reloaded) == 2
    [queued] = answers.my_tasks(store, "dr.ada")
    assert (queued.done, queued.assigned, queued.choices) == (2, 6, ["left", "tie", "right"])
