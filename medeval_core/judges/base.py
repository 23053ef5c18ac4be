"""What every judge shares, whatever it judges: the record of one attempt, the callbacks that receive attempts and
model calls, the error once no valid verdict came, and the ``Judgement`` record an attempt is stored as.

A verdict is the judging benchmark's own pydantic model; here it is only carried and dumped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pydantic import BaseModel, Field

from medeval_core.records import Judgement, ModelCall


class JudgeError(RuntimeError):
    """No valid verdict: the last attempt failed, or the error is one that retrying cannot fix."""


class JudgeAttempt(BaseModel):
    """One try at judging one item; what ``judgement_of`` records."""

    attempt: int = Field(ge=1)
    ok: bool
    verdict: BaseModel | None = None
    latency_s: float
    http_status: int | None = None
    error: str | None = None


AttemptCallback = Callable[[JudgeAttempt], None]
CallCallback = Callable[[ModelCall], None]


class NamedJudge(Protocol):
    name: str
    """Recorded with every judgement, e.g. ``offline-rules-v1`` or ``openai:qwen3.8-max``."""
    model: str


def judgement_of(judge: NamedJudge, attempt: JudgeAttempt) -> Judgement:
    """One attempt as the ``Judgement`` record (no key or prompt is stored); the context fills in run and case."""
    return Judgement(
        case_id="", judge_name=judge.name, judge_model=judge.model, attempt=attempt.attempt, ok=attempt.ok,
        verdict=attempt.verdict.model_dump() if attempt.verdict else {}, latency_s=attempt.latency_s,
        http_status=attempt.http_status, error=attempt.error,
    )


def attempt_recorder(judge: NamedJudge, record: Callable[[Judgement], None]) -> AttemptCallback:
    """An ``on_attempt`` callback that hands each attempt to ``record`` (``CaseContext.record_judgement``)."""

    def store_attempt(attempt: JudgeAttempt) -> None:
        record(judgement_of(judge, attempt))

    return store_attempt
