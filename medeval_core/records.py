"""Typed records that cross module boundaries (design.md §2). The store mirrors them in ``store.py``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Generic, TypeVar, overload

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
    """One case driven step by step from a page (a walkthrough, one upload evaluated); never resumed by a runner."""
    SCORE = "score"
    """A scorer applied to a stored run's outputs (``source_run_id``)."""


class Case(BaseModel):
    """The minimum every benchmark case has; benchmarks subclass it with their own fields."""

    model_config = ConfigDict(frozen=True)

    case_id: str


C = TypeVar("C", bound=Case)


class CaseList(Sequence[C], Generic[C]):
    """Cases whose ids are known before any case is built: the runner queues and claims ids and builds a case only
    when it runs it. A benchmark with many cases returns one from ``cases`` so that a run starts without building
    every case first (134,529 patients cost about half a second as objects)."""

    def __init__(self, ids: Sequence[str], build: Callable[[int], C]) -> None:
        """``build(i)``: the case at position ``i``, whose ``case_id`` is ``ids[i]``."""
        self.ids = list(ids)
        self._build = build
        self._position: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> C: ...
    @overload
    def __getitem__(self, index: slice) -> list[C]: ...

    def __getitem__(self, index: int | slice) -> C | list[C]:
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError("case index out of range")
        return self._build(index % len(self))

    def find(self, case_id: str) -> C | None:
        if self._position is None:
            self._position = {case_id: i for i, case_id in enumerate(self.ids)}
        position = self._position.get(case_id)
        return None if position is None else self._build(position)

    def keeping(self, keep: Callable[[str], bool]) -> CaseList[C]:
        """The cases whose id ``keep`` accepts, in order, still unbuilt."""
        positions = [i for i, case_id in enumerate(self.ids) if keep(case_id)]
        return CaseList([self.ids[i] for i in positions], lambda i: self._build(positions[i]))


def case_ids(cases: Sequence[Case]) -> list[str]:
    """The cases' ids in order, without building the cases of a ``CaseList``."""
    return cases.ids if isinstance(cases, CaseList) else [case.case_id for case in cases]


def case_finder(cases: Sequence[C]) -> Callable[[str], C | None]:
    """Case id -> the case (None when it is not among ``cases``), building a ``CaseList``'s case on demand."""
    if isinstance(cases, CaseList):
        return cases.find
    return {case.case_id: case for case in cases}.get


def cases_keeping(cases: Sequence[C], keep: Callable[[str], bool]) -> Sequence[C]:
    """The cases whose id ``keep`` accepts, in order (a ``CaseList`` stays unbuilt)."""
    if isinstance(cases, CaseList):
        return cases.keeping(keep)
    return [case for case in cases if keep(case.case_id)]


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
    """One metric of a run over its finished cases, with its interval (``medeval_core.results.compare``)."""

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
