"""A simulated patient answering a doctor's questions from what the case holds: the interface every such patient
system implements (``Patient``), its answer with the provenance of what it used (``PatientAnswer``), and the reply
stored in the dialogue turn (``Reply``). Shared by the benchmarks whose agent questions a patient built from a
case's facts or record fields; each brings its own patient systems.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from medeval_core.benchmark import CaseContext
from medeval_core.interaction import PatientTurn


class PatientAnswer(BaseModel):
    text: str
    facts: list[int] = Field(default_factory=list, description="0-based positions of the facts used")
    refused: bool = False
    similarities: list[float] = Field(default_factory=list, description="offline: each used fact's similarity")


class Patient(Protocol):
    """A patient system: answers one question (``ctx`` records the model calls of one that asks a model)."""

    name: str

    def answer(self, question: str, ctx: CaseContext | None = None) -> PatientAnswer: ...

    def describe(self) -> dict[str, Any]: ...


class Reply(PatientTurn):
    """The patient's answer to one question, as stored in the turn: the core's patient turn with the facts it used
    (``PatientAnswer``'s provenance)."""

    facts: list[int] = Field(default_factory=list, description="0-based positions of the facts used")
    refused: bool = False
    similarities: list[float] = Field(default_factory=list, description="offline: each used fact's similarity")

    @classmethod
    def of(cls, question: str, answer: PatientAnswer) -> Reply:
        return cls(question=question, answer=answer.text, facts=answer.facts, refused=answer.refused,
                   similarities=answer.similarities)
