"""The DDI judge: one verdict per (reference, response), from the LLM judge or the offline rules (design.md §3.1).

What is DDI's lives here: the verdict schema (``DdiVerdict``), the prompts (``prompts/ddi_judge_*.txt``), the
request settings (``configs/ddi_judge.json``, the SkinGPT-R1 release file) and the offline rules' synonym table.
The rest is the core's: ``models.for_role`` finds the ``judge`` role's endpoint, ``judges.openai_judge`` sends,
retries and budgets the requests, ``judges.offline`` holds the rules, ``judges.base`` the attempt records that a
``CaseContext`` stores. Batches are judged by the batch runner (a score run with the judge's concurrency as its
workers), not here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from medeval_core.benchmarks.ddi import JUDGE_ROLE
from medeval_core.judges.base import AttemptCallback, CallCallback, JudgeAttempt
from medeval_core.judges.offline import DiagnosisRules
from medeval_core.judges.openai_judge import OpenAIJudgeClient, strict_verdict
from medeval_core.metrics.stats import wilson_interval
from medeval_core.models import for_role
from medeval_core.prompts import fill, load_prompt
from medeval_core.settings import JudgeRequestSettings, Settings

REQUEST_SETTINGS = "ddi"
"""The judge settings' name: ``configs/ddi_judge.json``."""
OFFLINE_JUDGE_NAME = "offline-rules-v1"
SYNONYMS = "ddi_offline_synonyms"


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


parse_verdict: Callable[[str | None], DdiVerdict] = partial(strict_verdict, verdict=DdiVerdict)
"""The LLM judge's message as a ``DdiVerdict``, strictly (``InvalidVerdictError`` otherwise)."""


def build_messages(system_prompt: str, user_template: str, item: DdiJudgeItem,
                   tail_characters: int) -> list[dict[str, str]]:
    """System prompt verbatim; the user template with the reference and only the response's last characters."""
    tail = item.response[-tail_characters:] if len(item.response) > tail_characters else item.response
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": fill(user_template, ground_truth=item.reference, model_output=tail)},
    ]


class OpenAIDdiJudge:
    """The LLM judge: DDI's prompts and verdict over the core's judge client."""

    def __init__(self, client: OpenAIJudgeClient, system_prompt: str, user_template: str) -> None:
        self.client = client
        self.name = client.name
        self.model = client.model
        self.base_url = client.base_url
        self.concurrency = client.concurrency
        self.progress_every = client.progress_every
        self.system_prompt = system_prompt
        self.user_template = user_template

    @classmethod
    def from_settings(cls, settings: Settings, *, base_url: str, model: str, api_key: str,
                      sleep: Callable[[float], None] = time.sleep) -> OpenAIDdiJudge:
        """The judge of an endpoint given outright (tests, benches); runs get theirs from ``make_ddi_judge``."""
        from medeval_core.store import open_store

        client = OpenAIJudgeClient(request=request_settings(settings), base_url=base_url, model=model,
                                   api_key=api_key, store=open_store(settings.db_url), role=JUDGE_ROLE, sleep=sleep)
        return cls.with_prompts(client, settings.prompts_dir)

    @classmethod
    def with_prompts(cls, client: OpenAIJudgeClient, prompts_dir: Path) -> OpenAIDdiJudge:
        return cls(client, load_prompt("ddi_judge_system", prompts_dir), load_prompt("ddi_judge_user", prompts_dir))

    def messages(self, item: DdiJudgeItem) -> list[dict[str, str]]:
        tail = self.client.request.batch_evaluator_defaults.model_output_tail_characters
        return build_messages(self.system_prompt, self.user_template, item, tail)

    def request_body(self, item: DdiJudgeItem) -> dict[str, Any]:
        return self.client.request_body(self.messages(item))

    def judge(self, item: DdiJudgeItem, on_attempt: AttemptCallback | None = None,
              on_call: CallCallback | None = None) -> DdiVerdict:
        return self.client.judge(item.case_id, self.messages(item), parse_verdict, on_attempt, on_call)


class OfflineDdiJudge:
    """The offline rules over DDI's synonym table, recorded as their own judge (``offline-rules-v1``)."""

    concurrency = 1
    """Pure CPU work that holds the GIL: threads would only add overhead."""

    def __init__(self, rules: DiagnosisRules, progress_every: int = 10, tail_characters: int = 20_000) -> None:
        self.rules = rules
        self.name = OFFLINE_JUDGE_NAME
        self.model = rules.model
        self.progress_every = progress_every
        self.tail_characters = tail_characters

    @classmethod
    def from_settings(cls, settings: Settings) -> OfflineDdiJudge:
        batch = request_settings(settings).batch_evaluator_defaults
        return cls(DiagnosisRules.from_file(SYNONYMS, settings.prompts_dir), batch.progress_every,
                   batch.model_output_tail_characters)

    def judge(self, item: DdiJudgeItem, on_attempt: AttemptCallback | None = None,
              on_call: CallCallback | None = None) -> DdiVerdict:
        """Rules only: no model is called, so ``on_call`` never fires."""
        started = time.monotonic()
        # The same view of the response as the LLM judge gets: only its final characters.
        found = self.rules.verdict(item.reference, item.response[-self.tail_characters:])
        verdict = DdiVerdict(predicted_diagnosis=found.predicted_diagnosis, correct=found.correct, reason=found.reason)
        if on_attempt is not None:
            on_attempt(JudgeAttempt(attempt=1, ok=True, verdict=verdict, latency_s=time.monotonic() - started))
        return verdict


def request_settings(settings: Settings) -> JudgeRequestSettings:
    """The DDI judge's request settings (``configs/ddi_judge.json``); a missing file names itself."""
    return settings.judge_settings(REQUEST_SETTINGS)


def make_ddi_judge(
    settings: Settings,
    backend: str | None = None,
    base_url: str | None = None,
    model: str | None = None,
) -> DdiJudge:
    """The judge the ``judge`` role asks for (``models.for_role``; ``backend``/``base_url``/``model`` are the run's
    own choice over it); the offline rules when no endpoint serves it."""
    client = for_role(JUDGE_ROLE, settings, {"backend": backend, "base_url": base_url, "model": model},
                      interface="judge", request=request_settings(settings))
    if client is None:
        return OfflineDdiJudge.from_settings(settings)
    return OpenAIDdiJudge.with_prompts(client, settings.prompts_dir)


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
