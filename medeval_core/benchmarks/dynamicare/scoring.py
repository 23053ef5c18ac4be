"""Hit@K / Rec@K of predictions made elsewhere (``score hitk``) and the headline metrics of a run.

Predictions: JSON Lines ``{"case_id", "predictions": [codes or names, ranked]}``. Truth: JSON Lines
``{"case_id", "codes": [...]}`` (a records file's ``icd9`` lists are read too). Every truth case is scored; a
case without a prediction line scores 0 (and is reported), a prediction for a case outside the truth is
reported and left out. Predictions are mapped first: codes pass through (with or without the dot), names go
through the ICD-9 mapper; a name that maps to nothing keeps its rank and matches nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from medeval_core.benchmarks.dynamicare.hitk import KS, case_metrics
from medeval_core.jsonl import json_lines, problem_of
from medeval_core.memory import gc_paused
from medeval_core.vocabularies.icd9_codes import Icd9Error, category

if TYPE_CHECKING:
    from medeval_core.benchmark import Metric
    from medeval_core.vocabularies.icd9 import Icd9Mapper

METRIC_NAMES = tuple(f"{kind}@{k}" for kind in ("Hit", "Rec") for k in KS)
# Truth codes with these methods were given as codes; any other method (exact, synonym, crosswalk, embedding, llm)
# means a free-text diagnosis was mapped to make them, and every summary says so.
GIVEN_METHODS = frozenset({"given", "code", "corrected"})
# ``_STR_ONLY.issuperset(map(type, items))``: every item is a string, without building a set per line.
_STR_ONLY = frozenset({str})


class ScoreFileError(ValueError):
    """A predictions or truth file that cannot be scored; the message names the line and the problem."""


class HitKReport(NamedTuple):
    """What ``score_files`` found. A NamedTuple: a pydantic model would import pydantic (a tenth of a second of
    ``score hitk``'s start) and a dataclass ``inspect``; nothing here needs validating or serialising."""

    metrics: dict[str, float]
    n: int
    per_case: dict[str, dict[str, float]]
    unmapped: list[str]
    missing_predictions: list[str]
    unknown_cases: list[str]
    mapped_names: dict[str, str]
    name_methods: dict[str, int]
    """How the predicted names were mapped: method -> how many names (``Icd9Mapping.method``)."""
    truth_mapped: dict[str, int]
    """Truth cases whose codes were mapped from a diagnosis name, by method; empty when all were given as codes."""


def shares(counts: dict[str, int]) -> str:
    """``exact 70% (7), embedding 30% (3)``: each method's share, largest first."""
    total = sum(counts.values())
    return ", ".join(f"{method} {count / total:.0%} ({count})"
                     for method, count in sorted(counts.items(), key=lambda item: -item[1]))


def mapped_truth_methods(methods_per_case: Iterable[Sequence[str]]) -> dict[str, int]:
    """Cases whose truth holds a mapped code, counted by the method of their first mapped code."""
    return dict(Counter(next(m for m in methods if m not in GIVEN_METHODS) for methods in methods_per_case
                        if any(m not in GIVEN_METHODS for m in methods)))


def mapped_truth_note(truth_mapped: dict[str, int], cases: int) -> str:
    """The sentence every summary carries when ground truth was mapped rather than given ('' when it was not)."""
    if not truth_mapped:
        return ""
    return (f"Ground truth of {sum(truth_mapped.values())} of {cases} cases is mapped from free-text diagnoses, not "
            f"hand-coded ({shares(truth_mapped)}).")


class _Categories(dict[str, str | None]):
    """Code or name -> its ICD-9 category, None for a name (not shaped like a code): worked out once per distinct
    string (the same codes recur across 20,000 cases), then a dict look-up."""

    def __missing__(self, item: str) -> str | None:
        found: str | None
        try:
            found = category(item)
        except Icd9Error:
            found = None
        self[item] = found
        return found


def _lines(path: Path, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line, the first line that is no JSON object with a case id refused;
    a generator, so the readers check each line as it comes (a list of 20,000 lines read twice cost more)."""
    number = 0  # the last line's number: 0 when the file has no line
    for number, raw, problem in json_lines(path, ScoreFileError,
                                           f"does not exist; give the {what} JSON Lines file."):
        if problem is not None:
            raise ScoreFileError(f"{path} line {number}: {problem_of(problem)}; fix that line.")
        # Exact types (JSON makes no subclasses): a bool, which is an int, is no case id.
        if type(raw) is not dict or type(raw.get("case_id")) not in (str, int):
            raise ScoreFileError(f'{path} line {number} needs a "case_id".')
        yield number, raw
    if not number:
        raise ScoreFileError(f"The {what} file {path} has no lines.")


def read_truth(path: Path, categories: _Categories | None = None) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Case id -> its distinct ground-truth categories, and the cases whose codes were mapped from a name
    (``mapped_truth_methods``: a records file's ``{"code", "method"}`` entries say how)."""
    truth: dict[str, set[str]] = {}
    methods: list[list[str]] = []
    categories = _Categories() if categories is None else categories
    for number, raw in _lines(path, "truth"):
        codes = raw.get("codes", raw.get("icd9"))
        if not isinstance(codes, list):
            raise ScoreFileError(f'{path} line {number}: "codes" must be a list of ICD-9 codes.')
        if _STR_ONLY.issuperset(map(type, codes)):  # plain code lists, the usual truth file
            case_categories = list(map(categories.__getitem__, codes))
        else:  # a records file's {"code", "method"} entries
            methods.append([str(item.get("method", "given")) for item in codes if isinstance(item, dict)])
            codes = [item.get("code") if isinstance(item, dict) else item for item in codes]
            case_categories = [categories[code] if isinstance(code, str) else None for code in codes]
        if None in case_categories:
            code = codes[case_categories.index(None)]
            raise ScoreFileError(f"{path} line {number}: {code!r} is not an ICD-9 code (e.g. 428.0, E815.0, "
                                 "V45.1).")
        case_id = str(raw["case_id"])
        if case_id in truth:
            raise ScoreFileError(f"{path} line {number}: case {case_id} appears on an earlier line.")
        truth[case_id] = set(cast(list[str], case_categories))  # None refused above
    return truth, mapped_truth_methods(methods)


def read_predictions(path: Path, categories: _Categories) -> tuple[dict[str, list[str | None]], dict[str, list[str]]]:
    """Case id -> the categories of its ranked predictions (None for a name), and case id -> the ranked predictions
    of the cases that hold a name (to be mapped once all names are known). Each line's categories are looked up as it
    is read: a set of all 200,000 predictions, then their look-up case by case, cost more."""
    ranked_categories: dict[str, list[str | None]] = {}
    with_names: dict[str, list[str]] = {}
    for number, raw in _lines(path, "predictions"):
        ranked = raw.get("predictions")
        if not isinstance(ranked, list) or not _STR_ONLY.issuperset(map(type, ranked)):
            raise ScoreFileError(f'{path} line {number}: "predictions" must be a ranked list of codes or names.')
        case_id = str(raw["case_id"])
        if case_id in ranked_categories:
            raise ScoreFileError(f"{path} line {number}: case {case_id} appears on an earlier line.")
        ranked_categories[case_id] = found = list(map(categories.__getitem__, ranked))
        if None in found:
            with_names[case_id] = ranked
    return ranked_categories, with_names


def score_files(predictions_path: Path, truth_path: Path, mapper: Icd9Mapper | None = None) -> HitKReport:
    # Many small acyclic objects (the lines, the per-case figures): the collector would rescan them as they grow.
    with gc_paused():
        return _score_files(predictions_path, truth_path, mapper)


def _score_files(predictions_path: Path, truth_path: Path, mapper: Icd9Mapper | None) -> HitKReport:
    categories = _Categories()
    truth, truth_mapped = read_truth(truth_path, categories)
    predictions, with_names = read_predictions(predictions_path, categories)
    names = {item for item in chain.from_iterable(with_names.values()) if categories[item] is None}
    mapped: dict[str, str | None] = {}
    methods: Counter[str] = Counter()
    if names:
        # The mapper's module (its vocabulary, stemmer and models) only for names: codes need none of it.
        from medeval_core.vocabularies.icd9 import Icd9Mapper

        mapper = mapper or Icd9Mapper()
        for name in sorted(names):
            mapping = mapper.map(name)
            mapped[name] = categories[name] = mapping.category
            methods[mapping.method] += 1
        for case_id, ranked in with_names.items():
            predictions[case_id] = list(map(categories.__getitem__, ranked))
    per_case: dict[str, dict[str, float]] = {}
    missing_predictions: list[str] = []
    for case_id, gold in truth.items():
        predicted = predictions.get(case_id)
        if predicted is None:
            missing_predictions.append(case_id)
        per_case[case_id] = case_metrics(() if predicted is None else predicted, gold)
    n = len(per_case)
    metrics = {name: sum(values[name] for values in per_case.values()) / n for name in METRIC_NAMES}
    # A prediction line names a case outside the truth only when there are more lines than truth cases with one: the
    # usual file skips a second look-up of all 20,000 cases.
    unknown = len(predictions) > n - len(missing_predictions)
    return HitKReport(
        metrics=metrics, n=n, per_case=per_case,
        unmapped=sorted(name for name, value in mapped.items() if value is None),
        missing_predictions=missing_predictions,
        unknown_cases=[case_id for case_id in predictions if case_id not in truth] if unknown else [],
        mapped_names={name: value for name, value in mapped.items() if value is not None},
        name_methods=dict(methods), truth_mapped=truth_mapped)


def headline(per_case: Sequence[dict[str, float]], questions: Sequence[int], denominator: str) -> list[Metric]:
    """Hit@K with Wilson intervals (a per-case 0/1), Rec@K and Ave-Q with bootstrap intervals."""
    # Imported here: the metric model needs pydantic and the intervals numpy, which ``score hitk`` never uses.
    from medeval_core.benchmark import Metric
    from medeval_core.metrics.stats import bootstrap_mean_ci, wilson_interval

    n = len(per_case)
    metrics: list[Metric] = []
    for name in METRIC_NAMES:
        values = [values[name] for values in per_case]
        if not n:
            metrics.append(Metric(name=name, value=None, n=0, denominator=denominator))
        elif name.startswith("Hit"):
            hits = int(sum(values))
            metrics.append(Metric(name=name, value=hits / n, interval=wilson_interval(hits, n), n=n,
                                  denominator=denominator, method="Wilson 95%",
                                  role="accuracy" if name == METRIC_NAMES[0] else None))
        else:
            metrics.append(Metric(name=name, value=sum(values) / n, interval=bootstrap_mean_ci(values), n=n,
                                  denominator=denominator, method="mean, bootstrap 95%"))
    asked = [float(count) for count in questions]
    metrics.append(Metric(name="Ave-Q", value=sum(asked) / n if n else None, n=n, denominator=denominator,
                          interval=bootstrap_mean_ci(asked) if n else None, method="mean, bootstrap 95%",
                          unit="number", role="turns"))
    return metrics
