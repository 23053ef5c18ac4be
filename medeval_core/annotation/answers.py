"""An annotator's queue and answers. Answers are appended, never overwritten: changing one stores a new row that
names the row it supersedes, with its own time; the newest row per annotator, item and criterion is current.
Skipping or flagging an item (with a reason) is stored the same way, under the reserved criteria ``skip`` and
``flag``; either takes the item out of the annotator's queue of open items.

Everything here reads one annotator's own rows only, so nobody is shown another annotator's answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from sqlmodel import col, select

from medeval_core.annotation.tasks import CHOICES, COMMENT, FLAG, SKIP, Task, TaskKind, get_task, task_record
from medeval_core.records import Annotation
from medeval_core.store import AnnotationRow, Store
from medeval_core.store.annotation_tables import AnnotationAssignmentRow, AnnotationItemRow, AnnotationTaskRow

MAX_COMMENT_CHARS = 4000
SKIPPED = "skipped"


class AnswerError(Exception):
    pass


class QueueTask(BaseModel):
    """A task as its annotator sees it: title and criteria, never the runs behind it."""

    id: str
    kind: TaskKind
    title: str
    criteria: list[str]
    choices: list[str]
    assigned: int
    done: int


class QueueItem(BaseModel):
    item_id: str
    number: int
    """1-based place in this annotator's queue for the task."""
    payload: dict[str, Any]
    answers: dict[str, str]
    """This annotator's current answers, by criterion (the comment under ``COMMENT``)."""
    complete: bool

    @property
    def skipped(self) -> bool:
        return SKIP in self.answers

    @property
    def flag(self) -> str | None:
        """The reason this annotator flagged the item with (None: not flagged)."""
        return self.answers.get(FLAG)

    @property
    def open(self) -> bool:
        """Still in the queue: neither answered in full, nor skipped, nor flagged."""
        return not (self.complete or self.skipped or self.flag is not None)


def current_rows(rows: Sequence[AnnotationRow]) -> dict[tuple[str, str, str], AnnotationRow]:
    """The newest row per (annotator, item, criterion): the current answers."""
    newest: dict[tuple[str, str, str], AnnotationRow] = {}
    for row in sorted(rows, key=lambda r: r.id or 0):
        newest[(row.annotator, row.item_id, row.criterion)] = row
    return newest


def _own_rows(store: Store, annotator: str, task_id: str) -> list[AnnotationRow]:
    statement = select(AnnotationRow).where(AnnotationRow.annotator == annotator, AnnotationRow.task == task_id)
    with store.session() as session:
        return list(session.exec(statement))


def _complete(criteria: Sequence[str], answers: dict[str, str]) -> bool:
    return all(criterion in answers for criterion in criteria)


def my_tasks(store: Store, annotator: str) -> list[QueueTask]:
    """The tasks with items assigned to ``annotator``, oldest first, with their progress."""
    with store.session() as session:
        assigned = list(session.exec(select(AnnotationAssignmentRow.task_id, AnnotationAssignmentRow.item_id)
                                     .where(AnnotationAssignmentRow.annotator == annotator)))
        task_ids = sorted({task_id for task_id, _ in assigned})
        tasks = [task_record(row) for row in session.exec(
            select(AnnotationTaskRow).where(col(AnnotationTaskRow.id).in_(task_ids))
            .order_by(col(AnnotationTaskRow.created_at)))]
    queue = []
    for task in tasks:
        answers = _answers_by_item(_own_rows(store, annotator, task.id))
        items = [item for task_id, item in assigned if task_id == task.id]
        done = sum(_complete(task.criteria, answers.get(item, {})) for item in items)
        queue.append(QueueTask(id=task.id, kind=task.kind, title=task.title, criteria=task.criteria,
                               choices=list(CHOICES[task.kind]), assigned=len(items), done=done))
    return queue


