"""Annotation tasks made from stored runs, and who annotates which item.

- pairwise preference: two runs' outputs for their shared finished cases; run A is on the left in exactly half
  of the items (the odd one out drawn), in an order shuffled with the task's seed, which is recorded;
- patient-answer ratings: every simulated-patient answer of dialogue runs, rated 0-2 for truthfulness and
  relevance against the case record;
- judge review: agree or disagree with each judge verdict stored for a run, beside the reference and response.

Only the item ``payload`` reaches an annotator; it is scrubbed of every name of the runs involved and checked
again before it is stored. ``key`` (sides, runs, verdicts) is read only by an administrator's report.
"""

from __future__ import annotations

import random
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from sqlmodel import col, select

from medeval_core.annotation.accounts import get_annotator
from medeval_core.annotation.items import (
    Blinder,
    ItemError,
    case_view,
    dialogue_lines,
    output_view,
    patient_system,
    run_cases,
    run_secrets,
    system_name,
)
from medeval_core.interaction import PatientTurn
from medeval_core.records import CaseStatus, RunKind, RunStatus, utc_now
from medeval_core.settings import Settings
from medeval_core.store import RunRow, Store
from medeval_core.store.annotation_tables import AnnotationAssignmentRow, AnnotationItemRow, AnnotationTaskRow


class TaskKind(StrEnum):
    PAIRWISE = "pairwise"
    PATIENT_ANSWERS = "patient-answers"
    JUDGE_REVIEW = "judge-review"


DEFAULT_PAIRWISE_CRITERIA = ("diagnostic accuracy", "clinical coverage", "reasoning coherence")
PATIENT_CRITERIA = ("truthfulness", "relevance")
JUDGE_CRITERION = "judge verdict"
COMMENT = "comment"
"""The optional free-text answer beside an item's criteria; never counted in the statistics."""
SKIP = "skip"
"""An annotator passed on an item (value ``skipped``): it leaves their queue, unanswered."""
FLAG = "flag"
"""An annotator flagged an item for the administrator (value: their reason): it leaves their queue."""
NOT_CRITERIA = (COMMENT, SKIP, FLAG)
"""Rows of ``annotations`` that are not judgements: stored the same way (appended), never counted."""

CHOICES: dict[TaskKind, tuple[str, ...]] = {
    TaskKind.PAIRWISE: ("left", "tie", "right"),
    TaskKind.PATIENT_ANSWERS: ("0", "1", "2"),
    TaskKind.JUDGE_REVIEW: ("agree", "disagree"),
}


class Task(BaseModel):
    id: str
    kind: TaskKind
    title: str
    criteria: list[str]
    created_by: str
    created_at: datetime
    config: dict[str, Any]
    """Administrator-only: runs, systems, seed, annotators and overlap."""


class Assignment(BaseModel):
    annotators: list[str]
    per_item: int


def task_record(row: AnnotationTaskRow) -> Task:
    return Task(id=row.id, kind=TaskKind(row.kind), title=row.title, criteria=list(row.criteria),
                created_by=row.created_by, created_at=row.created_at, config=dict(row.config))


