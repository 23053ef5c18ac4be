"""One DDXPlus consultation as an ``Environment`` of the core episode (``medeval_core.interaction``).

The environment is the simulated patient with the official answer semantics (``simulator``) and the question
limit of 30: an ``Ask`` action reveals the patient's whole answer for one evidence root and uses up one turn, a
``Diagnose`` action ends the consultation with a differential (no turn). The core ``Episode`` drives it, for an
agent in a batch run (``consult``) or for a person on the walkthrough page (``Episode.act``); every step becomes
a turn through the ``CaseContext`` (index 0 is the intake), and ``Episode.restore`` replays stored questions
after a page reload (answers are deterministic).

The agent interface (what ``--agent my_package.my_module:MyAgent`` implements; how it is built is in
``benchmark.py``): an object with ``name``, ``reads_kb`` and ``start(intake[, ctx]) -> session``; the
session has ``next_question() -> str | None`` (an evidence code, or None to stop), ``observe(answer)`` (a
``simulator.Answer``) and ``differential() -> {pathology: mass}``. ``SessionActor`` adapts such a session to the
core ``interaction.Agent`` protocol (``act(observation, turns_left)``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, PrivateAttr

from medeval_core.benchmark import CaseContext, ModelRoles, RecordingContext
from medeval_core.benchmarks.ddxplus import metrics as ddx_metrics
from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase, Language, root_of
from medeval_core.benchmarks.ddxplus.patients import DDXPlusPatient
from medeval_core.benchmarks.ddxplus.simulator import MAX_QUESTIONS, Answer, PatientSimulator
from medeval_core.interaction import Episode, EpisodeError, Limits, PatientTurn, Step

__all__ = [
    "MAX_QUESTIONS", "Ask", "Consultation", "DDXPlusOutput", "Diagnose", "EpisodeError", "Intake",
    "OfflineContext", "Reply", "SessionActor", "Verdict", "consult", "open_episode", "patient_metrics",
    "present_roots", "validate_differential",
]

INTAKE_ACTOR = "simulator"


class Intake(BaseModel):
    """What every agent knows before its first question."""

    age: int
    sex: str
    initial_evidence: str
    initial_question: str


class Ask(BaseModel):
    """Ask one evidence root (an item code such as ``E_54_@_V_161`` asks its root)."""

    kind: Literal["ask"] = "ask"
    code: str


class Diagnose(BaseModel):
    """End the consultation with a differential: pathology (KB key, English or French name) -> mass."""

    kind: Literal["diagnose"] = "diagnose"
    differential: dict[str, Any] | list[Any]


class Reply(PatientTurn):
    """The patient's answer to one question (stored as the turn's payload): the core's patient turn with the
    evidence asked and the values it revealed."""

    root: str
    values: list[str]
    positive: bool
    defaulted: bool

    def as_answer(self) -> Answer:
        return Answer(root=self.root, values=tuple(self.values), positive=self.positive, defaulted=self.defaulted)


class DDXPlusOutput(BaseModel):
    """A consultation's stored output: enough to rescore it (``score ddxplus`` or a score run)."""

    index: int = Field(description="0-based row of the patient in the patients file")
    pathology: str
    differential: dict[str, float]
    inquired: list[str] = Field(description="the root asked at each turn, in order")
    missed: list[str] = Field(default_factory=list, description="present roots never inquired")
    _metrics: dict[str, float] | None = PrivateAttr(default=None)
    """The per-patient metrics the consultation computed for exactly this output (never stored: an output read
    back from the store has none), so that the run's scorer does not compute them a second time."""

    @property
    def consultation_metrics(self) -> dict[str, float] | None:
        return self._metrics


class Verdict(BaseModel):
    """What the environment returns for the differential: the output and the per-patient metrics."""

    differential: dict[str, float]
    inquired: list[str]
    missed: list[str]
    metrics: dict[str, float]