def _answers_by_item(rows: Sequence[AnnotationRow]) -> dict[str, dict[str, str]]:
    by_item: dict[str, dict[str, str]] = {}
    for (_, item_id, criterion), row in current_rows(rows).items():
        by_item.setdefault(item_id, {})[criterion] = row.value
    return by_item


def my_items(store: Store, annotator: str, task_id: str) -> list[QueueItem]:
    """``annotator``'s items of a task in task order, with their own current answers (resumable at any point)."""
    task = get_task(store, task_id)
    statement = (select(AnnotationItemRow)
                 .join(AnnotationAssignmentRow, col(AnnotationAssignmentRow.item_id) == col(AnnotationItemRow.id))
                 .where(AnnotationAssignmentRow.annotator == annotator, AnnotationItemRow.task_id == task_id)
                 .order_by(col(AnnotationItemRow.position)))
    with store.session() as session:
        items = list(session.exec(statement))
    answers = _answers_by_item(_own_rows(store, annotator, task_id))
    return [QueueItem(item_id=item.id, number=number, payload=item.payload, answers=answers.get(item.id, {}),
                      complete=_complete(task.criteria, answers.get(item.id, {})))
            for number, item in enumerate(items, start=1)]


def first_open(items: Sequence[QueueItem]) -> int:
    """Index of the first item still to answer (the last item when none is open)."""
    return next((i for i, item in enumerate(items) if item.open), max(len(items) - 1, 0))


def next_open(items: Sequence[QueueItem], index: int) -> int | None:
    """The open item after ``index`` (wrapping round to earlier ones), None when no other is open."""
    others = [i for i, item in enumerate(items) if item.open and i != index]
    following = [i for i in others if i > index] or others
    return following[0] if following else None


def record_answer(store: Store, annotator: str, item_id: str, criterion: str, value: str) -> AnnotationRow | None:
    """Append an answer; returns None when it repeats the current one (a double click stores nothing)."""
    with store.session() as session:
        item = session.get(AnnotationItemRow, item_id)
        assigned = session.exec(select(AnnotationAssignmentRow.id).where(
            AnnotationAssignmentRow.item_id == item_id, AnnotationAssignmentRow.annotator == annotator)).first()
    if item is None or assigned is None:
        raise AnswerError("This item is not in your queue; reload the page to see your current items.")
    task: Task = get_task(store, item.task_id)
    if criterion == COMMENT:
        value = value.strip()[:MAX_COMMENT_CHARS]
    elif criterion == SKIP:
        value = SKIPPED
    elif criterion == FLAG:
        value = value.strip()[:MAX_COMMENT_CHARS]
        if not value:
            raise AnswerError("Say why you flag this item, so the administrator can act on it.")
    elif criterion not in task.criteria:
        raise AnswerError(f"{criterion!r} is not a criterion of this task.")
    elif value not in CHOICES[task.kind]:
        raise AnswerError(f"{value!r} is not one of the choices {', '.join(CHOICES[task.kind])}.")
    rows = [row for row in _own_rows(store, annotator, task.id) if row.item_id == item_id]
    previous = current_rows(rows).get((annotator, item_id, criterion))
    if previous is not None and previous.value == value:
        return None
    if previous is None and criterion == COMMENT and not value:
        return None
    return store.add_annotation(Annotation(item_id=item_id, annotator=annotator, task=task.id, criterion=criterion,
                                           value=value, supersedes_id=previous.id if previous else None))


def skip_item(store: Store, annotator: str, item_id: str) -> AnnotationRow | None:
    """Pass on an item: it leaves the queue unanswered (the administrator sees it as skipped)."""
    return record_answer(store, annotator, item_id, SKIP, SKIPPED)


def flag_item(store: Store, annotator: str, item_id: str, reason: str) -> AnnotationRow | None:
    """Flag an item for the administrator with a reason (required); it leaves the queue."""
    return record_answer(store, annotator, item_id, FLAG, reason)
