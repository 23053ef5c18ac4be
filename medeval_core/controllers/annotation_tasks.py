"""The Annotation tasks page's controller (administrators): the runs tasks are built from, the active annotators,
building a pairwise, patient-answer or judge-review task with its assignment, and each task's progress and flags."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from medeval_core.annotation.accounts import list_annotators
from medeval_core.annotation.gate import require_annotator
from medeval_core.annotation.items import ItemError, system_name
from medeval_core.annotation.report import AnnotatorProgress, ItemFlag, annotator_progress, item_flags
from medeval_core.annotation.tasks import (
    DEFAULT_PAIRWISE_CRITERIA,
    Assignment,
    Task,
    create_judge_review_task,
    create_pairwise_task,
    create_patient_answer_task,
    list_tasks,
    runs_for_tasks,
)
from medeval_core.context import current_settings
from medeval_core.controllers import Outcome
from medeval_core.errors import StoreError
from medeval_core.store import open_store

__all__ = ["DEFAULT_PAIRWISE_CRITERIA", "TaskBuilder"]

TaskKindName = Literal["pairwise", "patient-answers", "judge-review"]


class TaskBuilder:
    """The signed-in administrator's view of the store (the sign-in form, or a refusal, and the script stops
    otherwise)."""

    def __init__(self) -> None:
        self.settings = current_settings()
        self.store = open_store(self.settings.db_url)
        self.admin = require_annotator(self.store, admin=True).name

    def run_labels(self) -> dict[str, str]:
        """Finished runs by id, newest first, each named by its system, benchmark and kind."""
        return {run.id: f"{system_name(run)} · {run.benchmark} · {run.kind}" for run in runs_for_tasks(self.store)}

    def annotators(self) -> list[str]:
        return [a.name for a in list_annotators(self.store) if a.active]

    def create(self, kind: TaskKindName, *, runs: Sequence[str], annotators: list[str], per_item: int,
               max_items: int, seed_text: str, title: str, criteria_text: str = "") -> Outcome:
        """Build the task's items from ``runs`` (runs A and B for a pairwise task, the dialogue runs for patient
        answers, the judge's score run for a review) and assign them; nothing is stored when it is refused."""
        try:
            seed = int(seed_text) if seed_text.strip() else None
        except ValueError:
            return Outcome(error="The seed must be a whole number; correct it or leave it empty.")
        try:
            assignment = Assignment(annotators=annotators, per_item=per_item)
            limit = max_items or None
            if kind == "pairwise":
                criteria = [line.strip() for line in criteria_text.splitlines() if line.strip()]
                task = create_pairwise_task(self.store, self.settings, runs[0], runs[1], assignment, self.admin,
                                            criteria=criteria, title=title, seed=seed, max_items=limit)
            elif kind == "patient-answers":
                task = create_patient_answer_task(self.store, self.settings, runs, assignment, self.admin,
                                                  title=title, seed=seed, max_items=limit)
            else:
                task = create_judge_review_task(self.store, self.settings, runs[0], assignment, self.admin,
                                                title=title, seed=seed, max_items=limit)
        except (ItemError, StoreError) as exc:
            return Outcome(error=str(exc))
        return Outcome(notice=f"Created task {task.id} (seed {task.config['seed']}).")

    def tasks(self) -> list[Task]:
        """Every task, newest first."""
        return list(reversed(list_tasks(self.store)))

    def progress(self, task_id: str) -> list[AnnotatorProgress]:
        return annotator_progress(self.store, task_id)

    def flags(self, task_id: str) -> list[ItemFlag]:
        return item_flags(self.store, task_id)