def validate_differential(kb: KnowledgeBase, differential: Mapping[str, Any] | Iterable[Any]) -> dict[str, float]:
    """KB names (key, English or French) -> finite non-negative masses, as KB keys in the given order."""
    pairs: Iterable[Any] = differential.items() if isinstance(differential, Mapping) else differential
    clean: dict[str, float] = {}
    for pair in pairs:
        if isinstance(pair, str):
            raise EpisodeError("A differential is a mapping of pathology -> mass (or [name, mass] pairs).")
        try:
            name, mass = pair
        except (TypeError, ValueError):
            raise EpisodeError("A differential is a mapping of pathology -> mass (or [name, mass] pairs).") from None
        index = kb.pathology_index(str(name))
        if index is None:
            raise EpisodeError(f"{name!r} is not one of the {kb.n_pathologies} DDXPlus pathologies.")
        if isinstance(mass, bool) or not isinstance(mass, int | float) or not math.isfinite(mass) or mass < 0:
            raise EpisodeError(f"The mass of {name!r} is {mass!r}; masses are finite numbers >= 0.")
        key = kb.pathology_names[index]
        if key in clean:
            raise EpisodeError(f"{name!r} appears twice in the differential.")
        clean[key] = float(mass)
    return clean


def present_roots(kb: KnowledgeBase, patient: DDXPlusPatient) -> list[str]:
    """Positive roots as the metrics count them: binary and listed, or listed with a non-default value."""
    roots: list[str] = []
    for code in patient.evidences:
        root, _, value = code.partition("_@_")
        evidence = kb.evidences[root]
        if (evidence.binary or value != evidence.default_value) and root not in roots:
            roots.append(root)
    return roots


def _pathology_key(kb: KnowledgeBase, name: str) -> str:
    index = kb.pathology_index(name)
    if index is None:
        raise EpisodeError(f"{name!r} is not one of the {kb.n_pathologies} DDXPlus pathologies.")
    return kb.pathology_names[index]


def patient_metrics(kb: KnowledgeBase, patient: DDXPlusPatient, differential: Mapping[str, float],
                    inquired: list[str]) -> tuple[dict[str, float], list[str]]:
    """The seven per-patient metrics of one consultation and the present roots never inquired."""
    # Names resolve to KB keys first, so that a French or English alias is the same pathology.
    gt = list({_pathology_key(kb, name): mass for name, mass in patient.differential}.items())
    present = present_roots(kb, patient)
    asked = {patient.initial_evidence, *inquired}
    metrics = ddx_metrics.patient_metrics(
        gt=gt, pathology=_pathology_key(kb, patient.pathology),
        pred=list(differential.items()), present=set(present), inquired=asked, n_questions=len(inquired),
        tie_rank=kb.tie_rank_of, n_pathologies=kb.n_pathologies,
    )
    return metrics, [root for root in present if root not in asked]


class Consultation:
    """The DDXPlus environment: one simulated patient, 30 questions at most, then a differential."""

    def __init__(self, kb: KnowledgeBase, patient: DDXPlusPatient, max_turns: int = MAX_QUESTIONS,
                 language: Language | None = None) -> None:
        self.kb = kb
        self.patient = patient
        self.max_turns = max_turns
        """The question budget, enforced by the episode's ``Limits`` (``open_episode``)."""
        self.language = language or kb.language
        self.simulator = PatientSimulator(kb, patient)
        self.asked: list[str] = []
        self.answers: list[Answer] = []
        self.verdict: Verdict | None = None

    # Environment protocol ------------------------------------------------------------------------------------

    def start(self) -> Intake:
        return self.intake()

    def counts_as_turn(self, action: Ask | Diagnose) -> bool:
        return isinstance(action, Ask)

    def describe(self, action: Ask | Diagnose) -> tuple[str, dict[str, Any]]:
        return ("ask", {}) if isinstance(action, Ask) else ("differential", {})

    def step(self, action: Ask | Diagnose) -> Step[Any]:
        if self.verdict is not None:
            raise EpisodeError("This consultation already has a differential.")
        if isinstance(action, Ask):
            return Step(observation=self.ask(action.code))
        if isinstance(action, Diagnose):
            return Step(observation=self.diagnose(action.differential), done=True)
        raise EpisodeError(f"A DDXPlus action is Ask or Diagnose, not {type(action).__name__}.")

    # The consultation ----------------------------------------------------------------------------------------

    def intake(self) -> Intake:
        code = self.patient.initial_evidence
        return Intake(age=self.patient.age, sex=self.patient.sex, initial_evidence=code,
                      initial_question=self.kb.question_text(code, self.language))

    @property
    def questions_left(self) -> int:
        return self.max_turns - len(self.asked)

    def ask(self, code: str) -> Reply:
        root = root_of(str(code).strip())
        if root not in self.kb.evidences:
            raise EpisodeError(f"{code!r} is not an evidence code of the knowledge base (e.g. E_91).")
        answer = self.simulator.answer(root)
        self.asked.append(root)
        self.answers.append(answer)
        return Reply(root=root, question=self.kb.question_text(root, self.language), values=list(answer.values),
                     positive=answer.positive, defaulted=answer.defaulted,
                     answer=answer.text(self.kb, self.language))

    def diagnose(self, differential: Mapping[str, Any] | Iterable[Any]) -> Verdict:
        clean = validate_differential(self.kb, differential)
        metrics, missed = patient_metrics(self.kb, self.patient, clean, self.asked)
        self.verdict = Verdict(differential=clean, inquired=list(self.asked), missed=missed, metrics=metrics)
        return self.verdict

    def present_roots(self) -> list[str]:
        return present_roots(self.kb, self.patient)

    def output(self) -> DDXPlusOutput:
        if self.verdict is None:
            raise EpisodeError("The consultation has no differential yet.")
        output = DDXPlusOutput(index=self.patient.row, pathology=self.patient.pathology,
                               differential=self.verdict.differential, inquired=self.verdict.inquired,
                               missed=self.verdict.missed)
        output._metrics = self.verdict.metrics
        return output


