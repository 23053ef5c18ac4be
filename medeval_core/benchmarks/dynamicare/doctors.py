"""Open-diagnosis doctors behind one interface: ``decide(view)`` -> a question or up to 10 ranked diagnoses;
``diagnose(view)`` -> the diagnoses now (at the question budget).

- ``LLMDoctor``: before each question a 5-level confidence check (very low .. very high); at ``high`` or above
  it returns its ranked diagnoses, otherwise it asks one question.
- ``DynamiCareTeam`` (Shang et al. 2025): a triage step picks at most five specialists; each round every
  specialist proposes diagnoses with confidences, which are merged into one ranking (summed confidence), and
  votes ``agree``/``disagree`` on it. Unanimous agreement ends the case with the merged ranking; otherwise a
  coordinator picks the next question for the patient and updates the team. At most 10 rounds.
- ``ReplayDoctor``: one case's actions from a JSON Lines file (``{"case_id", "actions": [{"kind": "question",
  "text"} | {"kind": "diagnosis", "diagnoses": [...]}]}``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from medeval_core.benchmark import CaseContext
from medeval_core.models.chat import ChatBackend, Message, ask_until_valid, json_object
from medeval_core.prompts import fill, load_prompt
from medeval_core.replay import ActionFileError, load_replay

__all__ = ["ActionFileError", "Doctor", "DoctorDecision", "DoctorError", "DoctorView", "DynamiCareTeam",
           "LLMDoctor", "ReplayDoctor", "ReplayLine", "load_actions", "merge", "parse_vote"]

MAX_DIAGNOSES = 10
MAX_SPECIALISTS = 5
MAX_ROUNDS = 10
CONFIDENCE_LEVELS = ("very low", "low", "moderate", "high", "very high")
READY_LEVEL = 3
"""The index in ``CONFIDENCE_LEVELS`` from which the LLM doctor stops asking (``high``)."""
PROMPT_VERSION = "dynamicare-doctor-v2"
"""v2: the doctor may request a test result ("REQUEST TEST: ..."), as AgentClinic's doctor does."""


class DoctorView(BaseModel):
    complaint: str
    objective: str = ""
    history: list[tuple[str, str]] = Field(default_factory=list)
    questions_left: int


class DoctorDecision(BaseModel):
    kind: Literal["question", "diagnosis"]
    text: str = ""
    diagnoses: list[str] = Field(default_factory=list)
    notes: dict[str, Any] = Field(default_factory=dict)
    """What led to it (confidence level, the team's votes), stored with the turn."""


class Doctor(Protocol):
    name: str

    def decide(self, view: DoctorView, ctx: CaseContext | None = None) -> DoctorDecision: ...

    def diagnose(self, view: DoctorView, ctx: CaseContext | None = None) -> list[str]: ...

    def describe(self) -> dict[str, Any]: ...


class DoctorError(RuntimeError):
    """A doctor could not act; the message says why."""


def parse_diagnoses(reply: str) -> list[str]:
    value = json_object(reply).get("diagnoses")
    if not isinstance(value, list) or not value:
        raise ValueError('"diagnoses" must be a non-empty list of names')
    names = [str(item).strip() for item in value if str(item).strip()]
    if not names:
        raise ValueError('"diagnoses" must be a non-empty list of names')
    return list(dict.fromkeys(names))[:MAX_DIAGNOSES]


def parse_question(reply: str) -> str:
    value = json_object(reply).get("question")
    if not isinstance(value, str) or not value.strip():
        raise ValueError('"question" must be the question as text')
    return value.strip()


def parse_confidence(reply: str) -> int:
    value = str(json_object(reply).get("confidence", "")).strip().lower()
    if value not in CONFIDENCE_LEVELS:
        raise ValueError(f'"confidence" must be one of {", ".join(CONFIDENCE_LEVELS)}')
    return CONFIDENCE_LEVELS.index(value)


def parse_vote(reply: str) -> bool:
    """True for ``agree``, False for ``disagree``; anything else is asked again (a substring test would read
    "disagree" as agreement)."""
    value = json_object(reply).get("vote")
    if isinstance(value, bool):
        return value
    word = str(value or "").strip().lower()
    if word not in ("agree", "disagree"):
        raise ValueError('"vote" must be "agree" or "disagree"')
    return word == "agree"


