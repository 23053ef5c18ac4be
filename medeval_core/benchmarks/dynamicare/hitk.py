"""Hit@K and Rec@K over ICD-9 categories (design.md §3.4, the DynamiCare seed's ``score_hit_rec``).

Inputs are already categories (``medeval_core.vocabularies.icd9.category``): the ranked predicted categories of one case
and its ground-truth categories. As in the seed, both sides are compared as sets, so two predictions in one category
count once and Rec@K's denominator is the number of distinct ground-truth categories.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache

KS = (5, 10)


def hit_rec_at(predicted: Sequence[str | None], truth: Sequence[str], k: int) -> tuple[float, float]:
    """(Hit@k, Rec@k) of one case. ``predicted`` is ranked; ``None`` marks a prediction that maps to no code
    (it keeps its rank, so an unmappable name still uses one of the k places). No ground truth gives (0, 0)."""
    _check(k)
    return _hit_rec(predicted[:k], set(truth))


def _check(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}.")


def _hit_rec(top: Sequence[str | None], gold: set[str]) -> tuple[float, float]:
    common = gold.intersection(top)  # None (unmapped) is never a ground-truth category
    return (1.0 if common else 0.0), (len(common) / len(gold) if gold else 0.0)


def case_metrics(predicted: Sequence[str | None], truth: Iterable[str],
                 ks: Sequence[int] = KS) -> dict[str, float]:
    """``Hit@k`` and ``Rec@k`` for every k of one case (the truth's set made once for all k, the names once for
    all cases: ``score hitk`` calls this for every one of 20,000 cases)."""
    gold = set(truth)
    metrics: dict[str, float] = {}
    for k, hit_name, rec_name in _metric_names(tuple(ks)):
        metrics[hit_name], metrics[rec_name] = _hit_rec(predicted[:k], gold)
    return metrics


@cache
def _metric_names(ks: tuple[int, ...]) -> tuple[tuple[int, str, str], ...]:
    for k in ks:
        _check(k)
    return tuple((k, f"Hit@{k}", f"Rec@{k}") for k in ks)


def matched(predicted: Sequence[str | None], truth: Sequence[str], k: int) -> list[str]:
    """The ground-truth categories found in the top k, in the truth's order."""
    top = {category for category in predicted[:k] if category is not None}
    seen: list[str] = []
    for category in truth:
        if category in top and category not in seen:
            seen.append(category)
    return seen
