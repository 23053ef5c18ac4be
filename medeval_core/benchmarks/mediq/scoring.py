"""MEDIQ metrics, one scorer for runs made here and for result files written by the MediQ benchmark code.

Accuracy (on ``answer_idx``) with a Wilson 95 % interval, Ave-Q (mean questions per case, bootstrap interval),
the timeout rate (cases where the budget forced the choice), MediQ's "Avg. Turns" (choices made per case: the
questions plus the final choice, so Ave-Q + 1) and, beside the accuracy, the same expert's accuracy without asking
(initial information only) over the cases where that choice is known, so the gain from asking shows.

A MediQ result line (``src/mediQ_benchmark.py`` of stellalisy/mediQ) is ``{"id", "info": {"correct_answer_idx",
...}, "interactive_system": {"letter_choice", "questions", "answers", "num_questions", "intermediate_choices",
...}}`` (its unused ``evaluate.py`` names the choice ``choice``; the benchmark writes ``letter_choice``). The
rules are MediQ's own: correct when ``letter_choice == correct_answer_idx`` (exact), timed out when
``len(intermediate_choices) > max_questions``, turns ``len(intermediate_choices)``; the first intermediate
choice is the expert's answer before any question (tests/data/upstream/mediq/ holds a file MediQ's code wrote).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from medeval_core.benchmark import Metric
from medeval_core.benchmarks.mediq.cases import OPTION_LETTERS
from medeval_core.data.files import read_json_lines
from medeval_core.metrics.stats import bootstrap_mean_ci, wilson_interval


class CaseScore(BaseModel):
    case_id: str
    correct: bool
    num_questions: int
    timed_out: bool
    initial_correct: bool | None = None
    turns: int | None = Field(default=None, description="choices made (questions + the final one); "
                                                          "None: num_questions + 1")

    @property
    def choices_made(self) -> int:
        return self.turns if self.turns is not None else self.num_questions + 1


class ResultFileError(ValueError):
    """A MediQ result file that cannot be scored; the message names the line and the problem."""


def headline(scores: Sequence[CaseScore], denominator: str) -> list[Metric]:
    n = len(scores)
    correct = sum(score.correct for score in scores)
    timeouts = sum(score.timed_out for score in scores)
    questions = [float(score.num_questions) for score in scores]
    metrics = [
        Metric(name="accuracy", value=correct / n if n else None, interval=wilson_interval(correct, n) if n else None,
               n=n, denominator=denominator, method="Wilson 95%", role="accuracy"),
        Metric(name="Ave-Q", value=sum(questions) / n if n else None, n=n, denominator=denominator,
               interval=bootstrap_mean_ci(questions) if n else None, method="mean, bootstrap 95%", unit="number",
               role="turns"),
        Metric(name="timeout rate", value=timeouts / n if n else None, n=n, denominator=denominator,
               interval=wilson_interval(timeouts, n) if n else None, method="Wilson 95%"),
        Metric(name="Avg. Turns", value=sum(score.choices_made for score in scores) / n if n else None, n=n,
               denominator=denominator, unit="number",
               method="MediQ's figure: mean choices made per case (questions + the final choice) = Ave-Q + 1"),
    ]
    known = [score.initial_correct for score in scores if score.initial_correct is not None]
    if known:
        right = sum(known)
        metrics.append(Metric(name="accuracy without asking", value=right / len(known), n=len(known),
                              interval=wilson_interval(right, len(known)), method="Wilson 95%",
                              denominator="cases with a choice on the initial information"))
    return metrics


def figures(metrics: Sequence[Metric]) -> dict[str, float | None]:
    return {metric.name: metric.value for metric in metrics}


def _result_score(raw: Mapping[str, Any], answers: Mapping[str, str] | None, max_questions: int) -> CaseScore:
    system = raw.get("interactive_system")
    info = raw.get("info")
    if not isinstance(system, dict) or not isinstance(info, dict):
        raise ValueError('the line needs "interactive_system" and "info" objects')
    if "id" not in raw:
        raise ValueError('the line has no "id"')
    case_id = str(raw["id"])
    truth = answers.get(case_id) if answers is not None else info.get("correct_answer_idx")
    if answers is not None and truth is None:
        raise ValueError(f"case {case_id} is not in the cases file")
    if truth not in OPTION_LETTERS:
        raise ValueError(f"the correct answer index is {truth!r}, not one of A-D")
    if "letter_choice" not in system:
        raise ValueError('"interactive_system" has no "letter_choice" (the key MediQ\'s mediQ_benchmark.py writes)')
    choice = system["letter_choice"]
    questions = system.get("questions", [])
    if not isinstance(questions, list):
        raise ValueError('"questions" must be a list')
    count = system.get("num_questions", len(questions))
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError('"num_questions" must be a whole number >= 0')
    intermediate = system.get("intermediate_choices")
    if intermediate is not None and not isinstance(intermediate, list):
        raise ValueError('"intermediate_choices" must be a list')
    initial = intermediate[0] if intermediate else None
    return CaseScore(case_id=case_id, correct=choice == truth, num_questions=count,
                     timed_out=len(intermediate) > max_questions if intermediate is not None
                     else count >= max_questions,
                     turns=len(intermediate) if intermediate is not None else None,
                     initial_correct=None if not isinstance(initial, str) else initial == truth)


def score_result_file(path: str | Path, answers: Mapping[str, str] | None = None,
                      max_questions: int = 10) -> list[CaseScore]:
    """Per-case scores of a MediQ result file; ``answers`` (case id -> answer_idx, from a cases file) replaces
    the file's own ``correct_answer_idx``. A case listed twice is refused (appending runs repeat ids)."""
    def parse(raw: object) -> CaseScore:
        if not isinstance(raw, dict):
            raise ValueError("the line is not a JSON object")
        return _result_score(raw, answers, max_questions)

    scores, _ = read_json_lines(
        Path(path), ResultFileError, "does not exist; give MediQ's output JSON Lines.", parse,
        lambda score: score.case_id, duplicate="case {key} is scored on an earlier line; keep one result per case",
        nothing_valid="no result lines", remedy="fix that line")
    return scores