def open_episode(consultation: Consultation, ctx: CaseContext,
                 record_intake: bool = True) -> Episode[Ask | Diagnose, Any]:
    """The core episode over ``consultation``; the intake is turn 0 (``record_intake=False`` when restoring a
    session whose intake is already stored)."""
    episode: Episode[Ask | Diagnose, Any] = Episode(
        consultation, ctx, Limits(max_turns=consultation.max_turns), record_start=False)
    if record_intake:
        ctx.record_turn(INTAKE_ACTOR, "intake", consultation.intake().model_dump(mode="json"))
    return episode


class AgentSession(Protocol):
    """One agent's side of one consultation."""

    def next_question(self) -> str | None:
        """The next root to ask, or None to stop and give the differential."""

    def observe(self, answer: Answer) -> None: ...

    def differential(self) -> Mapping[str, float]: ...


class DDXPlusAgent(Protocol):
    """The agent interface (built-in agents and ``--agent module:Class`` alike)."""

    name: str
    reads_kb: bool
    """Whether the agent consulted the KB's condition lists (a run condition recorded with every run)."""

    def start(self, intake: Intake) -> AgentSession: ...


def start_session(agent: DDXPlusAgent, intake: Intake, ctx: CaseContext | None) -> AgentSession:
    """``agent.start(intake, ctx=ctx)`` when its ``start`` takes a ``ctx`` (to record model calls), else
    ``agent.start(intake)``."""
    start = agent.start
    if _takes_ctx(getattr(start, "__func__", start)):
        return start(intake, ctx=ctx)  # type: ignore[call-arg]
    return start(intake)


@cache
def _takes_ctx(start: Callable[..., Any]) -> bool:
    """Whether ``start`` has a ``ctx`` parameter, read once per agent class (``inspect.signature`` costs 25 us, 1 %
    of a KB-Bayes consultation, on every patient of a run)."""
    try:
        return "ctx" in inspect.signature(start).parameters
    except (TypeError, ValueError):
        return False


class SessionActor:
    """A DDXPlus agent session as a core ``interaction.Agent``: asks until the session stops or no question is
    left, then diagnoses."""

    def __init__(self, session: AgentSession, name: str) -> None:
        self.session = session
        self.name = name

    def act(self, observation: Any, turns_left: int) -> Ask | Diagnose:
        if isinstance(observation, Reply):
            self.session.observe(observation.as_answer())
        if turns_left > 0:
            code = self.session.next_question()
            if code is not None:
                return Ask(code=str(code))
        return Diagnose(differential=dict(self.session.differential()))


def consult(agent: DDXPlusAgent, kb: KnowledgeBase, patient: DDXPlusPatient, ctx: CaseContext) -> Consultation:
    """Let ``agent`` question ``patient`` through the core episode (every turn recorded on ``ctx``)."""
    consultation = Consultation(kb, patient)
    episode = open_episode(consultation, ctx)
    session = start_session(agent, episode.first_observation, ctx)
    episode.run(SessionActor(session, str(getattr(agent, "name", type(agent).__name__))))
    return consultation


class OfflineContext(RecordingContext):
    """A context that keeps turns and model calls in memory and binds no model (trying an agent without a store)."""

    def __init__(self, case_id: str = "", run_id: str = "offline", settings: Any = None) -> None:
        super().__init__(run_id, case_id, 0, settings, ModelRoles())
