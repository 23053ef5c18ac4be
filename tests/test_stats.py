"""Each statistic against values worked by hand (or a textbook example)."""

import math

import numpy as np
import pytest

from medeval_core.metrics.stats import bootstrap_ci, cohens_kappa, krippendorff_alpha, mcnemar_exact, wilson_interval


def test_wilson_interval_matches_the_closed_form() -> None:
    # p = 0.5, n = 100, z = 1.959964: centre 0.5, half-width z*sqrt(p(1-p)/n + z^2/4n^2)/(1 + z^2/n)
    z = 1.959963984540054
    n, p = 100, 0.5
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.5 - half, abs=1e-12) and high == pytest.approx(0.5 + half, abs=1e-12)


def test_wilson_interval_agrees_with_statsmodels() -> None:
    from statsmodels.stats.proportion import proportion_confint

    for successes, n, confidence in [(0, 1, 0.95), (1, 1, 0.95), (3, 7, 0.9), (81, 160, 0.95), (999, 1000, 0.99),
                                     (12345, 20100, 0.95)]:
        expected = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
        assert wilson_interval(successes, n, confidence) == pytest.approx(expected, abs=1e-12)


def test_wilson_reproduces_the_skingpt_document() -> None:
    assert [round(v * 100, 2) for v in wilson_interval(72, 158)] == [38.00, 53.35]
    assert [round(v * 100, 2) for v in wilson_interval(81, 160)] == [42.95, 58.27]


def test_wilson_edges() -> None:
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and 0 < high < 0.35
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 3)


def test_bootstrap_percentile_interval_is_reproducible_and_brackets_the_mean() -> None:
    values = [0, 1, 1, 0, 1, 1, 1, 0, 1, 1] * 5
    first = bootstrap_ci(values, seed=7)
    assert first == bootstrap_ci(values, seed=7)
    assert first[0] < np.mean(values) < first[1]
    assert bootstrap_ci([1, 1, 1]) == (1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_exact_mcnemar_uses_the_binomial_on_discordant_pairs() -> None:
    # Only A right on 3 cases, only B right on 1: p = 2 * P(X <= 1 | n=4, 1/2) = 2 * 5/16 = 0.625
    a = [1, 1, 1, 0, 0, 1]
    b = [0, 0, 0, 0, 1, 1]
    assert mcnemar_exact(a, b) == (3, 1, pytest.approx(0.625))
    # 9 discordant, all one way: p = 2 / 2^9
    assert mcnemar_exact([1] * 9 + [0], [0] * 9 + [0])[2] == pytest.approx(2 / 512)
    assert mcnemar_exact([1, 0], [1, 0]) == (0, 0, 1.0)
    with pytest.raises(ValueError, match="same cases"):
        mcnemar_exact([1], [1, 0])


def test_cohens_kappa_by_hand() -> None:
    # observed agreement 3/4; chance agreement .5*.25 + .5*.75 = .5; kappa = (.75 - .5) / .5
    assert cohens_kappa(list("aabb"), list("abbb")) == pytest.approx(0.5)
    assert cohens_kappa(list("abab"), list("abab")) == pytest.approx(1.0)


def test_krippendorff_alpha_on_the_textbook_example() -> None:
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability", nominal example with missing values: 0.743
    ratings = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    ]
    assert krippendorff_alpha(ratings) == pytest.approx(0.743, abs=5e-4)