def balanced_sides(n: int, rng: random.Random) -> list[bool]:
    """For each of ``n`` items whether run A is on the left: exactly half each way (an odd item drawn), shuffled."""
    sides = [True] * (n // 2) + [False] * (n // 2)
    if n % 2:
        sides.append(rng.random() < 0.5)
    rng.shuffle(sides)
    return sides


def assign_round_robin(n_items: int, annotators: Sequence[str], per_item: int) -> list[list[str]]:
    """``per_item`` distinct annotators for each item, rotating so that everyone gets the same share (±1) and
    every pair of neighbours in the list overlaps."""
    if not annotators:
        raise ItemError("Name at least one annotator for the task.")
    if not 1 <= per_item <= len(annotators):
        raise ItemError(f"Each item can go to 1-{len(annotators)} of the annotators named, not {per_item}.")
    return [[annotators[(i * per_item + j) % len(annotators)] for j in range(per_item)] for i in range(n_items)]


def _check_annotators(store: Store, annotators: Sequence[str]) -> list[str]:
    names = list(dict.fromkeys(name.strip() for name in annotators if name.strip()))
    for name in names:
        found = get_annotator(store, name)
        if found is None or not found.active:
            raise ItemError(f"{name!r} is not an active annotator; add it with "
                            f"`python -m medeval_core annotators add {name}` first.")
    return names


def _check_title(title: str, blinder: Blinder, default: str) -> str:
    chosen = title.strip() or default
    if blinder.leaks(chosen):
        raise ItemError("Annotators see the task title, so it must not name a run or model; choose a neutral title.")
    return chosen


def _save(store: Store, kind: TaskKind, title: str, criteria: Sequence[str], config: dict[str, Any],
          created_by: str, items: Sequence[tuple[str, dict[str, Any], dict[str, Any]]], assignment: Assignment,
          blinder: Blinder) -> Task:
    if not items:
        raise ItemError("These runs give no items to annotate; check that they finished the same cases.")
    clean_criteria = list(dict.fromkeys(c.strip() for c in criteria if c.strip()))
    if not clean_criteria or set(NOT_CRITERIA) & set(clean_criteria):
        raise ItemError(f"Give at least one criterion (and none of {', '.join(NOT_CRITERIA)}, which the queue "
                        "uses itself).")
    blinded = [(case_id, blinder.scrub(payload), key) for case_id, payload, key in items]
    for _, payload, _ in blinded:
        if blinder.leaks(payload):
            raise ItemError("An item still names a run or model after blinding; report this as a bug.")
    task_id = f"task-{utc_now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    rows = [AnnotationItemRow(id=uuid.uuid4().hex[:16], task_id=task_id, position=position, case_id=case_id,
                              payload=payload, key=key)
            for position, (case_id, payload, key) in enumerate(blinded)]
    plan = assign_round_robin(len(rows), assignment.annotators, assignment.per_item)
    task = AnnotationTaskRow(id=task_id, kind=kind, title=title, criteria=clean_criteria, created_by=created_by,
                             config={**config, "annotators": assignment.annotators,
                                     "per_item": assignment.per_item})
    with store.session() as session:
        session.add(task)
        session.flush()
        session.add_all(rows)
        session.flush()
        session.add_all(AnnotationAssignmentRow(task_id=task_id, item_id=row.id, annotator=name)
                        for row, names in zip(rows, plan, strict=True) for name in names)
        session.commit()
        session.refresh(task)
    return task_record(task)


def _finished(store: Store, run_id: str) -> dict[str, dict[str, Any]]:
    return {r.case_id: r.output for r in store.results(run_id, CaseStatus.OK) if r.repetition == 0}


def create_pairwise_task(store: Store, settings: Settings, run_a: str, run_b: str, assignment: Assignment,
                         created_by: str, criteria: Sequence[str] = DEFAULT_PAIRWISE_CRITERIA, title: str = "",
                         seed: int | None = None, max_items: int | None = None) -> Task:
    if run_a == run_b:
        raise ItemError("Choose two different runs to compare.")
    rows = [store.get_run(run_a), store.get_run(run_b)]
    for run in rows:
        if run.kind == RunKind.SCORE:
            raise ItemError(f"Run {run.id} is a score run (a judge's verdicts); compare the runs whose outputs were "
                            f"scored, such as {run.source_run_id}.")
    names = _check_annotators(store, assignment.annotators)
    seed = seed if seed is not None else secrets.randbelow(2**31)
    rng = random.Random(seed)
    outputs = [_finished(store, run.id) for run in rows]
    shared = sorted(set(outputs[0]) & set(outputs[1]))
    rng.shuffle(shared)
    shared = shared[:max_items] if max_items else shared
    cases = run_cases(store, rows[0], settings)
    blinder = Blinder(run_secrets(store, rows[0]) | run_secrets(store, rows[1]))
    items = []
    for case_id, a_left in zip(shared, balanced_sides(len(shared), rng), strict=True):
        views = [output_view(store, run.id, case_id, out[case_id]).model_dump()
                 for run, out in zip(rows, outputs, strict=True)]
        left, right = (views[0], views[1]) if a_left else (views[1], views[0])
        case = cases.get(case_id)
        payload = {"case": case_view(case).model_dump() if case is not None else None, "left": left, "right": right}
        items.append((case_id, payload, {"left": "A" if a_left else "B", "right": "B" if a_left else "A"}))
    config = {"runs": {"A": run_a, "B": run_b}, "systems": {"A": system_name(rows[0]), "B": system_name(rows[1])},
              "seed": seed}
    return _save(store, TaskKind.PAIRWISE, _check_title(title, blinder, "Which response is better?"), criteria,
                 config, created_by, items, Assignment(annotators=names, per_item=assignment.per_item), blinder)


