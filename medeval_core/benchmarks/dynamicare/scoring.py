"""Hit@K / Rec@K of predictions made elsewhere (``score hitk``) and the headline metrics of a run.

Predictions: JSON Lines ``{"case_id", "predictions": [codes or names, ranked]}``. Truth: JSON Lines
``{"case_id", "codes": [...]}`` (a records file's ``icd9`` lists are read too). Every truth case is scored; a
case without a prediction line scores 0 (and is reported), a prediction for a case outside the truth is
reported and left out. Predictions are mapped first: codes pass through (with or without the dot), names go
through the ICD-9 mapper; a name that maps to nothing keeps its rank and matches nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from medeval_core.benchmark import Metric
from medeval_core.files import json_value, numbered_lines, problem_of
from medeval_core.icd9 import Icd9Mapper, category, normalise_code
from medeval_core.metrics.hitk import KS, case_metrics
from medeval_core.metrics.stats import bootstrap_mean_ci, wilson_interval

METRIC_NAMES = tuple(f"{kind}@{k}" for kind in ("Hit", "Rec") for k in KS)


class ScoreFileError(ValueError):
    """A predictions or truth file that cannot be scored; the message names the line and the problem."""


class HitKReport(BaseModel):
    metrics: dict[str, float]
    n: int
    per_case: dict[str, dict[str, float]]
    unmapped: list[str] = Field(default_factory=list)
    missing_predictions: list[str] = Field(default_factory=list)
    unknown_cases: list[str] = Field(default_factory=list)
    mapped_names: dict[str, str] = Field(default_factory=dict)


def _lines(path: Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in numbered_lines(path, ScoreFileError, f"does not exist; give the {what} JSON Lines file."):
        try:
            raw = json_value(line.decode("utf-8"))
        except ValueError as exc:
            raise ScoreFileError(f"{path} line {number}: {problem_of(exc)}; fix that line.") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("case_id"), str | int) \
                or isinstance(raw.get("case_id"), bool):
            raise ScoreFileError(f'{path} line {number} needs a "case_id".')
        rows.append((number, raw))
    if not rows:
        raise ScoreFileError(f"The {what} file {path} has no lines.")
    return rows


def read_truth(path: Path) -> dict[str, list[str]]:
    """Case id -> ground-truth categories (distinct, in order)."""
    truth: dict[str, list[str]] = {}
    for number, raw in _lines(path, "truth"):
        codes = raw.get("codes", raw.get("icd9"))
        if not isinstance(codes, list):
            raise ScoreFileError(f'{path} line {number}: "codes" must be a list of ICD-9 codes.')
        categories: list[str] = []
        for item in codes:
            code = item.get("code") if isinstance(item, dict) else item
            if not isinstance(code, str) or normalise_code(code) is None:
                raise ScoreFileError(f"{path} line {number}: {code!r} is not an ICD-9 code (e.g. 428.0, E815.0, "
                                     "V45.1).")
            categories.append(category(code))
        case_id = str(raw["case_id"])
        if case_id in truth:
            raise ScoreFileError(f"{path} line {number}: case {case_id} appears on an earlier line.")
        truth[case_id] = list(dict.fromkeys(categories))
    return truth


def read_predictions(path: Path) -> dict[str, list[str]]:
    predictions: dict[str, list[str]] = {}
    for number, raw in _lines(path, "predictions"):
        ranked = raw.get("predictions")
        if not isinstance(ranked, list) or not all(isinstance(item, str) for item in ranked):
            raise ScoreFileError(f'{path} line {number}: "predictions" must be a ranked list of codes or names.')
        case_id = str(raw["case_id"])
        if case_id in predictions:
            raise ScoreFileError(f"{path} line {number}: case {case_id} appears on an earlier line.")
        predictions[case_id] = ranked
    return predictions


def score_files(predictions_path: Path, truth_path: Path, mapper: Icd9Mapper | None = None) -> HitKReport:
    truth = read_truth(truth_path)
    predictions = read_predictions(predictions_path)
    names = {item for ranked in predictions.values() for item in ranked if normalise_code(item) is None}
    mapped: dict[str, str | None] = {}
    if names:
        mapper = mapper or Icd9Mapper()
        for name in sorted(names):
            mapped[name] = mapper.map(name).category
    per_case: dict[str, dict[str, float]] = {}
    for case_id, gold in truth.items():
        ranked = predictions.get(case_id, [])
        predicted = [category(item) if normalise_code(item) is not None else mapped.get(item) for item in ranked]
        per_case[case_id] = case_metrics(predicted, gold)
    n = len(per_case)
    metrics = {name: sum(values[name] for values in per_case.values()) / n for name in METRIC_NAMES}
    return HitKReport(
        metrics=metrics, n=n, per_case=per_case,
        unmapped=sorted(name for name, value in mapped.items() if value is None),
        missing_predictions=[case_id for case_id in truth if case_id not in predictions],
        unknown_cases=[case_id for case_id in predictions if case_id not in truth],
        mapped_names={name: value for name, value in mapped.items() if value is not None})


def headline(per_case: Sequence[dict[str, float]], questions: Sequence[int], denominator: str) -> list[Metric]:
    """Hit@K with Wilson intervals (a per-case 0/1), Rec@K and Ave-Q with bootstrap intervals."""
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
