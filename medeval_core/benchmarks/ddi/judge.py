"""The DDI judge interface: one verdict per (reference, response), from the LLM judge or the offline rules.

Everything else (the lesion page, the ``ddi-judge`` scorer of score runs) uses only this module: ``make_ddi_judge``
picks the implementation from the settings, and ``attempt_recorder`` turns every attempt (failed ones too) into a
``Judgement`` handed to a ``CaseContext`` (which stores it with the case result). Batches are judged by the batch
runner (a score run with the judge's concurrency as its workers), not here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from medeval_core.metrics.stats import wilson_interval
from medeval_core.records import Judgement, ModelCall
from medeval_core.settings import Settings, SettingsError, api_key


class JudgeError(RuntimeError):
    """No valid verdict: the last attempt failed, or the error is one that retrying cannot fix."""


class DdiVerdict(BaseModel):
    """The judge's answer: exactly these three keys, ``correct`` a real Boolean, ``reason`` non-empty."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    predicted_diagnosis: str
    correct: bool
    reason: str

    @field_validator("reason")
    @classmethod
    def _reason_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("reason must be a non-empty string")
        return value

    @model_validator(mode="after")
    def _no_credit_without_diagnosis(self) -> DdiVerdict:
        # The protocol: no identifiable final diagnosis means an empty prediction and correct=false.
        if self.correct and not self.predicted_diagnosis.strip():
            raise ValueError("correct=true needs a non-empty predicted_diagnosis")
        return self


class DdiJudgeItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    case_id: str
    reference: str
    response: str


class JudgeAttempt(BaseModel):
    """One try at judging one item; what ``judgement_of`` records."""

    attempt: int = Field(ge=1)
    ok: bool
    verdict: DdiVerdict | None = None
    latency_s: float
    http_status: int | None = None
    error: str | None = None


AttemptCallback = Callable[[JudgeAttempt], None]
CallCallback = Callable[[ModelCall], None]


class DdiJudge(Protocol):
    name: str
    """Recorded with every judgement, e.g. ``offline-rules-v1`` or ``openai:qwen3.8-max``."""
    model: str
    concurrency: int
    progress_every: int

    def judge(self, item: DdiJudgeItem, on_attempt: AttemptCallback | None = None,
              on_call: CallCallback | None = None) -> DdiVerdict:
        """The verdict, or ``JudgeError`` once the retries are spent; ``on_attempt`` sees every attempt, and
        ``on_call`` every request sent to a model (none for the offline rules)."""
        ...


def make_ddi_judge(
    settings: Settings,
    backend: str | None = None,
    base_url: str | None = None,
    model: str | None = None,
) -> DdiJudge:
    """The judge the settings (or the explicit overrides) ask for; the offline rules when no endpoint is set."""
    choice = settings.role("judge")
    request = settings.judge_settings("ddi")
    if backend is None:
        # A URL alone means an OpenAI-compatible endpoint, as with MEDEVAL_JUDGE_BASE_URL.
        backend = "openai" if base_url else choice.backend
    if backend in ("offline", "none"):
        from medeval_core.judges.offline import OfflineDdiJudge

        return OfflineDdiJudge.from_settings(settings)
    if backend != "openai":
        raise SettingsError(f"The DDI judge cannot use the {backend!r} backend; choose 'offline' or 'openai'.")
    from medeval_core.judges.openai_judge import OpenAIDdiJudge

    url = base_url or choice.base_url or request.base_url
    key = api_key(choice.api_key_env)
    if not key:
        if url.rstrip("/") == request.base_url.rstrip("/"):
            raise SettingsError(
                f"The judge endpoint {url} needs an API key: set the environment variable {choice.api_key_env}, "
                "or use the offline judge (--judge offline)."
            )
        # Local OpenAI-compatible servers (vLLM, Ollama) accept any key; the SDK insists on one.
        key = "EMPTY"
    return OpenAIDdiJudge.from_settings(settings, base_url=url, model=model or choice.model or request.model,
                                        api_key=key)


def judgement_of(judge: DdiJudge, attempt: JudgeAttempt) -> Judgement:
    """One attempt as the ``Judgement`` record (no key or prompt is stored); the context fills in run and case."""
    return Judgement(
        case_id="", judge_name=judge.name, judge_model=judge.model, attempt=attempt.attempt, ok=attempt.ok,
        verdict=attempt.verdict.model_dump() if attempt.verdict else {}, latency_s=attempt.latency_s,
        http_status=attempt.http_status, error=attempt.error,
    )


def attempt_recorder(judge: DdiJudge, record: Callable[[Judgement], None]) -> AttemptCallback:
    """An ``on_attempt`` callback that hands each attempt to ``record`` (``CaseContext.record_judgement``)."""

    def store_attempt(attempt: JudgeAttempt) -> None:
        record(judgement_of(judge, attempt))

    return store_attempt


def accuracy_summary(expected: int, judged: int, correct: int, failed: int) -> dict[str, Any]:
    """``accuracy_expected`` over all expected cases and ``accuracy_judged`` over judged ones, Wilson 95 % each.

    Unjudged cases are neither right nor wrong in ``accuracy_judged``; ``accuracy_expected`` counts them as not
    correct, so the two together bound what the missing verdicts could change.
    """
    if not 0 <= correct <= judged or judged + failed > expected:
        raise ValueError(f"Inconsistent counts: expected {expected}, judged {judged}, correct {correct}, "
                         f"failed {failed}.")
    pending = expected - judged - failed
    return {
        "expected": expected,
        "judged": judged,
        "correct": correct,
        "failed": failed,
        "pending": pending,
        "accuracy_expected": correct / expected if expected else None,
        "accuracy_expected_wilson95": list(wilson_interval(correct, expected)) if expected else None,
        "accuracy_judged": correct / judged if judged else None,
        "accuracy_judged_wilson95": list(wilson_interval(correct, judged)) if judged else None,
    }
