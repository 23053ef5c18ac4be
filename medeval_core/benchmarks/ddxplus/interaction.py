"""One DDXPlus consultation: intake, questions (30 at most), a final differential, the per-patient metrics.

The walkthrough page and batch runs use this same ``Episode``; the only difference is who acts. A batch run
drives it with an agent through ``run_episode``; the page calls ``ask`` and ``submit`` from widgets. Every step
becomes a ``Turn`` (index 0 is the intake), so the store holds the same dialogue either way, and
``Episode.restore`` replays stored questions so that a half-done walkthrough continues after a page reload.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase, Language, root_of
from medeval_core.benchmarks.ddxplus.patients import DDXPlusPatient
from medeval_core.benchmarks.ddxplus.simulator import MAX_QUESTIONS, Answer, PatientSimulator
from medeval_core.metrics import ddxplus as ddx_metrics
from medeval_core.records import Turn


class EpisodeError(ValueError):
    """An action the consultation does not allow (unknown code, 31st question, invalid differential)."""


class Intake(BaseModel):
    """What every agent knows before its first question."""

    age: int
    sex: str
    initial_evidence: str
    initial_question: str


@dataclass
class EpisodeResult:
    differential: dict[str, float]
    inquired: list[str]
    metrics: dict[str, float]
    missed: list[str]
    """Present roots that were never inquired (what PER misses)."""

    def output(self, patient: DDXPlusPatient) -> dict[str, Any]:
        """The JSON-ready record a run stores: enough to rescore with ``score ddxplus``."""
        return {"index": patient.row, "pathology": patient.pathology, "differential": self.differential,
                "inquired": self.inquired, "missed": self.missed}


def validate_differential(kb: KnowledgeBase, differential: Mapping[str, Any] | Iterable[Any]) -> dict[str, float]:
    """KB names (key, English or French) -> finite non-negative masses, as KB keys in the given order."""
    pairs = differential.items() if isinstance(differential, Mapping) else differential
    clean: dict[str, float] = {}
    for pair in pairs:
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


@dataclass
class Episode:
    kb: KnowledgeBase
    patient: DDXPlusPatient
    max_questions: int = MAX_QUESTIONS
    language: Language | None = None
    asked: list[str] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    result: EpisodeResult | None = None

    def __post_init__(self) -> None:
        self.simulator = PatientSimulator(self.kb, self.patient)
        self.language = self.language or self.kb.language
        if not self.turns:
            self.turns.append({"actor": "simulator", "action": "intake", "payload": self.intake().model_dump()})

    # The consultation ----------------------------------------------------------------------------------------

    def intake(self) -> Intake:
        code = self.patient.initial_evidence
        return Intake(age=self.patient.age, sex=self.patient.sex, initial_evidence=code,
                      initial_question=self.kb.question_text(code, self.language))

    @property
    def questions_left(self) -> int:
        return self.max_questions - len(self.asked)

    @property
    def finished(self) -> bool:
        return self.result is not None

    def ask(self, code: str, actor: str = "agent") -> Answer:
        if self.finished:
            raise EpisodeError("This consultation is finished; start a new one to ask more questions.")
        if self.questions_left <= 0:
            raise EpisodeError(f"The {self.max_questions}-question limit is reached; submit a differential.")
        root = root_of(code.strip())
        if root not in self.kb.evidences:
            raise EpisodeError(f"{code!r} is not an evidence code of the knowledge base (e.g. E_91).")
        answer = self.simulator.answer(root)
        self.asked.append(root)
        self.answers.append(answer)
        self.turns.append({
            "actor": actor, "action": "ask",
            "payload": {"root": root, "question": self.kb.question_text(root, self.language),
                        "values": list(answer.values), "positive": answer.positive,
                        "answer": answer.text(self.kb, self.language)},
        })
        return answer

    def submit(self, differential: Mapping[str, Any] | Iterable[Any], actor: str = "agent") -> EpisodeResult:
        if self.finished:
            raise EpisodeError("This consultation already has a differential.")
        clean = validate_differential(self.kb, differential)
        metrics, missed = self._score(clean)
        self.result = EpisodeResult(differential=clean, inquired=list(self.asked), metrics=metrics, missed=missed)
        self.turns.append({"actor": actor, "action": "differential", "payload": {"differential": clean}})
        return self.result

    # Scoring and records -------------------------------------------------------------------------------------

    def present_roots(self) -> list[str]:
        """Positive roots as the metrics count them: binary and listed, or listed with a non-default value."""
        roots: list[str] = []
        for code in self.patient.evidences:
            root, _, value = code.partition("_@_")
            evidence = self.kb.evidences[root]
            if (evidence.binary or value != evidence.default_value) and root not in roots:
                roots.append(root)
        return roots

    def _score(self, differential: dict[str, float]) -> tuple[dict[str, float], list[str]]:
        kb = self.kb
        # Names resolve to KB keys first, so that a French or English alias is the same pathology.
        gt = list({kb.pathology_names[kb.pathology_index(name)]: mass
                   for name, mass in self.patient.differential}.items())
        present = self.present_roots()
        inquired = {self.patient.initial_evidence, *self.asked}
        metrics = ddx_metrics.patient_metrics(
            gt=gt, pathology=kb.pathology_names[kb.pathology_index(self.patient.pathology)],
            pred=list(differential.items()), present=set(present), inquired=inquired, n_questions=len(self.asked),
        )
        return metrics, [root for root in present if root not in inquired]

    def records(self, run_id: str, case_id: str | None = None, repetition: int = 0) -> list[Turn]:
        case_id = case_id or self.patient.case_id
        return [Turn(run_id=run_id, case_id=case_id, repetition=repetition, index=i, **turn)
                for i, turn in enumerate(self.turns)]

    @classmethod
    def restore(cls, kb: KnowledgeBase, patient: DDXPlusPatient, asked: Sequence[str], actors: Sequence[str],
                language: Language | None = None) -> Episode:
        """The consultation after ``asked`` (by ``actors``): answers are deterministic, so replaying the stored
        questions rebuilds it exactly (a half-done walkthrough after a page reload)."""
        episode = cls(kb=kb, patient=patient, language=language)
        for code, actor in zip(asked, actors, strict=True):
            episode.ask(code, actor=actor)
        return episode


class AgentSession(Protocol):
    """One agent's side of one consultation."""

    def next_question(self) -> str | None:
        """The next root to ask, or None to stop and give the differential."""

    def observe(self, answer: Answer) -> None: ...

    def differential(self) -> dict[str, float]: ...


class Agent(Protocol):
    name: str
    reads_kb: bool
    """Whether the agent consulted the KB's condition lists (a run condition recorded with every run)."""

    def start(self, intake: Intake) -> AgentSession: ...


def run_episode(agent: Agent, episode: Episode) -> EpisodeResult:
    """Let ``agent`` question the patient until it stops or the question limit is reached, then submit."""
    session = agent.start(episode.intake())
    while episode.questions_left > 0:
        code = session.next_question()
        if code is None:
            break
        session.observe(episode.ask(code, actor=agent.name))
    return episode.submit(session.differential(), actor=agent.name)
