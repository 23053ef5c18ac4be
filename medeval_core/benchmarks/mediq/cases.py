"""MEDIQ cases (iMedQA and iCraft-MD rows of the MediQ release): loaded, validated, bad rows reported by line.

A row has ``id``, ``question``, ``context`` (the vignette as sentences; a string is split on ". " as the MediQ
code does), ``options`` (A-D), ``answer``, ``answer_idx`` and ``facts`` (the vignette as numbered atomic
facts); ``initial_info`` (when present) replaces ``context[0]`` as what the expert sees first. The score is on
``answer_idx``; a few rows carry an ``answer`` text that differs from ``options[answer_idx]`` (iCraft-MD rows
112, 124, 129 and 132), which the case keeps as ``answer_mismatch`` so the case view can say so.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, Field

from medeval_core.data.files import SkippedLine, read_json_lines
from medeval_core.records import Case

OPTION_LETTERS = ("A", "B", "C", "D")
_FACT_NUMBER = re.compile(r"^\s*\d+\.\s+")


class MediqFileError(ValueError):
    """The cases file cannot be read at all; the message says what to fix."""


class MediqCase(Case):
    """One MEDIQ case; ``case_id`` is the row's ``id`` as text."""

    question: str
    initial_info: str
    context: list[str]
    options: dict[str, str]
    answer_idx: str
    answer: str
    facts: list[str] = Field(description="the atomic facts, numbering removed, in the file's order")

    @property
    def correct_option(self) -> str:
        return self.options[self.answer_idx]

    @property
    def answer_mismatch(self) -> bool:
        """The row's ``answer`` text differs from ``options[answer_idx]`` (the score uses the index); two of the
        four iCraft-MD rows differ by a trailing space only, the others name another disease."""
        return self.answer != self.correct_option


class MediqCases(BaseModel):
    path: str
    cases: list[MediqCase]
    skipped: list[SkippedLine] = Field(default_factory=list)

    def summary(self) -> str:
        text = f"{len(self.cases)} cases loaded from {Path(self.path).name}"
        if self.skipped:
            shown = "; ".join(f"line {row.line}: {row.reason}" for row in self.skipped[:5])
            more = f" (and {len(self.skipped) - 5} more)" if len(self.skipped) > 5 else ""
            text += f", {len(self.skipped)} rows skipped: {shown}{more}"
        return text

    def by_id(self) -> dict[str, MediqCase]:
        return {case.case_id: case for case in self.cases}


def strip_number(fact: str) -> str:
    """``"3. She has a fever."`` -> ``"She has a fever."`` (the number is the file's enumeration, not the fact)."""
    return _FACT_NUMBER.sub("", fact, count=1).strip()


def parse_row(row: object) -> MediqCase:
    """One row as a case; ValueError says what is wrong with it."""
    if not isinstance(row, dict):
        raise ValueError("the line is not a JSON object")
    missing = [key for key in ("id", "question", "options", "answer_idx", "facts") if key not in row]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    case_id = row["id"]
    if isinstance(case_id, bool) or not isinstance(case_id, int | str) or not str(case_id).strip():
        raise ValueError("id must be a number or a non-empty string")
    question = row["question"]
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    options = row["options"]
    if (not isinstance(options, dict) or sorted(options) != list(OPTION_LETTERS)
            or not all(isinstance(text, str) and text.strip() for text in options.values())):
        raise ValueError("options must map A, B, C and D to non-empty texts")
    answer_idx = row["answer_idx"]
    if answer_idx not in OPTION_LETTERS:
        raise ValueError(f"answer_idx must be one of A-D, not {answer_idx!r}")
    context = row.get("context", [])
    if isinstance(context, str):
        context = [part for part in context.split(". ") if part.strip()]
    if not isinstance(context, list) or not all(isinstance(part, str) for part in context):
        raise ValueError("context must be a list of sentences (or one string)")
    # A knowledge question without a vignette (two rows of the iMedQA sample) has no context and no facts: the
    # expert starts with nothing and every question is refused.
    initial = row.get("initial_info", context[0] if context else "")
    if not isinstance(initial, str):
        raise ValueError("initial_info must be a string")
    facts = row["facts"]
    if not isinstance(facts, list) or not all(isinstance(f, str) and f.strip() for f in facts):
        raise ValueError("facts must be a list of sentences")
    answer = row.get("answer", options[answer_idx])
    if not isinstance(answer, str):
        raise ValueError("answer must be a string")
    return MediqCase(case_id=str(case_id).strip(), question=question.strip(), initial_info=initial.strip(),
                     context=[part.strip() for part in context], options={k: options[k] for k in OPTION_LETTERS},
                     answer_idx=answer_idx, answer=answer, facts=[strip_number(fact) for fact in facts])


def load_cases(path: str | Path, limit: int | None = None, skip_bad_lines: bool = False) -> MediqCases:
    """The rows of a MEDIQ JSON Lines file (first ``limit``); a bad row refuses the file, or with
    ``skip_bad_lines`` is left out and reported by line."""
    path = Path(path)
    cases, skipped = read_json_lines(
        path, MediqFileError, "does not exist; give a MEDIQ JSON Lines file (e.g. "
        "MEDEVAL_DATA_DIR/mediq/imedqa_sample200.jsonl).", parse_row, lambda case: case.case_id,
        duplicate="id {key} appears earlier in the file", nothing_valid="no valid MEDIQ rows", limit=limit,
        skip_bad_lines=skip_bad_lines)
    return MediqCases(path=str(path), cases=cases, skipped=skipped)
