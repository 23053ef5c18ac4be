"""The Annotate page's controller: the signed-in annotator's tasks and queue, and each click's answer, skip, flag
or comment, stored as that annotator's."""

from __future__ import annotations

from medeval_core.annotation import answers
from medeval_core.annotation.answers import QueueItem, QueueTask, first_open, next_open
from medeval_core.annotation.gate import require_annotator
from medeval_core.annotation.shortcuts import CHOICE_KEYS, SKIP_KEY, bind_keys
from medeval_core.annotation.tasks import COMMENT, TaskKind
from medeval_core.context import current_store
from medeval_core.transcript import reasoned

__all__ = ["CHOICE_KEYS", "COMMENT", "SKIP_KEY", "Queue", "QueueItem", "QueueTask", "TaskKind", "bind_keys",
           "first_open", "next_open", "reasoned"]


class Queue:
    """The signed-in annotator's queue (the sign-in form, and the script stops, when nobody is signed in)."""

    def __init__(self) -> None:
        self.store = current_store()
        self.annotator = require_annotator(self.store).name

    def tasks(self) -> list[QueueTask]:
        return answers.my_tasks(self.store, self.annotator)

    def items(self, task_id: str) -> list[QueueItem]:
        """The task's items as the store holds them now, in queue order."""
        return answers.my_items(self.store, self.annotator, task_id)

    def answer(self, item_id: str, criterion: str, value: str) -> str | None:
        """Store one choice; the sentence saying why not when it is refused."""
        try:
            answers.record_answer(self.store, self.annotator, item_id, criterion, value)
        except answers.AnswerError as exc:
            return str(exc)
        return None

    def skip(self, item_id: str) -> None:
        answers.skip_item(self.store, self.annotator, item_id)

    def flag(self, item_id: str, reason: str) -> str | None:
        """Flag the item for the administrator; the sentence saying why not when it is refused."""
        try:
            answers.flag_item(self.store, self.annotator, item_id, reason)
        except answers.AnswerError as exc:
            return str(exc)
        return None

    def comment(self, item_id: str, text: str) -> None:
        answers.record_answer(self.store, self.annotator, item_id, COMMENT, text)
