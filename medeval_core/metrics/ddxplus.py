"""DDXPlus metrics with the per-patient semantics of design.md §3.2, vectorised over all patients at once.

Per patient (percentages 0-100):
- GT and P are the ground-truth and predicted pathologies with mass strictly greater than ``THRESHOLD`` (0.01);
  explicit 0.0 entries and masses of exactly 0.01 are out.
- DDR = |GT ∩ P| / |GT|, DDP = |GT ∩ P| / |P|, DDF1 = 2·DDR·DDP / (DDR + DDP); each is 0 when its denominator is.
- GTPA = the true pathology is in P.
- GTPA@1 = the top of the prediction is the true pathology, and it is in P. The top is the largest mass; among
  equal largest masses the one listed first in the prediction wins (``order``), which is what Python's
  ``max(prediction, key=prediction.get)`` and a stable sort by decreasing mass both pick.
- PER = |inquired ∩ present| / |present| over evidence roots (0 when nothing is present); ``inquired`` includes
  the initial evidence; a root is present when binary and listed, or non-binary with a non-default value.
- IL = questions asked + 1 (the initial evidence is the first turn).
Every reported figure is the mean of the per-patient values over all patients, summed exactly (``math.fsum``)
so that the result does not depend on summation order.

Inputs are arrays: ``pred_mass`` may have more columns than ``gt_mass`` (predicted names outside the KB: they
count in P, never in GT ∩ P). Root sets may be dense bool arrays or scipy.sparse matrices.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import sparse

THRESHOLD = 0.01
METRIC_KEYS = ("DDR", "DDP", "DDF1", "GTPA", "GTPA@1", "PER", "IL")


def _row_sums(matrix: Any) -> np.ndarray:
    return np.asarray(matrix.sum(axis=1)).ravel().astype(np.float64)


def _intersection_counts(left: Any, right: Any) -> np.ndarray:
    if sparse.issparse(left):
        return _row_sums(left.multiply(right).astype(bool))
    if sparse.issparse(right):
        return _row_sums(right.multiply(left).astype(bool))
    return _row_sums(np.logical_and(left, right))


def top_columns(pred_mass: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Column of each row's largest mass; ties go to the smallest ``order`` (default: the smallest column)."""
    if order is None:
        return np.argmax(pred_mass, axis=1)
    best = pred_mass.max(axis=1, keepdims=True)
    rank = np.where(pred_mass == best, order, np.iinfo(np.int64).max)
    return np.argmin(rank, axis=1)


def per_patient(
    gt_mass: np.ndarray,
    pathology: np.ndarray,
    pred_mass: np.ndarray,
    present: Any,
    inquired: Any,
    n_questions: np.ndarray,
    pred_order: np.ndarray | None = None,
    threshold: float = THRESHOLD,
) -> dict[str, np.ndarray]:
    """Per-patient metric arrays (one value per row), percentages except IL.

    gt_mass: (N, K) ground-truth masses over the KB's K pathologies; pathology: (N,) index of the true one;
    pred_mass: (N, K + U) predicted masses, the first K columns aligned with gt_mass; pred_order: (N, K + U)
    listing position of each predicted entry, used only to break ties at the top; present, inquired: (N, R)
    bool root sets; n_questions: (N,) questions asked.
    """
    gt_mass = np.asarray(gt_mass, dtype=np.float64)
    pred_mass = np.asarray(pred_mass, dtype=np.float64)
    n, k = gt_mass.shape
    if pred_mass.shape[0] != n or pred_mass.shape[1] < k:
        raise ValueError(f"pred_mass has shape {pred_mass.shape}; it needs {n} rows and at least {k} columns.")
    pathology = np.asarray(pathology, dtype=np.int64)
    rows = np.arange(n)

    gt_set = gt_mass > threshold
    pred_set = pred_mass > threshold
    n_gt = gt_set.sum(axis=1).astype(np.float64)
    n_pred = pred_set.sum(axis=1).astype(np.float64)
    tp = np.logical_and(gt_set, pred_set[:, :k]).sum(axis=1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ddr = np.where(n_gt > 0, tp / n_gt * 100.0, 0.0)
        ddp = np.where(n_pred > 0, tp / n_pred * 100.0, 0.0)
        ddf1 = np.where(ddr + ddp > 0, 2.0 * ddr * ddp / (ddr + ddp), 0.0)

    true_in_p = pred_set[rows, pathology] if n else np.zeros(0, dtype=bool)
    top = top_columns(pred_mass, pred_order) if n else np.zeros(0, dtype=np.int64)
    gtpa = np.where(true_in_p, 100.0, 0.0)
    gtpa1 = np.where(true_in_p & (top == pathology), 100.0, 0.0)

    n_present = _row_sums(present)
    hit = _intersection_counts(present, inquired)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(n_present > 0, hit / n_present * 100.0, 0.0)
    il = np.asarray(n_questions, dtype=np.float64) + 1.0
    return {"DDR": ddr, "DDP": ddp, "DDF1": ddf1, "GTPA": gtpa, "GTPA@1": gtpa1, "PER": per, "IL": il}


def mean_metrics(values: dict[str, np.ndarray]) -> dict[str, float]:
    """Exact means of per-patient arrays, in METRIC_KEYS order. No patients gives NaN (nothing to average)."""
    out = {}
    for key in METRIC_KEYS:
        column = values[key]
        out[key] = math.fsum(column.tolist()) / len(column) if len(column) else math.nan
    return out


def ddxplus_metrics(*args: Any, **kwargs: Any) -> dict[str, float]:
    """``mean_metrics(per_patient(...))``: the seven reported figures."""
    return mean_metrics(per_patient(*args, **kwargs))


def breakdown(values: dict[str, np.ndarray], groups: np.ndarray, labels: list[str]) -> dict[str, dict[str, float]]:
    """Means per group (e.g. per true pathology), with each group's patient count under ``n``."""
    groups = np.asarray(groups)
    out: dict[str, dict[str, float]] = {}
    for index, label in enumerate(labels):
        mask = groups == index
        if mask.any():
            out[label] = {"n": int(mask.sum()), **mean_metrics({k: v[mask] for k, v in values.items()})}
    return out
