"""The tables of runs and what they record: results, turns, judgements, model calls, annotations, case claims
and workers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from medeval_core.records import (
    CaseResult,
    RunKind,
    RunStatus,
    utc_now,
)


class RunRow(SQLModel, table=True):
    __tablename__ = "runs"

    id: str = Field(primary_key=True)
    benchmark: str = Field(index=True)
    label: str = ""
    kind: str = Field(default=RunKind.BATCH, index=True, sa_column_kwargs={"server_default": RunKind.BATCH.value})
    source_run_id: str | None = Field(default=None, index=True)
    status: str = Field(default=RunStatus.PENDING, index=True)
    config: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    settings_hash: str = ""
    versions: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    expected_cases: int | None = None
    queue_total: int | None = None
    """Keys in the current wave's queue (``QueueKeys``); None when no wave is open."""
    queue_cursor: int | None = None
    """How many of the wave's keys (from the first) are in claims: the rest wait for a worker to claim them."""
    queue_has_finished: bool | None = None
    """Whether the run had finished results when the wave opened: only then can a key not yet claimed have one
    (results come from claims), so only then do new claims look for them."""
    summary: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    error: str | None = None
    created_at: datetime = Field(default_factory=utc_now)
    started_at: datetime | None = None
    finished_at: datetime | None = None


class CaseResultRow(SQLModel, table=True):
    __tablename__ = "case_results"
    __table_args__ = (UniqueConstraint("run_id", "case_id", "repetition", name="uq_result_run_case_rep"),
                      # result_counts from the index alone (revision 0010_result_status_index)
                      Index("ix_case_results_run_status", "run_id", "status"))

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True)
    case_id: str
    repetition: int = 0
    status: str
    output: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    metrics: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    scores: dict[str, Any] = Field(default_factory=dict,
                                   sa_column=Column(JSON, nullable=False, server_default=text("'{}'")))
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    def to_record(self) -> CaseResult:
        return CaseResult.model_validate(self, from_attributes=True)


class TurnRow(SQLModel, table=True):
    __tablename__ = "turns"
    __table_args__ = (UniqueConstraint("run_id", "case_id", "repetition", "index", name="uq_turn"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True)
    case_id: str
    repetition: int = 0
    index: int
    actor: str
    action: str
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    cost: float = 0.0
    created_at: datetime = Field(default_factory=utc_now)


class JudgementRow(SQLModel, table=True):
    __tablename__ = "judgements"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str | None = Field(default=None, foreign_key="runs.id", index=True)
    case_id: str = Field(index=True)
    repetition: int = 0
    judge_name: str
    judge_model: str = ""
    attempt: int = 1
    ok: bool
    verdict: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    latency_s: float | None = None
    http_status: int | None = None
    error: str | None = None
    created_at: datetime = Field(default_factory=utc_now)


class ModelCallRow(SQLModel, table=True):
    __tablename__ = "model_calls"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str | None = Field(default=None, foreign_key="runs.id", index=True)
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
    error: str | None = None
    created_at: datetime = Field(default_factory=utc_now)


class AnnotationRow(SQLModel, table=True):
    __tablename__ = "annotations"

    id: int | None = Field(default=None, primary_key=True)
    item_id: str = Field(index=True)
    annotator: str = Field(index=True)
    task: str
    criterion: str
    value: str
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    supersedes_id: int | None = None
    """The row this answer replaces (an edit); the newest row of an annotator, item and criterion is current."""
    created_at: datetime = Field(default_factory=utc_now)


class CaseClaimRow(SQLModel, table=True):
    """A worker's claim on a range of a run's current wave: the keys ``start`` to ``stop`` (exclusive) of its
    queue (``QueueKeys``), held until ``expires_at`` (extended by the worker's heartbeat) and marked done in the
    transaction that stores the last of their results. One row per claim, not per case: claiming, holding and
    finishing a thousand fast cases is a row each. A claim whose worker stopped heart-beating (or gave it back) is
    claimable again as a whole; its new holder skips the keys that already have a finished result. A new wave (a
    resume when no worker is alive) drops the run's rows (``Store.claim_cases``)."""

    __tablename__ = "case_claims"
    __table_args__ = (
        # A claim looks for a run's first undone claim in queue order: this index makes it a range scan.
        Index("ix_case_claims_queue", "run_id", "done", "start"),
    )

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id")  # looked up through the index that begins with it
    start: int
    stop: int
    worker_id: str | None = None
    expires_at: datetime | None = None
    attempts: int = 0
    done: bool = False


class RunWorkerRow(SQLModel, table=True):
    """A process executing a run: alive while ``expires_at`` (its last heartbeat plus the lease time) is ahead
    and ``finished_at`` is unset."""

    __tablename__ = "run_workers"

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True)
    host: str = ""
    pid: int = 0
    threads: int = 1
    started_at: datetime = Field(default_factory=utc_now)
    heartbeat_at: datetime = Field(default_factory=utc_now)
    expires_at: datetime = Field(default_factory=utc_now)
    finished_at: datetime | None = None