def create_patient_answer_task(store: Store, settings: Settings, run_ids: Sequence[str], assignment: Assignment,
                               created_by: str, title: str = "", seed: int | None = None,
                               max_items: int | None = None) -> Task:
    if not run_ids:
        raise ItemError("Choose at least one dialogue run.")
    rows = [store.get_run(run_id) for run_id in dict.fromkeys(run_ids)]
    names = _check_annotators(store, assignment.annotators)
    seed = seed if seed is not None else secrets.randbelow(2**31)
    blinder = Blinder(set().union(*(run_secrets(store, run) for run in rows)))
    items = []
    for run in rows:
        cases = run_cases(store, run, settings)
        system = patient_system(run)
        for case_id in _finished(store, run.id):
            turns = store.turns(run.id, case_id)
            case = cases.get(case_id)
            record = case_view(case).model_dump() if case is not None else None
            for position, turn in enumerate(turns):
                reply = PatientTurn.read(turn.payload)
                if reply is None:
                    continue
                payload = {"case": record, "dialogue_before": dialogue_lines(turns[:position]),
                           "question": reply.question, "answer": reply.answer}
                items.append((case_id, payload, {"run": run.id, "turn_index": turn.index,
                                                 "patient_system": system}))
    random.Random(seed).shuffle(items)
    items = items[:max_items] if max_items else items
    config = {"runs": [run.id for run in rows], "seed": seed}
    return _save(store, TaskKind.PATIENT_ANSWERS, _check_title(title, blinder, "Simulated patient answers"),
                 PATIENT_CRITERIA, config, created_by, items,
                 Assignment(annotators=names, per_item=assignment.per_item), blinder)


def judge_verdict(verdict: dict[str, Any]) -> bool | None:
    """A stored verdict's correct/incorrect call (None when it makes none)."""
    value = verdict.get("correct")
    return value if isinstance(value, bool) else None


def create_judge_review_task(store: Store, settings: Settings, run_id: str, assignment: Assignment,
                             created_by: str, judge: str | None = None, title: str = "", seed: int | None = None,
                             max_items: int | None = None) -> Task:
    run = store.get_run(run_id)
    names = _check_annotators(store, assignment.annotators)
    seed = seed if seed is not None else secrets.randbelow(2**31)
    answered_by = run.source_run_id or run.id
    outputs = _finished(store, answered_by)
    latest: dict[tuple[str, str], Any] = {}
    for judgement in store.judgements(run_id=run.id):
        if judgement.ok and judgement.repetition == 0 and (judge is None or judgement.judge_name == judge):
            latest[(judgement.case_id, judgement.judge_name)] = judgement
    blinder = Blinder(run_secrets(store, run))
    cases = run_cases(store, run, settings)
    items = []
    for (case_id, judge_name), judgement in sorted(latest.items()):
        correct = judge_verdict(judgement.verdict)
        if correct is None or case_id not in outputs:
            continue
        case = cases.get(case_id)
        shown = {k.replace("_", " "): v for k, v in judgement.verdict.items() if k != "correct" and isinstance(v, str)}
        payload = {"case": case_view(case).model_dump() if case is not None else None,
                   "response": output_view(store, answered_by, case_id, outputs[case_id]).model_dump(),
                   "verdict": {"call": "correct" if correct else "incorrect", **shown}}
        items.append((case_id, payload, {"judge": judge_name, "judge_model": judgement.judge_model,
                                         "judge_correct": correct, "run": run.id}))
    random.Random(seed).shuffle(items)
    items = items[:max_items] if max_items else items
    config = {"runs": [run.id], "judge": judge, "seed": seed}
    return _save(store, TaskKind.JUDGE_REVIEW, _check_title(title, blinder, "Do you agree with the verdict?"),
                 (JUDGE_CRITERION,), config, created_by, items,
                 Assignment(annotators=names, per_item=assignment.per_item), blinder)


def list_tasks(store: Store) -> list[Task]:
    with store.session() as session:
        rows = session.exec(select(AnnotationTaskRow).order_by(col(AnnotationTaskRow.created_at)))
        return [task_record(row) for row in rows]


def get_task(store: Store, task_id: str) -> Task:
    with store.session() as session:
        row = session.get(AnnotationTaskRow, task_id)
    if row is None:
        raise ItemError(f"No annotation task {task_id!r}; list tasks with `python -m medeval_core annotations "
                        "task list`.")
    return task_record(row)


def task_items(store: Store, task_id: str) -> list[AnnotationItemRow]:
    statement = (select(AnnotationItemRow).where(AnnotationItemRow.task_id == task_id)
                 .order_by(col(AnnotationItemRow.position)))
    with store.session() as session:
        return list(session.exec(statement))


def runs_for_tasks(store: Store) -> list[RunRow]:
    """Finished runs an administrator can build tasks from, newest first."""
    return [run for run in store.list_runs() if run.status == RunStatus.COMPLETED]