def parse_specialists(reply: str, key: str = "specialists") -> list[str]:
    value = json_object(reply).get(key)
    if not isinstance(value, list):
        raise ValueError(f'"{key}" must be a list of specialist titles')
    names = list(dict.fromkeys(str(item).strip() for item in value if str(item).strip()))
    if not names:
        raise ValueError(f'"{key}" must name at least one specialist')
    return names[:MAX_SPECIALISTS]


def parse_proposals(reply: str) -> list[tuple[str, float]]:
    value = json_object(reply).get("diagnoses")
    if not isinstance(value, list) or not value:
        raise ValueError('"diagnoses" must be a non-empty list of {"name", "confidence"}')
    proposals: list[tuple[str, float]] = []
    for item in value:
        if not isinstance(item, dict) or not str(item.get("name", "")).strip():
            raise ValueError('each diagnosis is {"name": ..., "confidence": 0-1}')
        confidence = item.get("confidence")
        if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
            raise ValueError(f"the confidence of {item.get('name')!r} must be a number from 0 to 1")
        proposals.append((str(item["name"]).strip(), float(confidence)))
    return proposals[:MAX_DIAGNOSES]


def merge(proposals: list[list[tuple[str, float]]]) -> list[str]:
    """One ranking from the specialists' proposals: summed confidence per name (case-insensitive), highest first,
    ties in order of first mention."""
    totals: dict[str, float] = {}
    spelling: dict[str, str] = {}
    for proposal in proposals:
        for name, confidence in proposal:
            key = " ".join(name.lower().split())
            spelling.setdefault(key, name)
            totals[key] = totals.get(key, 0.0) + confidence
    order = sorted(totals, key=lambda key: -totals[key])
    return [spelling[key] for key in order][:MAX_DIAGNOSES]


class _Prompted:
    role = "doctor"

    def __init__(self, backend: ChatBackend, max_invalid: int = 2) -> None:
        self.backend = backend
        self.max_invalid = max_invalid
        self.system_prompt = load_prompt("dynamicare_doctor_system")
        self.state_template = load_prompt("dynamicare_doctor_state")

    def messages(self, view: DoctorView, task: str) -> list[Message]:
        conversation = "\n".join(f"Doctor: {q}\nPatient: {a}" for q, a in view.history) or "None"
        complaint = f"{view.complaint}\nObjective: {view.objective}" if view.objective else view.complaint
        user = fill(self.state_template, complaint=complaint, conversation=conversation,
                    questions_left=str(view.questions_left), task=task)
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]

    def ask(self, view: DoctorView, task: str, parse: Any, ctx: CaseContext | None) -> Any:
        return ask_until_valid(self.backend, self.messages(view, task), parse, role=self.role,
                               on_call=ctx.record_model_call if ctx is not None else None,
                               max_invalid=self.max_invalid)


class LLMDoctor(_Prompted):
    name = "llm"

    def __init__(self, backend: ChatBackend, max_invalid: int = 2) -> None:
        super().__init__(backend, max_invalid)
        self.tasks = {name: load_prompt(f"dynamicare_doctor_{name}") for name in ("confidence", "question",
                                                                                  "diagnoses")}

    def decide(self, view: DoctorView, ctx: CaseContext | None = None) -> DoctorDecision:
        level = self.ask(view, self.tasks["confidence"], parse_confidence, ctx)
        notes = {"confidence": CONFIDENCE_LEVELS[level]}
        if level >= READY_LEVEL or view.questions_left <= 0:
            return DoctorDecision(kind="diagnosis", diagnoses=self.diagnose(view, ctx), notes=notes)
        return DoctorDecision(kind="question", text=self.ask(view, self.tasks["question"], parse_question, ctx),
                              notes=notes)

    def diagnose(self, view: DoctorView, ctx: CaseContext | None = None) -> list[str]:
        return list(self.ask(view, self.tasks["diagnoses"], parse_diagnoses, ctx))

    def describe(self) -> dict[str, Any]:
        return {"doctor": self.name, **self.backend.describe(), "prompt_version": PROMPT_VERSION,
                "ready_at": CONFIDENCE_LEVELS[READY_LEVEL]}


