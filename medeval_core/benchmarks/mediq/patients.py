"""MEDIQ patient systems behind the shared patient interface (``medeval_core.dialogue.Patient``): each answers a
question from the case's own atomic facts only.

- ``FactSelectPatient`` (offline, the default): the facts most similar to the question (all-MiniLM-L6-v2,
  ``medeval_core.models.embeddings``) at or above a threshold, at most ``max_facts``, returned verbatim in the file's
  order; else the refusal. Nothing but this case's facts can come out.
- ``LLMPatient``: a chat model picks the facts that answer and phrases them in the first person; no fact, the
  refusal.

Both give every fact by default, those that contain the correct option's text included ("Patient has type 1
diabetes mellitus."), as MediQ's fact-select patient does: its prompt lists all the atomic facts.
``withhold_answer_facts`` (a run option, ``MediqParams``) keeps those facts from the expert instead.

Every answer carries the facts it used (0-based positions in ``case.facts``), stored with the turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from medeval_core.benchmark import CaseContext
from medeval_core.benchmarks.mediq.cases import MediqCase
from medeval_core.dialogue import PatientAnswer
from medeval_core.models.chat import ChatBackend, Message, ask_until_valid, json_object
from medeval_core.prompts import fill, load_prompt

if TYPE_CHECKING:
    from medeval_core.models.embeddings import EmbeddingIndex

REFUSAL = "The patient cannot answer this question, please do not ask this question again."
DEFAULT_THRESHOLD = 0.35
DEFAULT_MAX_FACTS = 3
PATIENT_PROMPT_VERSION = "mediq-patient-v1"


def _phrase(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def states_answer(fact: str, case: MediqCase) -> bool:
    """Whether ``fact`` contains the correct option's text (or the row's answer text) as a phrase."""
    padded = f" {_phrase(fact)} "
    return any(f" {phrase} " in padded for phrase in {_phrase(case.correct_option), _phrase(case.answer)} if phrase)


def answerable_facts(case: MediqCase, withhold_answer_facts: bool = False) -> list[int]:
    """The positions of the facts a patient may give: all (MediQ), or those that do not state the correct option."""
    return [i for i, fact in enumerate(case.facts) if not (withhold_answer_facts and states_answer(fact, case))]


def refusal() -> PatientAnswer:
    return PatientAnswer(text=REFUSAL, refused=True)


class FactSelectPatient:
    name = "offline"

    def __init__(self, case: MediqCase, threshold: float = DEFAULT_THRESHOLD,
                 max_facts: int = DEFAULT_MAX_FACTS, withhold_answer_facts: bool = False) -> None:
        self.case = case
        self.threshold = threshold
        self.max_facts = max_facts
        self.withhold_answer_facts = withhold_answer_facts
        self.allowed = answerable_facts(case, withhold_answer_facts)
        self._facts = [case.facts[i] for i in self.allowed]
        self._index: EmbeddingIndex | None = None

    def prepare(self, questions: Sequence[str]) -> None:
        """Encode the facts and the questions known ahead (a replay expert's) in one encoder call, so that each
        answer then only looks its question up."""
        from medeval_core.models.embeddings import encode_remembered

        encode_remembered([*self._facts, *(" ".join(question.split()) for question in questions)])

    def _search_index(self, question: str) -> EmbeddingIndex:
        from medeval_core.models.embeddings import EmbeddingIndex, encode_remembered

        if self._index is None:
            # The facts are encoded with the first question, in one call.
            vectors = encode_remembered([*self._facts, question])[:len(self._facts)]
            self._index = EmbeddingIndex(self._facts, vectors=vectors)
        return self._index

    def answer(self, question: str, ctx: CaseContext | None = None) -> PatientAnswer:
        if not question.strip():
            return refusal()
        matches = self._search_index(question).search(question, threshold=self.threshold, limit=self.max_facts)
        if not matches:
            return refusal()
        chosen = sorted(matches, key=lambda match: self.allowed[match.index])
        positions = [self.allowed[match.index] for match in chosen]
        return PatientAnswer(text=" ".join(self.case.facts[i] for i in positions), facts=positions,
                             similarities=[round(match.similarity, 4) for match in chosen])

    def describe(self) -> dict[str, Any]:
        return {"patient": self.name, "encoder": "sentence-transformers/all-MiniLM-L6-v2",
                "threshold": self.threshold, "max_facts": self.max_facts,
                "withhold_answer_facts": self.withhold_answer_facts}


class LLMPatient:
    name = "llm"

    def __init__(self, case: MediqCase, backend: ChatBackend, max_invalid: int = 2,
                 withhold_answer_facts: bool = False) -> None:
        self.case = case
        self.backend = backend
        self.max_invalid = max_invalid
        self.withhold_answer_facts = withhold_answer_facts
        self.allowed = answerable_facts(case, withhold_answer_facts)
        listing = "\n".join(f"{number}. {case.facts[i]}" for number, i in enumerate(self.allowed, start=1))
        self.system_prompt = fill(load_prompt("mediq_patient_system"), facts=listing)

    def _parse(self, reply: str) -> PatientAnswer:
        value = json_object(reply)
        numbers = value.get("facts")
        if not isinstance(numbers, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            raise ValueError('"facts" must be a list of fact numbers')
        if any(not 1 <= n <= len(self.allowed) for n in numbers):
            raise ValueError(f"fact numbers run from 1 to {len(self.allowed)}")
        if not numbers:
            return refusal()
        text = value.get("answer")
        if not isinstance(text, str) or not text.strip():
            raise ValueError('"answer" must be your answer as text when facts are listed')
        return PatientAnswer(text=text.strip(), facts=sorted({self.allowed[n - 1] for n in numbers}))

    def answer(self, question: str, ctx: CaseContext | None = None) -> PatientAnswer:
        messages: list[Message] = [{"role": "system", "content": self.system_prompt},
                                   {"role": "user", "content": f"Doctor: {question}"}]
        return ask_until_valid(self.backend, messages, self._parse, role="patient",
                               on_call=ctx.record_model_call if ctx is not None else None,
                               max_invalid=self.max_invalid)

    def describe(self) -> dict[str, Any]:
        return {"patient": self.name, **self.backend.describe(), "prompt_version": PATIENT_PROMPT_VERSION,
                "withhold_answer_facts": self.withhold_answer_facts}
