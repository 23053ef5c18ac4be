"""The two lesion tasks of the SkinGPT-R1 protocol: their prompts, and mapping a classification answer to a label.

- Open-ended (DDI): system prompt + image + user prompt; the final diagnosis is judged afterwards.
- Classification: no system message; image + the classification template with the candidate labels, one per line,
  in the order given; the answer counts only when it selects exactly one label with its exact spelling.
The reference diagnosis is never an input of these prompts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from medeval_core.models.vlm import VlmPrompt
from medeval_core.prompts import fill, load_labels, load_prompt

Mode = Literal["open", "classification"]
MODES: tuple[Mode, ...] = ("open", "classification")
DEFAULT_LABELS = "labels_160case"
NO_LABEL = "no label chosen"
"""What an answer that names no single candidate label (exactly spelt) is shown and counted as."""


def open_prompt(prompts_dir: Path | None = None) -> VlmPrompt:
    return VlmPrompt(system=load_prompt("ddi_system", prompts_dir), user=load_prompt("ddi_user", prompts_dir))


def classification_prompt(labels: Sequence[str], prompts_dir: Path | None = None) -> VlmPrompt:
    return VlmPrompt(user=fill(load_prompt("classification_user", prompts_dir), candidate_labels="\n".join(labels)))


def prompt_for(mode: Mode, labels: Sequence[str] | None = None, prompts_dir: Path | None = None) -> VlmPrompt:
    if mode == "open":
        return open_prompt(prompts_dir)
    return classification_prompt(labels if labels is not None else load_labels(DEFAULT_LABELS, prompts_dir),
                                 prompts_dir)


# Strongest first: an explicit "final diagnosis/answer" wins over a bare "diagnosis:", and a differential
# diagnosis list is never taken for the final answer.
_FINAL_MARKERS = (
    re.compile(r"final\s+(?:diagnosis|answer)\s*(?:is\b|:|-)?", re.IGNORECASE),
    re.compile(r"(?:most\s+likely\s+diagnosis|(?<!differential )diagnosis|answer)\s*(?:is\b|:)", re.IGNORECASE),
)


def final_answer_segment(text: str) -> str:
    """The text that states the final answer: the line after the last final-answer marker, else the last line."""
    for marker in _FINAL_MARKERS:
        matches = list(marker.finditer(text))
        if matches:
            rest = text[matches[-1].end():].strip()
            line = rest.splitlines()[0] if rest else ""
            if line.strip(" *_:#.-"):
                return line.strip(" *_:#")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1].strip(" *_:#") if lines else ""


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.casefold()).split())


def _occurrences(segment: str, labels: Sequence[str]) -> set[str]:
    """Labels spelled exactly in ``segment`` as whole words; a label inside a longer matched label is not counted."""
    spans: list[tuple[int, int, str]] = []
    for label in sorted(labels, key=len, reverse=True):
        for match in re.finditer(rf"(?<![0-9A-Za-z]){re.escape(label)}(?![0-9A-Za-z])", segment):
            if not any(start <= match.start() and match.end() <= end for start, end, _ in spans):
                spans.append((match.start(), match.end(), label))
    return {label for _, _, label in spans}


class LabelMatch(BaseModel):
    """The label an answer selects (``None`` when no single exact label), with what was read and why."""

    label: str | None
    segment: str
    status: Literal["exact", "none", "ambiguous"]
    lenient_label: str | None
    """A label matched ignoring case, spaces and punctuation: recorded to show spelling misses, never scored."""


def match_label(answer: str, labels: Sequence[str]) -> LabelMatch:
    segment = final_answer_segment(answer)
    found = _occurrences(segment, labels)
    padded = f" {_normalise(segment)} "
    lenient = [label for label in labels if _normalise(label) and f" {_normalise(label)} " in padded]
    lenient_label = max(lenient, key=len) if lenient else None
    if len(found) == 1:
        return LabelMatch(label=found.pop(), segment=segment, status="exact", lenient_label=lenient_label)
    return LabelMatch(label=None, segment=segment, status="ambiguous" if found else "none", lenient_label=lenient_label)


def canonical_label(reference: str, labels: Sequence[str]) -> str | None:
    """The vocabulary label a reference names (ignoring case and punctuation), or ``None`` when it is not one."""
    wanted = _normalise(reference)
    return next((label for label in labels if _normalise(label) == wanted), None)


class LabelScore(BaseModel):
    match: LabelMatch
    reference_label: str | None
    correct: bool


def score_label(answer: str, reference: str, labels: Sequence[str]) -> LabelScore:
    """Scoring in the label space: correct only when the answer selects exactly one label, spelt exactly, and it
    is the label the reference names."""
    match = match_label(answer, labels)
    reference_label = canonical_label(reference, labels)
    return LabelScore(match=match, reference_label=reference_label,
                      correct=match.label is not None and match.label == reference_label)
