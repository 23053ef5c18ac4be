"""Run summaries and run-to-run comparison with uncertainty, generic over benchmarks.

Every numeric or boolean per-case metric of a run is summarised: booleans (e.g. ``correct``) as a proportion
with a Wilson interval, numbers as a mean with a percentile bootstrap interval. Two runs scored on the same cases
are compared on their shared cases, with the exact McNemar test for boolean metrics (design.md §3.1: the models
were scored on the same cases, so their difference wants a paired test).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from pydantic import BaseModel

from medeval_core.metrics.stats import bootstrap_ci, mcnemar_exact, wilson_interval
from medeval_core.records import CaseResult, CaseStatus


class MetricSummary(BaseModel):
    metric: str
    kind: str  # "proportion" or "mean"
    n: int
    value: float
    ci_low: float
    ci_high: float


class PairedComparison(BaseModel):
    metric: str
    shared_cases: int
    value_a: float
    value_b: float
    difference: float
    only_a_correct: int | None = None
    only_b_correct: int | None = None
    p_value: float | None = None
    difference_ci_low: float | None = None
    difference_ci_high: float | None = None
    test: str


class RunComparison(BaseModel):
    run_a: str
    run_b: str
    summaries_a: list[MetricSummary]
    summaries_b: list[MetricSummary]
    paired: list[PairedComparison]


def _metric_values(results: Iterable[CaseResult]) -> dict[str, dict[tuple[str, int], float | bool]]:
    """metric -> {(case, repetition): value} over successful cases, numeric and boolean metrics only."""
    table: dict[str, dict[tuple[str, int], float | bool]] = {}
    for result in results:
        if result.status != CaseStatus.OK:
            continue
        for name, value in result.metrics.items():
            if isinstance(value, bool | int | float) and not (isinstance(value, float) and np.isnan(value)):
                table.setdefault(name, {})[(result.case_id, result.repetition)] = value
    return table


def _is_boolean(values: Iterable[float | bool]) -> bool:
    return all(isinstance(v, bool) for v in values)


def summarize_metrics(results: list[CaseResult]) -> list[MetricSummary]:
    summaries = []
    for name, by_case in sorted(_metric_values(results).items()):
        values = list(by_case.values())
        if _is_boolean(values):
            successes = sum(values)
            low, high = wilson_interval(successes, len(values))
            summaries.append(MetricSummary(metric=name, kind="proportion", n=len(values),
                                           value=successes / len(values), ci_low=low, ci_high=high))
        else:
            low, high = bootstrap_ci(np.asarray(values, dtype=float))
            summaries.append(MetricSummary(metric=name, kind="mean", n=len(values),
                                           value=float(np.mean(values)), ci_low=low, ci_high=high))
    return summaries


def compare_runs(run_a: str, results_a: list[CaseResult], run_b: str, results_b: list[CaseResult]) -> RunComparison:
    values_a, values_b = _metric_values(results_a), _metric_values(results_b)
    paired = []
    for name in sorted(set(values_a) & set(values_b)):
        shared = sorted(set(values_a[name]) & set(values_b[name]))
        if not shared:
            continue
        a = [values_a[name][key] for key in shared]
        b = [values_b[name][key] for key in shared]
        mean_a, mean_b = float(np.mean(a)), float(np.mean(b))
        if _is_boolean(a) and _is_boolean(b):
            only_a, only_b, p_value = mcnemar_exact(a, b)
            paired.append(PairedComparison(
                metric=name, shared_cases=len(shared), value_a=mean_a, value_b=mean_b, difference=mean_a - mean_b,
                only_a_correct=only_a, only_b_correct=only_b, p_value=p_value, test="exact McNemar",
            ))
        else:
            low, high = bootstrap_ci(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
            paired.append(PairedComparison(
                metric=name, shared_cases=len(shared), value_a=mean_a, value_b=mean_b, difference=mean_a - mean_b,
                difference_ci_low=low, difference_ci_high=high, test="paired percentile bootstrap",
            ))
    return RunComparison(
        run_a=run_a, run_b=run_b, summaries_a=summarize_metrics(results_a), summaries_b=summarize_metrics(results_b),
        paired=paired,
    )
