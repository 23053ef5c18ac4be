"""The diagnosis judge: the 1-5 rubric of design.md §3.3 (5 the same or more specific; 4 the core disease right
with a minor qualifier missing; 3 the right category with a major error; 2 superficial overlap; 1 wrong), 4-5
counting as correct.

- ``LLMJudge``: the ``sdbench-judge`` chat model under ``prompts/sdbench_judge_system.txt``; it answers
  ``{"score": 1-5, "reasoning": "..."}``; an invalid answer is asked again once, then the case fails.
- ``OfflineJudge``: the rubric as rules over canonical word sets (the core's offline rules' ``Vocabulary`` with
  ``prompts/sdbench_offline_synonyms.json``: normalisation, abbreviations, synonyms); a reference with an
  abbreviation or alternative in parentheses is matched against each name.
Each judge's scores are stored under its own metric names (``llm_judge_*``, ``offline_judge_*``) and judge name,
so their numbers are never mixed; a clinician's grade on the page is a third judgement, with who gave it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from medeval_core.data.files import json_value
from medeval_core.judges.offline import Vocabulary
from medeval_core.prompts import fill, load_json, load_prompt, prompt_path
from medeval_core.records import Judgement
from medeval_core.settings import fingerprint

CORRECT_FROM = 4
LLM_JUDGE = "sdbench-llm-judge"
OFFLINE_JUDGE = "sdbench-offline-judge"
CLINICIAN_JUDGE = "sdbench-clinician"
LLM_PROMPT_VERSION = "sdbench-judge-v1"
SYNONYMS = "sdbench_offline_synonyms"
METRIC_PREFIX = {LLM_JUDGE: "llm_judge", OFFLINE_JUDGE: "offline_judge", CLINICIAN_JUDGE: "clinician"}


class JudgeFailure(RuntimeError):
    """The judge gave no valid score; the message says why."""


class Grade(BaseModel):
    score: int = Field(ge=1, le=5)
    reasoning: str = Field(min_length=1)

    @property
    def correct(self) -> bool:
        return self.score >= CORRECT_FROM


def judgement(judge_name: str, judge_model: str, grade: Grade | None, latency_s: float | None = None,
              attempt: int = 1, error: str | None = None, **extra: Any) -> Judgement:
    verdict = {"score": grade.score, "reasoning": grade.reasoning, "correct": grade.correct, **extra} if grade else {}
    return Judgement(case_id="", judge_name=judge_name, judge_model=judge_model, attempt=attempt,
                     ok=grade is not None, verdict=verdict, latency_s=latency_s, error=error)


class OfflineJudge:
    name = OFFLINE_JUDGE

    def __init__(self, data: dict[str, Any]) -> None:
        self.vocabulary = Vocabulary(data)
        self.qualifiers = frozenset(self.vocabulary.canonical(" ".join(data.get("qualifier_words", []))))
        self.generic = frozenset(self.vocabulary.canonical(" ".join(data.get("generic_words", []))))
        self.model = f"rules:{fingerprint(data)[:12]}"

    @classmethod
    def from_file(cls, prompts_dir: Path | None = None) -> OfflineJudge:
        data = load_json(SYNONYMS, prompts_dir)
        if not isinstance(data, dict):
            raise JudgeFailure(f"{prompt_path(SYNONYMS, prompts_dir, '.json')} must hold a JSON object.")
        return cls(data)

    def _names(self, reference: str) -> list[str]:
        """The reference and the names it gives in parentheses or as alternatives ("X (Y)", "X / Y")."""
        names = [reference]
        inner = re.findall(r"\(([^()]+)\)", reference)
        outer = re.sub(r"\([^()]*\)", " ", reference).strip()
        if inner:
            names += [outer, *inner]
        names += [part for part in re.split(r"\s+/\s+|\s+or\s+", outer) if part.strip() and part != outer]
        return [name for name in names if self.vocabulary.canonical(name)]

    def grade(self, reference: str, diagnosis: str) -> Grade:
        predicted = self.vocabulary.canonical(diagnosis)
        if not predicted:
            return Grade(score=1, reasoning="The diagnosis is empty after normalisation.")
        return max((self._compare(self.vocabulary.canonical(name), predicted) for name in self._names(reference)),
                   key=lambda grade: grade.score,
                   default=Grade(score=1, reasoning="The reference diagnosis is empty after normalisation."))

    def _compare(self, reference: frozenset[str], predicted: frozenset[str]) -> Grade:
        from rapidfuzz import fuzz, process

        aligned = set()
        for word in predicted:
            match = None if word in reference or len(word) < 5 else process.extractOne(
                word, reference, scorer=fuzz.ratio, score_cutoff=90)
            aligned.add(match[0] if match else word)
        predicted = frozenset(aligned)
        vocabulary = self.vocabulary
        if predicted == reference:
            return Grade(score=5, reasoning="The diagnosis is the reference diagnosis (after normalisation and "
                                            "synonyms).")
        if (predicted - reference) & vocabulary.not_the_disease:
            return Grade(score=2, reasoning="The diagnosis names a mimic or precursor of the reference, not it.")
        if reference < predicted:
            extra = predicted - reference
            if any(vocabulary.is_disease_word(w) for w in extra):
                return Grade(score=3, reasoning=f"The diagnosis contains the reference but adds another disease "
                                                f"({', '.join(sorted(extra))}).")
            return Grade(score=5, reasoning="The diagnosis is the reference made more specific.")
        missing, shared = reference - predicted, reference & predicted
        if predicted < reference and missing <= self.qualifiers:
            return Grade(score=4, reasoning=f"The core disease is right; a minor qualifier is missing "
                                            f"({', '.join(sorted(missing))}).")
        core = {w for w in shared if w not in self.qualifiers and w not in self.generic}
        if core and any(vocabulary.is_disease_word(w) for w in core):
            return Grade(score=3, reasoning=f"The diagnosis is in the right category ({', '.join(sorted(core))}) "
                                            "but differs in a major way.")
        if shared:
            return Grade(score=2, reasoning=f"Only a superficial overlap with the reference "
                                            f"({', '.join(sorted(shared))}).")
        return Grade(score=1, reasoning="The diagnosis is a different disease.")


class LLMJudge:
    name = LLM_JUDGE

    def __init__(self, backend: Any, system_prompt: str, user_template: str) -> None:
        self.backend = backend
        self.system_prompt = system_prompt
        self.user_template = user_template
        self.model = str(getattr(backend, "model", ""))

    @classmethod
    def from_backend(cls, backend: Any, prompts_dir: Path | None = None) -> LLMJudge:
        return cls(backend, load_prompt("sdbench_judge_system", prompts_dir),
                   load_prompt("sdbench_judge_user", prompts_dir))

    def grade(self, reference: str, diagnosis: str, on_call: Callable[[Any], None] | None = None,
              on_attempt: Callable[[Judgement], None] | None = None) -> Grade:
        messages = [{"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": fill(self.user_template, reference=reference, diagnosis=diagnosis)}]
        problem = ""
        for attempt in (1, 2):
            started = time.monotonic()
            reply = self.backend.complete(messages, on_call=on_call, role="sdbench-judge")
            try:
                grade = parse_grade(reply)
            except ValueError as exc:
                problem = str(exc)
                if on_attempt is not None:
                    on_attempt(judgement(self.name, self.model, None, time.monotonic() - started, attempt, problem))
                messages += [{"role": "assistant", "content": reply},
                             {"role": "user", "content": f"That answer was not valid: {problem}. Reply with the "
                                                         "JSON object only."}]
                continue
            if on_attempt is not None:
                on_attempt(judgement(self.name, self.model, grade, time.monotonic() - started, attempt,
                                     prompt_version=LLM_PROMPT_VERSION))
            return grade
        raise JudgeFailure(f"The SDBench judge gave no valid score in two tries: {problem}.")


def parse_grade(reply: str) -> Grade:
    start, end = (reply or "").find("{"), (reply or "").rfind("}")
    if start < 0:
        raise ValueError("the answer holds no JSON object")
    try:
        data = json_value(reply[start:end + 1])
    except ValueError as exc:
        raise ValueError(f"the answer is {exc}") from None
    if not isinstance(data, dict) or set(data) != {"score", "reasoning"}:
        raise ValueError('the answer must have exactly the keys "score" and "reasoning"')
    score = data["score"]
    if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 5:
        raise ValueError('"score" must be a whole number from 1 to 5')
    if not isinstance(data["reasoning"], str) or not data["reasoning"].strip():
        raise ValueError('"reasoning" must be a non-empty string')
    return Grade(score=score, reasoning=data["reasoning"].strip())
