"""Interval estimates, paired tests and agreement statistics, backed by statsmodels/scipy/scikit-learn.

Proportions are fractions (0-1) in and out; callers format percentages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

# scipy, statsmodels, scikit-learn and krippendorff are imported by the functions that use them: together they cost
# ~1.4 s, which every command importing this module (check-reported, summaries) would otherwise pay.


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) is returned for n == 0 (no information)."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"Need 0 <= successes <= n, got {successes}/{n}.")
    if n == 0:
        return 0.0, 1.0
    # The closed form shared with wilson_intervals (statsmodels' proportion_confint(method="wilson") gives the same
    # figures, as tests/test_stats.py checks), so a Wilson interval needs no scipy.
    low, high = wilson_intervals([successes / n], [n], confidence)
    return float(low[0]), float(high[0])


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
    from scipy import stats as scipy_stats

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


def wilson_intervals(
    proportions: Sequence[float] | np.ndarray, n: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score intervals in closed form, vectorised over (proportion, n) pairs; (0, 1) where n == 0.

    The proportion may be a mean of per-case proportions (a case's share of correct repetitions): the interval is
    then taken with n = the number of cases, the independent units."""
    p = np.asarray(proportions, dtype=float)
    size = np.asarray(n, dtype=float)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        denominator = 1 + z * z / size
        centre = (p + z * z / (2 * size)) / denominator
        half = z * np.sqrt(p * (1 - p) / size + z * z / (4 * size * size)) / denominator
        # At p = 0 (p = 1) the lower (upper) bound is exactly 0 (1); rounding would leave ~1e-17 off it.
        low = np.where((size > 0) & (p > 0), np.clip(centre - half, 0.0, 1.0), 0.0)
        high = np.where((size > 0) & (p < 1), np.clip(centre + half, 0.0, 1.0), 1.0)
    return low, high


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    n_resamples: int = 2_000,
    seed: int = 0,
    max_draws: int = 20_000_000,
) -> tuple[float, float]:
    """Percentile bootstrap interval of a mean, vectorised (one seeded numpy generator, resamples drawn in blocks).

    With at most 256 distinct values the resamples' counts are drawn from a multinomial (exactly the same
    bootstrap, independent of n). Otherwise at most ``max_draws`` values are drawn in all, with at least 200
    resamples: above 10,000 values the number of resamples shrinks (at 100,000 values, 200), where the interval
    is narrow and its percentiles stable enough.
    """
    data = np.asarray(values, dtype=float)
    n = data.size
    if n == 0:
        raise ValueError("A bootstrap interval needs at least one value.")
    if np.all(data == data[0]):
        point = float(data[0])
        return point, point
    rng = np.random.default_rng(seed)
    distinct, counts = np.unique(data, return_counts=True)
    if distinct.size <= 256:
        # Few distinct values (costs, turn counts, shares of repetitions): resampling n values is drawing their
        # counts from a multinomial, the same bootstrap distribution at O(resamples x distinct values).
        draws = rng.multinomial(n, counts / n, size=n_resamples)
        means = draws @ distinct / n
    else:
        resamples = int(min(n_resamples, max(200, max_draws // n)))
        means = np.empty(resamples)
        block = max(1, 2_000_000 // n)
        for start in range(0, resamples, block):
            stop = min(resamples, start + block)
            index = rng.integers(0, n, size=(stop - start, n), dtype=np.int64 if n > 2**31 - 1 else np.int32)
            means[start:stop] = data[index].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)


def mcnemar_exact(
    a_correct: Sequence[bool] | np.ndarray, b_correct: Sequence[bool] | np.ndarray
) -> tuple[int, int, float]:
    """Exact McNemar test on paired outcomes: (cases only A got right, cases only B got right, two-sided p)."""
    a = np.asarray(a_correct, dtype=bool)
    b = np.asarray(b_correct, dtype=bool)
    if a.shape != b.shape:
        raise ValueError("McNemar needs the two models' outcomes on the same cases, in the same order.")
    table = np.array([[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]])
    only_a, only_b = int(table[0, 1]), int(table[1, 0])
    if only_a + only_b == 0:
        return only_a, only_b, 1.0
    from statsmodels.stats.contingency_tables import mcnemar as statsmodels_mcnemar

    return only_a, only_b, float(statsmodels_mcnemar(table, exact=True).pvalue)


def cohens_kappa(rater_a: Sequence[str], rater_b: Sequence[str]) -> float:
    """Cohen's kappa between two annotators over the same items."""
    if len(rater_a) != len(rater_b) or not rater_a:
        raise ValueError("Cohen's kappa needs two equally long, non-empty rating lists.")
    from sklearn.metrics import cohen_kappa_score

    return float(cohen_kappa_score(list(rater_a), list(rater_b)))


def krippendorff_alpha(
    ratings: Sequence[Sequence[float | None]], level: str = "nominal"
) -> float:
    """Krippendorff's alpha; ``ratings`` is annotators x items with None for a missing rating."""
    matrix = np.array([[np.nan if v is None else v for v in row] for row in ratings], dtype=float)
    import krippendorff

    return float(krippendorff.alpha(reliability_data=matrix, level_of_measurement=level))  # type: ignore[arg-type]
