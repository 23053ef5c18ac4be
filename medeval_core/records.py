"""Typed records that cross module boundaries (design.md §2). The store mirrors them in ``store.py``."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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


class Case(BaseModel):
    """The minimum every benchmark case has; benchmarks subclass it with their own fields."""

    model_config = ConfigDict(frozen=True)

    case_id: str


class CaseOutcome(BaseModel):
    """What a per-case function returns: the raw outputs and the per-case metrics."""

    output: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)


class CaseResult(BaseModel):
    run_id: str
    case_id: str
    repetition: int = 0
    status: CaseStatus
    output: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class RunConfig(BaseModel):
    """Everything needed to reproduce (and resume) a run: benchmark, parameters, settings and provenance."""

    benchmark: str
    label: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    settings_hash: str = ""
    versions: dict[str, Any] = Field(default_factory=dict)
    repetitions: int = Field(default=1, ge=1)


class Turn(BaseModel):
    run_id: str
    case_id: str
    repetition: int = 0
    index: int
    actor: str
    action: str
    payload: dict[str, Any] = Field(default_factory=dict)
    cost: float = 0.0


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
    error: str | None = None


class Annotation(BaseModel):
    """One clinician answer. Edits append a new row; nothing is overwritten."""

    item_id: str
    annotator: str
    task: str
    criterion: str
    value: str
    payload: dict[str, Any] = Field(default_factory=dict)
