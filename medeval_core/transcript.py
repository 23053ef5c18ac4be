"""A readable view of a case's record, as inspect_ai's viewer shows a sample: the dialogue as a conversation (who,
what was said or ordered, the answer, cost and tags) instead of ``key: value`` strings, a differential as a
sorted table, and a reasoning model's ``<think>``/``<answer>`` reply as its two parts. Pages only lay these out."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from medeval_core.records import Turn

# What a turn's payload calls the step itself, and what it calls the reply, across the benchmarks' turn shapes.
SAID_KEYS = ("question", "questions", "request", "order", "test", "tests", "diagnosis", "differential", "choice")
ANSWER_KEYS = ("answer", "text", "reply", "result", "results", "response")
# Codes a payload carries beside their English text (e.g. an evidence's root and value codes).
CODE_KEYS = frozenset({"root", "values", "provenance", "positive", "defaulted"})
DIFFERENTIAL_FLOOR = 0.01
"""Pathologies at or below this probability are left out of a differential table (the cut-off the published
differentials use)."""

_PATIENT_ACTORS = ("patient", "gatekeeper", "environment", "simulator")


class TranscriptEntry(BaseModel):
    index: int
    who: str
    speaker: str
    """"agent" (asks, orders, diagnoses) or "patient" (answers: the patient, gatekeeper, simulator)."""
    action: str
    said: str
    answer: str
    details: list[str]
    """Other fields of the turn, each one "name: value" line."""
    cost: float
    tags: list[str]


class DifferentialRow(BaseModel):
    pathology: str
    probability: float


class ReasonedText(BaseModel):
    reasoning: str
    answer: str


def readable(value: Any) -> str:
    """A payload value as text a person reads: lists one item a line, records as "request: result [tag]"."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        main = [str(value[key]) for key in (*SAID_KEYS, *ANSWER_KEYS) if isinstance(value.get(key), str)]
        tag = value.get("source") or value.get("tag")
        if main:
            return ": ".join(main) + (f" [{tag}]" if isinstance(tag, str) else "")
        return ", ".join(f"{key} {readable(item)}" for key, item in value.items())
    if isinstance(value, Sequence):
        return "\n".join(readable(item) for item in value)
    if isinstance(value, float):
        return f"{value:.3g}"
    return json.dumps(value, ensure_ascii=False, default=str)


def _tags(payload: Mapping[str, Any]) -> list[str]:
    found = []
    provenance = payload.get("provenance")
    if isinstance(provenance, str):
        found.append(provenance)
    elif isinstance(provenance, Mapping):
        found += [str(provenance[key]) for key in ("tag", "source", "kind") if isinstance(provenance.get(key), str)]
    for key in ("source", "estimated", "defaulted"):
        if payload.get(key) is True:
            found.append(key)
        elif isinstance(payload.get(key), str):
            found.append(str(payload[key]))
    return found


def entry(turn: Turn) -> TranscriptEntry:
    payload = turn.payload
    said_key = next((key for key in SAID_KEYS if payload.get(key) not in (None, "", [], {})), None)
    answer_key = next((key for key in ANSWER_KEYS if key != said_key and payload.get(key) not in (None, "", [])),
                      None)
    shown = {said_key, answer_key, "source", "estimated"} | CODE_KEYS
    details = [f"{key}: {readable(value)}" for key, value in payload.items() if key not in shown]
    speaker = "patient" if any(name in turn.actor.lower() for name in _PATIENT_ACTORS) else "agent"
    return TranscriptEntry(index=turn.index, who=turn.actor, speaker=speaker, action=turn.action,
                           said=readable(payload[said_key]) if said_key else "",
                           answer=readable(payload[answer_key]) if answer_key else "", details=details,
                           cost=turn.cost, tags=_tags(payload))


def transcript(turns: Sequence[Turn]) -> list[TranscriptEntry]:
    return [entry(turn) for turn in turns]


def differential_rows(differential: Mapping[str, Any]) -> list[DifferentialRow]:
    """The pathologies above ``DIFFERENTIAL_FLOOR``, most likely first."""
    rows = [DifferentialRow(pathology=name, probability=float(p)) for name, p in differential.items()
            if isinstance(p, int | float) and float(p) > DIFFERENTIAL_FLOOR]
    return sorted(rows, key=lambda row: (-row.probability, row.pathology))


_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)


def reasoned(text: str) -> ReasonedText | None:
    """A ``<think>...</think><answer>...</answer>`` reply as its two parts; None when the text has no such tags."""
    think, answer = _THINK.search(text), _ANSWER.search(text)
    if think is None and answer is None:
        return None
    rest = _ANSWER.sub("", _THINK.sub("", text)).strip()
    return ReasonedText(reasoning=think.group(1).strip() if think else "",
                        answer=(answer.group(1).strip() if answer else rest))
