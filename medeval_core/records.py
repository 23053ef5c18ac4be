"""Typed records that cross module boundaries (design.md §2). The store mirrors them in ``store.py``."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from medeval_core.redaction import redact_optional

ErrorText = Annotated[str | None, AfterValidator(redact_optional)]
"""An error message as stored: provider errors can echo the API key, so secrets are removed on the way in."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    COMPLETED = "completed"
    FAILED = "failed"


class CaseStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"


class RunKind(StrEnum):
    BATCH = "batch"
    """Cases run by the batch runner; resumable and cancellable."""
    SESSION = "session"
    """One case driven step by step from a page (a walkthrough, a lesion evaluation); never resumed by a runner."""
    SCORE = "score"
    """A scorer applied to a stored run's outputs (``source_run_id``)."""


class Case(BaseModel):
    """The minimum every benchmark case has; benchmarks subclass it with their own fields."""

    model_config = ConfigDict(frozen=True)

    case_id: str


class CaseOutcome(BaseModel):
    """What a per-case function returns: the raw outputs and the per-case metrics."""

    output: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    scores: dict[str, Any] = Field(default_factory=dict)


class CaseResult(BaseModel):
    run_id: str
    case_id: str
    repetition: int = 0
    status: CaseStatus
    output: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    scores: dict[str, Any] = Field(default_factory=dict)
    """Each metric's full score (value, explanation, provenance: judge, model, prompt version)."""
    error: ErrorText = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def ok(self) -> bool:
        return self.status == CaseStatus.OK


class InputFile(BaseModel):
    path: str
    sha256: str
    bytes: int


class RunConfig(BaseModel):
    """Everything needed to reproduce (and resume) a run: benchmark, parameters, settings and provenance."""

    benchmark: str
    label: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    settings_hash: str = ""
    versions: dict[str, Any] = Field(default_factory=dict)
    repetitions: int = Field(default=1, ge=1)
    kind: RunKind = RunKind.BATCH
    source_run_id: str | None = None
    """For a score run: the run whose outputs it scores."""
    session_case_id: str | None = None
    """For a session: its one case."""
    inputs: dict[str, InputFile] = Field(default_factory=dict)
    """Input files by name, with their sha256 at launch: a resume refuses to continue when one has changed."""


class Turn(BaseModel):
    run_id: str
    case_id: str
    repetition: int = 0
    index: int
    actor: str
    action: str
    payload: dict[str, Any] = Field(default_factory=dict)
    cost: float = 0.0


class ModelCall(BaseModel):
    """One request to a model (tested model, judge, simulated patient, agent): enough to audit cost and retries
    without storing the messages themselves (their sha256 identifies them)."""

    run_id: str | None = None
    case_id: str = ""
    repetition: int = 0
    role: str
    model: str
    messages_sha256: str
    latency_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    attempt: int = 1
    ok: bool = True
    error: ErrorText = None


class Judgement(BaseModel):
    """One judge attempt. Failed attempts are kept too, so retries and latency are auditable."""

    run_id: str | None = None
    case_id: str
    repetition: int = 0
    judge_name: str
    judge_model: str = ""
    attempt: int = 1
    ok: bool
    verdict: dict[str, Any] = Field(default_factory=dict)
    latency_s: float | None = None
    http_status: int | None = None
    error: ErrorText = None


class CaseRecords(BaseModel):
    """One finished case with everything recorded while it ran: written to the store in one transaction."""

    result: CaseResult
    turns: list[Turn] = Field(default_factory=list)
    judgements: list[Judgement] = Field(default_factory=list)
    model_calls: list[ModelCall] = Field(default_factory=list)

    @property
    def key(self) -> tuple[str, int]:
        return self.result.case_id, self.result.repetition


class Annotation(BaseModel):
    """One clinician answer. Edits append a new row; nothing is overwritten."""

    item_id: str
    annotator: str
    task: str
    criterion: str
    value: str
    payload: dict[str, Any] = Field(default_factory=dict)
    supersedes_id: int | None = None


class MetricSummary(BaseModel):
    """One metric of a run over its finished cases, with its interval (``medeval_core.compare``)."""

    metric: str
    kind: str  # "proportion" or "mean"
    n: int
    """Cases: each case's repetitions are averaged first."""
    value: float
    ci_low: float
    ci_high: float
    draws: int | None = None
    """Values before the per-case reduction (cases x repetitions scored)."""
    interval: str = ""
    """How the interval was computed: "wilson" or "percentile bootstrap"."""