class DynamiCareTeam(_Prompted):
    """One instance per case (it keeps the team and the round count)."""

    name = "team"

    def __init__(self, backend: ChatBackend, max_rounds: int = MAX_ROUNDS, max_invalid: int = 2) -> None:
        super().__init__(backend, max_invalid)
        self.max_rounds = max_rounds
        self.templates = {name: load_prompt(f"dynamicare_team_{name}") for name in ("triage", "propose", "vote",
                                                                                   "coordinate")}
        self.team: list[str] = []
        self.rounds = 0
        self.ranking: list[str] = []
        self.log: list[dict[str, Any]] = []

    def _round(self, view: DoctorView, ctx: CaseContext | None) -> tuple[list[str], dict[str, bool]]:
        proposals = [self.ask(view, fill(self.templates["propose"], specialist=member), parse_proposals, ctx)
                     for member in self.team]
        ranking = merge(proposals)
        listing = "\n".join(f"{rank}. {name}" for rank, name in enumerate(ranking, start=1))
        votes = {member: self.ask(view, fill(self.templates["vote"], specialist=member, ranking=listing),
                                  parse_vote, ctx)
                 for member in self.team}
        return ranking, votes

    def decide(self, view: DoctorView, ctx: CaseContext | None = None) -> DoctorDecision:
        if not self.team:
            self.team = self.ask(view, self.templates["triage"], parse_specialists, ctx)
        self.rounds += 1
        self.ranking, votes = self._round(view, ctx)
        entry: dict[str, Any] = {"round": self.rounds, "team": list(self.team), "ranking": list(self.ranking),
                                 "votes": votes}
        self.log.append(entry)
        if all(votes.values()) or self.rounds >= self.max_rounds or view.questions_left <= 0:
            entry["ended"] = "agreement" if all(votes.values()) else "limit"
            return DoctorDecision(kind="diagnosis", diagnoses=self.ranking, notes=entry)
        listing = "\n".join(f"{rank}. {name}" for rank, name in enumerate(self.ranking, start=1))
        dissent = ", ".join(member for member, agreed in votes.items() if not agreed)
        text = fill(self.templates["coordinate"], ranking=listing, dissent=dissent)

        def parse(reply: str) -> tuple[str, list[str]]:
            return parse_question(reply), parse_specialists(reply)

        question, self.team = self.ask(view, text, parse, ctx)
        entry["next_team"] = list(self.team)
        return DoctorDecision(kind="question", text=question, notes=entry)

    def diagnose(self, view: DoctorView, ctx: CaseContext | None = None) -> list[str]:
        if not self.ranking:
            if not self.team:
                self.team = self.ask(view, self.templates["triage"], parse_specialists, ctx)
            self.ranking, _ = self._round(view, ctx)
        return self.ranking

    def describe(self) -> dict[str, Any]:
        return {"doctor": self.name, **self.backend.describe(), "prompt_version": PROMPT_VERSION,
                "max_rounds": self.max_rounds, "max_specialists": MAX_SPECIALISTS}


class ReplayAction(BaseModel):
    kind: Literal["question", "diagnosis"]
    text: str = ""
    diagnoses: list[str] = Field(default_factory=list)


class ReplayLine(BaseModel):
    case_id: str
    actions: list[ReplayAction]


def _check_line(item: ReplayLine) -> None:
    for action in item.actions:
        if action.kind == "question" and not action.text.strip():
            raise ValueError("a question action needs its text")
        if action.kind == "diagnosis" and not any(name.strip() for name in action.diagnoses):
            raise ValueError("a diagnosis action needs at least one diagnosis")


def load_actions(path: str | Path) -> dict[str, ReplayLine]:
    return load_replay(path, ReplayLine, _check_line,
                       '{"case_id": ..., "actions": [{"kind": "question", "text": ...} | '
                       '{"kind": "diagnosis", "diagnoses": [...]}]}')


class ReplayDoctor:
    name = "replay"

    def __init__(self, line: ReplayLine) -> None:
        self.line = line
        self._position = 0

    def decide(self, view: DoctorView, ctx: CaseContext | None = None) -> DoctorDecision:
        if self._position >= len(self.line.actions):
            raise DoctorError(f"The actions of case {self.line.case_id} end without a diagnosis; add "
                              '{"kind": "diagnosis", "diagnoses": [...]} at the end.')
        action = self.line.actions[self._position]
        self._position += 1
        if action.kind == "diagnosis":
            return DoctorDecision(kind="diagnosis", diagnoses=action.diagnoses[:MAX_DIAGNOSES])
        return DoctorDecision(kind="question", text=action.text)

    def diagnose(self, view: DoctorView, ctx: CaseContext | None = None) -> list[str]:
        for action in self.line.actions[self._position:]:
            if action.kind == "diagnosis":
                return action.diagnoses[:MAX_DIAGNOSES]
        raise DoctorError(f"The actions of case {self.line.case_id} have no diagnosis to give at the question "
                          "budget; end them with one.")

    def describe(self) -> dict[str, Any]:
        return {"doctor": self.name}
