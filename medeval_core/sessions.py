"""One-case interactive runs (a walkthrough, a lesion evaluation): open, load by id, record each step, finish.

A session is a run of ``kind="session"`` with one case: every step is written the moment it happens (a page
reload, or another browser tab, continues from the run id alone), and the finished result is stored like a batch
run's case result, with the same settings, provenance, judge attempts and model calls. The runs page never offers
Resume or Cancel for a session.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from medeval_core.benchmark import CaseContext, ModelRoles
from medeval_core.interaction import Episode
from medeval_core.records import (
    CaseOutcome,
    CaseRecords,
    CaseResult,
    CaseStatus,
    Judgement,
    ModelCall,
    RunConfig,
    RunKind,
    RunStatus,
    Turn,
    utc_now,
)
from medeval_core.redaction import redact
from medeval_core.runs.service import new_run_config
from medeval_core.settings import Settings
from medeval_core.store import Store, StoreError

REPETITION = 0


class SessionError(ValueError):
    """A session action that cannot be done; the message says what to do instead."""


class SessionContext(CaseContext):
    """A ``CaseContext`` that writes through: each turn, judge attempt and model call is stored at once."""

    def __init__(self, session: Session, models: ModelRoles) -> None:
        self.run_id = session.run_id
        self.case_id = session.case_id
        self.repetition = REPETITION
        self.settings = session.settings
        self._session = session
        self._models = models

    def record_turn(self, actor: str, action: str, payload: Mapping[str, Any] | None = None,
                    cost: float = 0.0) -> Turn:
        return self._session.add_turn(actor, action, payload, cost)

    def record_judgement(self, judgement: Judgement) -> None:
        self._session.store.add_judgement(judgement.model_copy(
            update={"run_id": self.run_id, "case_id": self.case_id, "repetition": self.repetition}))

    def record_model_call(self, call: ModelCall) -> None:
        self._session.store.add_model_calls([call.model_copy(
            update={"run_id": self.run_id, "case_id": self.case_id, "repetition": self.repetition})])

    def model(self, role: str) -> Any:
        return self._models.get(role)


class Session:
    def __init__(self, store: Store, settings: Settings, run_id: str, case_id: str, config: RunConfig) -> None:
        self.store = store
        self.settings = settings
        self.run_id = run_id
        self.case_id = case_id
        self.config = config
        self._lock = threading.Lock()
        self._next_index = len(store.turns(run_id, case_id, REPETITION))

    @classmethod
    def open(cls, store: Store, settings: Settings, benchmark: str, params: BaseModel, case_id: str,
             label: str = "") -> Session:
        """A new session run for one case, stored before the first step."""
        config = new_run_config(benchmark, settings, params, label=label, kind=RunKind.SESSION)
        config = config.model_copy(update={"session_case_id": case_id})
        row = store.create_run(config, expected_cases=1)
        store.update_run(row.id, status=RunStatus.RUNNING, started_at=utc_now())
        return cls(store, settings, row.id, case_id, config)

    @classmethod
    def load(cls, store: Store, settings: Settings, run_id: str, benchmark: str | None = None) -> Session:
        """The session stored as ``run_id``; a batch run, or another benchmark's session, is refused."""
        try:
            row = store.get_run(run_id)
        except StoreError as exc:
            raise SessionError(str(exc)) from None
        config = RunConfig.model_validate(row.config)
        if config.kind != RunKind.SESSION or (benchmark is not None and row.benchmark != benchmark):
            raise SessionError(f"Run {run_id} is not a {benchmark or 'interactive'} session; open it from the "
                               "runs page instead.")
        return cls(store, settings, run_id, config.session_case_id or "", config)

    def context(self, models: Mapping[str, Any] | None = None) -> SessionContext:
        """A context for this session's steps; ``models`` maps a role to a backend factory."""
        return SessionContext(self, ModelRoles(models))

    def add_turn(self, actor: str, action: str, payload: Mapping[str, Any] | None, cost: float) -> Turn:
        if self.finished:
            raise SessionError("This session is finished; start a new one to continue.")
        if self.store.get_run(self.run_id).status == RunStatus.CANCELLED:
            raise SessionError("This walkthrough was closed; start a new one to continue.")
        with self._lock:
            turn = Turn(run_id=self.run_id, case_id=self.case_id, repetition=REPETITION, index=self._next_index,
                        actor=actor, action=action, payload=dict(payload or {}), cost=cost)
            self.store.add_turns([turn])
            self._next_index += 1
        return turn

    def turns(self) -> list[Turn]:
        return self.store.turns(self.run_id, self.case_id, REPETITION)

    def result(self) -> CaseResult | None:
        return self.store.result(self.run_id, self.case_id, REPETITION)

    def finished_result(self) -> CaseResult | None:
        """The session's result when it finished well; a failed attempt is no result (the page may try again)."""
        found = self.result()
        return found if found is not None and found.ok else None

    @property
    def finished(self) -> bool:
        return self.finished_result() is not None

    def finish(self, outcome: CaseOutcome, summary: Mapping[str, Any] | None = None) -> CaseResult:
        """Store the session's result (once: a finished session keeps its first result) and close the run."""
        if self.finished:
            raise SessionError("This session already has its result.")
        result = CaseResult(run_id=self.run_id, case_id=self.case_id, repetition=REPETITION, status=CaseStatus.OK,
                            output=outcome.output, metrics=outcome.metrics, scores=outcome.scores,
                            started_at=self.store.get_run(self.run_id).started_at, finished_at=utc_now())
        self.store.save_case_records([CaseRecords(result=result)])
        self.store.update_run(self.run_id, status=RunStatus.COMPLETED, finished_at=utc_now(),
                              summary=dict(summary or {}))
        return result

    def fail(self, error: str) -> None:
        """Record that the session's case failed (the page shows the error; a new session can retry)."""
        result = CaseResult(run_id=self.run_id, case_id=self.case_id, repetition=REPETITION,
                            status=CaseStatus.FAILED, error=error, finished_at=utc_now())
        self.store.save_case_records([CaseRecords(result=result)])
        self.store.update_run(self.run_id, status=RunStatus.FAILED, error=redact(error), finished_at=utc_now())


def close_session(store: Store, run_id: str) -> None:
    """Close an open session its owner is done with (it stays listed as *closed*, with what it recorded)."""
    try:
        row = store.get_run(run_id)
    except StoreError as exc:
        raise SessionError(str(exc)) from None
    if row.kind != RunKind.SESSION:
        raise SessionError(f"Run {run_id} is not a walkthrough or lesion session; cancel a batch run instead.")
    if row.status in (RunStatus.RUNNING, RunStatus.PENDING):
        store.update_run(run_id, status=RunStatus.CANCELLED, finished_at=utc_now())


def delete_session(store: Store, run_id: str) -> None:
    """Remove a session and everything it recorded."""
    try:
        store.delete_session_run(run_id)
    except StoreError as exc:
        raise SessionError(str(exc)) from None


class WalkthroughError(ValueError):
    """A walkthrough action that cannot be done; the message says what to do instead."""


@dataclass
class SessionWalkthrough:
    """What every walkthrough page holds: the session's id, the session, the episode driven step by step from the
    page, and the finished result once there is one. Each benchmark's walkthrough adds its case and its state."""

    id: str
    session: Session
    episode: Episode[Any, Any]
    result: CaseResult | None

    @property
    def finished(self) -> bool:
        return self.result is not None
