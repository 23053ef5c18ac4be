"""Interval estimates, paired tests and agreement statistics, backed by statsmodels/scipy/scikit-learn.

Proportions are fractions (0-1) in and out; callers format percentages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import krippendorff
import numpy as np
from scipy import stats as scipy_stats
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.contingency_tables import mcnemar as statsmodels_mcnemar
from statsmodels.stats.proportion import proportion_confint


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) is returned for n == 0 (no information)."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"Need 0 <= successes <= n, got {successes}/{n}.")
    if n == 0:
        return 0.0, 1.0
    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    return float(low), float(high)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    statistic: Callable[[np.ndarray], float] = np.mean,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``statistic`` over per-case values (seeded, reproducible)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("A bootstrap interval needs at least one value.")
    if np.all(data == data[0]):
        # scipy refuses degenerate samples; every resample has the same statistic, so the interval is a point.
        point = float(statistic(data))
        return point, point
    result = scipy_stats.bootstrap(
        (data,),
        statistic,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        random_state=np.random.default_rng(seed),
        vectorized=False,
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> tuple[int, int, float]:
    """Exact McNemar test on paired outcomes: (cases only A got right, cases only B got right, two-sided p)."""
    a = np.asarray(a_correct, dtype=bool)
    b = np.asarray(b_correct, dtype=bool)
    if a.shape != b.shape:
        raise ValueError("McNemar needs the two models' outcomes on the same cases, in the same order.")
    table = np.array([[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]])
    only_a, only_b = int(table[0, 1]), int(table[1, 0])
    if only_a + only_b == 0:
        return only_a, only_b, 1.0
    return only_a, only_b, float(statsmodels_mcnemar(table, exact=True).pvalue)


def cohens_kappa(rater_a: Sequence[str], rater_b: Sequence[str]) -> float:
    """Cohen's kappa between two annotators over the same items."""
    if len(rater_a) != len(rater_b) or not rater_a:
        raise ValueError("Cohen's kappa needs two equally long, non-empty rating lists.")
    return float(cohen_kappa_score(list(rater_a), list(rater_b)))


def krippendorff_alpha(
    ratings: Sequence[Sequence[float | None]], level: str = "nominal"
) -> float:
    """Krippendorff's alpha; ``ratings`` is annotators x items with None for a missing rating."""
    matrix = np.array([[np.nan if v is None else v for v in row] for row in ratings], dtype=float)
    return float(krippendorff.alpha(reliability_data=matrix, level_of_measurement=level))
