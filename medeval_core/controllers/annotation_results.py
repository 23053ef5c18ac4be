"""The Annotation results page's controller (administrators): the tasks, one task's report (win rates,
agreement, judge-versus-clinician agreement, patient-answer ratings) and the CSV of every answer."""

from __future__ import annotations

from medeval_core.annotation.gate import require_annotator
from medeval_core.annotation.report import AnnotationReport, export_rows, task_report, write_csv
from medeval_core.annotation.tasks import Task, list_tasks
from medeval_core.context import current_store

__all__ = ["Results"]


class Results:
    """The signed-in administrator's view of the annotation tasks (the sign-in form, or a refusal, and the script
    stops otherwise)."""

    def __init__(self) -> None:
        self.store = current_store()
        require_annotator(self.store, admin=True)

    def tasks(self) -> list[Task]:
        """Every task, newest first."""
        return list(reversed(list_tasks(self.store)))

    def report(self, task_id: str) -> AnnotationReport:
        return task_report(self.store, task_id)

    def answers_csv(self, task_id: str) -> str:
        return write_csv(export_rows(self.store, task_id))
