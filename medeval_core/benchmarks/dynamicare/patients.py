"""Open-diagnosis patient simulators over what the patient knows (``record.record``: never the diagnosis, the
codes, the examination findings or the test results), and the test channel over the measurements.

- ``RecordRetrievalPatient`` (offline): the record fields most similar to the question (all-MiniLM-L6-v2 over
  "label: text"), at or above a threshold, at most ``max_fields``, given as they stand; else "I don't know."
- ``LLMRecordPatient``: a chat model answers in the first person from the record only, "I don't know"
  otherwise (prompt ``prompts/dynamicare_patient_system.txt``).
- ``MeasurementReader`` (offline, AgentClinic's measurement agent): a test request ("REQUEST TEST: Chest X-ray")
  answered with the measurement fields most similar to the test named, "RESULTS: ..."; a test the case does not
  hold reads "RESULTS: NORMAL READINGS", as AgentClinic's measurement agent is told to answer.

Every answer carries the fields it used (positions in ``record.fields()``, or ``record.measurement_fields()`` for
a test), stored with the turn.
"""

from __future__ import annotations

import json
from typing import Any

from medeval_core.benchmark import CaseContext
from medeval_core.benchmarks.dynamicare.cases import PatientRecord
from medeval_core.dialogue import PatientAnswer
from medeval_core.models.chat import ChatBackend, Message
from medeval_core.prompts import fill, load_prompt

UNKNOWN = "I don't know."
DEFAULT_THRESHOLD = 0.35
DEFAULT_MAX_FIELDS = 2
PROMPT_VERSION = "dynamicare-patient-v1"


def _sentence(label: str, text: str) -> str:
    return f"{label}: {text}" if text.endswith((".", "!", "?")) else f"{label}: {text}."


class RecordRetrievalPatient:
    name = "offline"
    unknown = UNKNOWN

    def __init__(self, record: PatientRecord, threshold: float = DEFAULT_THRESHOLD,
                 max_fields: int = DEFAULT_MAX_FIELDS) -> None:
        from medeval_core.models.embeddings import EmbeddingIndex

        self.fields = self.fields_of(record)
        self.threshold = threshold
        self.max_fields = max_fields
        self._index = EmbeddingIndex([f"{label}: {text}" for label, text in self.fields])

    @staticmethod
    def fields_of(record: PatientRecord) -> list[tuple[str, str]]:
        return record.fields()

    def answer(self, question: str, ctx: CaseContext | None = None) -> PatientAnswer:
        matches = self._index.search(question, threshold=self.threshold, limit=self.max_fields) \
            if question.strip() and self.fields else []
        if not matches:
            return PatientAnswer(text=self.unknown, refused=True)
        chosen = sorted(matches, key=lambda match: match.index)
        return PatientAnswer(text=self.phrase(" ".join(_sentence(*self.fields[m.index]) for m in chosen)),
                             facts=[m.index for m in chosen], similarities=[round(m.similarity, 4) for m in chosen])

    def phrase(self, text: str) -> str:
        return text

    def describe(self) -> dict[str, Any]:
        return {"patient": self.name, "encoder": "sentence-transformers/all-MiniLM-L6-v2",
                "threshold": self.threshold, "max_fields": self.max_fields}


class LLMRecordPatient:
    name = "llm"

    def __init__(self, record: PatientRecord, backend: ChatBackend) -> None:
        self.backend = backend
        self.system_prompt = fill(load_prompt("dynamicare_patient_system"),
                                  record=json.dumps(record.record, ensure_ascii=False, indent=1))

    def answer(self, question: str, ctx: CaseContext | None = None) -> PatientAnswer:
        messages: list[Message] = [{"role": "system", "content": self.system_prompt},
                                   {"role": "user", "content": question}]
        text = self.backend.complete(messages, on_call=ctx.record_model_call if ctx is not None else None,
                                     role="patient").strip()
        unknown = not text or text.rstrip(".").lower() in {"i don't know", "i do not know", "i dont know"}
        return PatientAnswer(text=UNKNOWN if unknown else text, refused=unknown)

    def describe(self) -> dict[str, Any]:
        return {"patient": self.name, **self.backend.describe(), "prompt_version": PROMPT_VERSION}


class MeasurementReader(RecordRetrievalPatient):
    """The test channel: answers a test request from the measurements only (``RecordRetrievalPatient``'s
    retrieval over ``record.measurement_fields()``), in AgentClinic's "RESULTS: ..." form."""

    name = "measurement"
    unknown = "RESULTS: NORMAL READINGS"

    @staticmethod
    def fields_of(record: PatientRecord) -> list[tuple[str, str]]:
        return record.measurement_fields()

    def phrase(self, text: str) -> str:
        return f"RESULTS: {text}"
