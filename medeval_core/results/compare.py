"""Run summaries and run-to-run comparison with uncertainty, generic over benchmarks.

Every numeric or boolean per-case metric of a run is summarised. The unit is the case: a case's repetitions are
reduced to their mean first, so n is the number of cases (repeated draws of one case are not independent cases).
- Boolean metrics (e.g. ``correct``) are proportions with a Wilson interval (never a bootstrap): the proportion is
  the mean over cases of each case's share of successes, n the number of cases.
- Numeric metrics are means over cases with a percentile bootstrap interval (vectorised, seeded numpy generator).
Two runs scored on the same cases (batch runs of one benchmark, dataset and task: ``check_comparable``) are compared
on their shared cases, with the exact McNemar test for a boolean
metric with one outcome per case (design.md §3.1: the models were scored on the same cases, so their difference
wants a paired test), and a paired bootstrap over per-case differences otherwise (numbers, or repetitions).

Everything is vectorised with numpy: 100,000 results summarise in a fraction of a second; ``run_summaries``
caches them per run and result stamp (count and newest row), so a page rerun does not recompute them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel

from medeval_core.memory import gc_paused
from medeval_core.metrics.stats import bootstrap_mean_ci, mcnemar_exact, wilson_intervals
from medeval_core.records import CaseResult, CaseStatus, MetricSummary

if TYPE_CHECKING:
    from medeval_core.store import Store


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




@dataclass(frozen=True)
class CaseMeans:
    """One metric of one run reduced per case: the cases (sorted), their mean over repetitions, the draw count."""

    cases: np.ndarray
    means: np.ndarray
    draws: int
    binary: bool


def _per_case_means(results: Iterable[CaseResult]) -> dict[str, CaseMeans]:
    """metric -> per-case means over successful results; numeric and boolean metrics only (NaN skipped)."""
    return per_case_means_of_rows((r.case_id, r.metrics) for r in results if r.status == CaseStatus.OK)


def per_case_means_of_rows(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, CaseMeans]:
    case_index: dict[str, int] = {}
    columns: dict[str, tuple[list[int], list[float]]] = {}
    not_binary: set[str] = set()
    for case_id, metrics in rows:
        index = case_index.setdefault(case_id, len(case_index))
        for name, value in metrics.items():
            kind = type(value)
            if kind is bool:
                pass
            elif kind is int or kind is float or isinstance(value, int | float):
                if value != value:  # NaN
                    continue
                not_binary.add(name)
            else:
                continue
            column = columns.get(name)
            if column is None:
                column = columns[name] = ([], [])
            column[0].append(index)
            column[1].append(float(value))
    if not columns:
        return {}
    names = np.array(list(case_index), dtype=str)
    # The case ids sorted once for every metric (they are distinct: each metric's cases keep this order).
    by_name = np.argsort(names, kind="stable")
    table = {}
    for name, (indices, values) in columns.items():
        idx = np.asarray(indices, dtype=np.int64)
        counts = np.bincount(idx, minlength=len(names))
        sums = np.bincount(idx, weights=np.asarray(values, dtype=float), minlength=len(names))
        keep = by_name[counts[by_name] > 0]
        table[name] = CaseMeans(cases=names[keep], means=sums[keep] / counts[keep], draws=len(values),
                                binary=name not in not_binary)
    return table


def _summary(name: str, values: CaseMeans) -> MetricSummary:
    n = len(values.means)
    value = float(values.means.mean())
    if values.binary:
        low, high = wilson_intervals([value], [n])
        return MetricSummary(metric=name, kind="proportion", n=n, value=value, ci_low=float(low[0]),
                             ci_high=float(high[0]), draws=values.draws, interval="wilson")
    low_b, high_b = bootstrap_mean_ci(values.means)
    return MetricSummary(metric=name, kind="mean", n=n, value=value, ci_low=low_b, ci_high=high_b,
                         draws=values.draws, interval="percentile bootstrap")


def summarize_metrics(results: Iterable[CaseResult]) -> list[MetricSummary]:
    with gc_paused():
        means = _per_case_means(results)
    return [_summary(name, values) for name, values in sorted(means.items())]


def summarize_metric_rows(rows: Iterable[tuple[str, int, Mapping[str, Any]]]) -> list[MetricSummary]:
    """``summarize_metrics`` over ``Store.metric_rows`` (case id, repetition, metrics of finished results)."""
    with gc_paused():
        means = per_case_means_of_rows((case_id, metrics) for case_id, _repetition, metrics in rows)
    return [_summary(name, values) for name, values in sorted(means.items())]


def compare_runs(run_a: str, results_a: list[CaseResult], run_b: str, results_b: list[CaseResult]) -> RunComparison:
    with gc_paused():
        values_a, values_b = _per_case_means(results_a), _per_case_means(results_b)
    return _comparison(run_a, values_a, run_b, values_b)


def compare_metric_rows(run_a: str, rows_a: Iterable[tuple[str, int, Mapping[str, Any]]], run_b: str,
                        rows_b: Iterable[tuple[str, int, Mapping[str, Any]]]) -> RunComparison:
    """``compare_runs`` over ``Store.metric_rows`` of the two runs (finished results only, no outputs read)."""
    with gc_paused():
        values_a = per_case_means_of_rows((case_id, metrics) for case_id, _repetition, metrics in rows_a)
        values_b = per_case_means_of_rows((case_id, metrics) for case_id, _repetition, metrics in rows_b)
    return _comparison(run_a, values_a, run_b, values_b)


def _comparison(run_a: str, values_a: dict[str, CaseMeans], run_b: str,
                values_b: dict[str, CaseMeans]) -> RunComparison:
    paired = []
    for name in sorted(set(values_a) & set(values_b)):
        first, second = values_a[name], values_b[name]
        shared, in_a, in_b = np.intersect1d(first.cases, second.cases, assume_unique=True, return_indices=True)
        if not shared.size:
            continue
        a, b = first.means[in_a], second.means[in_b]
        mean_a, mean_b = float(a.mean()), float(b.mean())
        one_outcome_per_case = bool(np.all((a == 0) | (a == 1)) and np.all((b == 0) | (b == 1)))
        if first.binary and second.binary and one_outcome_per_case:
            only_a, only_b, p_value = mcnemar_exact(a.astype(bool), b.astype(bool))
            paired.append(PairedComparison(
                metric=name, shared_cases=len(shared), value_a=mean_a, value_b=mean_b, difference=mean_a - mean_b,
                only_a_correct=only_a, only_b_correct=only_b, p_value=p_value, test="exact McNemar",
            ))
        else:
            low, high = bootstrap_mean_ci(a - b)
            paired.append(PairedComparison(
                metric=name, shared_cases=len(shared), value_a=mean_a, value_b=mean_b, difference=mean_a - mean_b,
                difference_ci_low=low, difference_ci_high=high, test="paired percentile bootstrap",
            ))
    return RunComparison(
        run_a=run_a, run_b=run_b,
        summaries_a=[_summary(name, values) for name, values in sorted(values_a.items())],
        summaries_b=[_summary(name, values) for name, values in sorted(values_b.items())],
        paired=paired,
    )


# Cached summaries for pages ----------------------------------------------------------------------------------------

_CACHE_SIZE = 64
_cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_cache_lock = threading.Lock()


def _cached(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    value = compute()
    with _cache_lock:
        _cache[key] = value
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return value


def run_summaries(store: Store, run_id: str) -> list[MetricSummary]:
    """``summarize_metrics`` of a stored run, cached per (database, run, result count, newest result row): a
    page rerun costs one COUNT query; a new or replaced result recomputes it (least recently used go first)."""
    key = ("summaries", store.url, run_id, store.results_stamp(run_id))
    summaries = _cached(key, lambda: tuple(summarize_metric_rows(store.metric_rows(run_id))))
    return [summary.model_copy() for summary in summaries]


def check_comparable(store: Store, run_a: str, run_b: str) -> None:
    """Refuse (``BenchmarkError``, one sentence) a pair whose case ids do not name the same cases: a session
    (one case evaluated on a page, whose case id every evaluation of that page shares), runs of two benchmarks,
    or runs on another dataset or task (``Benchmark.comparison_key``: e.g. open-ended against classification,
    or two patient files whose row ids coincide). A score run counts as the run it scores."""
    from medeval_core import registry
    from medeval_core.benchmark import BenchmarkError
    from medeval_core.records import RunConfig, RunKind

    keys = []
    for run_id in (run_a, run_b):
        config = RunConfig.model_validate(store.get_run(run_id).config)
        if config.kind == RunKind.SESSION:
            raise BenchmarkError(f"Run {run_id} is an interactive session (one case evaluated on a page), not a "
                                 "batch run; only batch runs are compared.")
        if config.kind == RunKind.SCORE and config.source_run_id is not None:
            config = RunConfig.model_validate(store.get_run(config.source_run_id).config)
        benchmark = registry.benchmark(config.benchmark)
        keys.append((config.benchmark, benchmark.comparison_key(benchmark.parse_params(config.params),
                                                                config.inputs)))
    (benchmark_a, key_a), (benchmark_b, key_b) = keys
    if benchmark_a != benchmark_b:
        raise BenchmarkError(f"Run {run_a} is a {benchmark_a} run and run {run_b} a {benchmark_b} run; only runs "
                             "of one benchmark are compared.")
    differing = sorted(name for name in set(key_a) | set(key_b) if key_a.get(name) != key_b.get(name))
    if differing:
        detail = "; ".join(f"{name}: {key_a.get(name)} against {key_b.get(name)}" for name in differing)
        raise BenchmarkError(f"Runs {run_a} and {run_b} are not on the same dataset and task ({detail}); their "
                             "cases are not paired.")


def run_comparison(store: Store, run_a: str, run_b: str) -> RunComparison:
    """``compare_runs`` of two stored runs, cached per (database, both runs, both result stamps) like
    ``run_summaries``: an unchanged pair costs two COUNT queries per page rerun. Runs whose cases are not the
    same cases are refused first (``check_comparable``)."""
    check_comparable(store, run_a, run_b)
    key = ("comparison", store.url, run_a, store.results_stamp(run_a), run_b, store.results_stamp(run_b))
    comparison: RunComparison = _cached(
        key, lambda: compare_metric_rows(run_a, store.metric_rows(run_a), run_b, store.metric_rows(run_b)))
    return comparison.model_copy(deep=True)


def clear_summary_cache() -> None:
    with _cache_lock:
        _cache.clear()
