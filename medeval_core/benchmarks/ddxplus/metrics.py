"""DDXPlus metrics with the per-patient semantics of design.md §3.2, vectorised over all patients at once.

Per patient (percentages 0-100):
- A predicted distribution is normalised to sum 1 first (``normalised_masses``): the official agents output a
  softmax, so a differential given in percent, or unnormalised scores, would otherwise be cut at the wrong place.
- GT and P are the ground-truth and predicted pathologies with mass strictly greater than ``THRESHOLD`` (0.01);
  explicit 0.0 entries and masses of exactly 0.01 are out.
- DDR = |GT ∩ P| / |GT|, DDP = |GT ∩ P| / |P|, DDF1 = 2·DDR·DDP / (DDR + DDP); each is 0 when its denominator is.
- GTPA = the true pathology is in P.
- GTPA@1 = the top of the prediction is the true pathology, and it is in P. The top is the largest mass. When
  several pathologies share it exactly, the top is what the official ``compute_metrics`` (mila-iqia/ddxplus,
  ``code/basd/metrics.py``, the same in ``code/aarlc``) computes, ``np.argsort(final_diags)[:, ::-1][:, 0]``, on
  the patient's masses laid out in the official pathology index (the position of each condition's key in the
  sorted keys of release_conditions.json, ``sim_utils.load_and_check_data``; ``tie_rank`` here) with zeros
  elsewhere (``official_top``). numpy's default argsort is not stable, so which tied pathology that expression
  picks depends on the other masses and on numpy's sort, not on a fixed rule (on the shared sample it is the
  higher index in 14 of 20 crafted two-way ties); evaluating the expression itself is the only way to agree with
  the official script. The listing order never matters. A predicted name outside the KB that shares the top wins
  (a tie with it is never credited; the official arrays cannot hold one).
- PER = |inquired ∩ present| / |present| over evidence roots (0 when nothing is present); ``inquired`` includes
  the initial evidence; a root is present when binary and listed, or non-binary with a non-default value.
- IL = questions asked + 1 (the initial evidence is the first turn).
Every reported figure is the mean of the per-patient values over all patients.

Layout, chosen so that 134,529 patients score in milliseconds:
- A differential is ``Entries``, built from flat per-patient listings and stored in jagged-diagonal form: patients
  sorted by decreasing number of entries, slot j holding every patient's j-th listed entry. Each slot is then a
  contiguous prefix of the sorted patients, so one pass over the slots, with whole-array operations only, gives
  each patient's set of kept pathologies (a bitmap: one uint64 word per 64 pathologies) and its top entry
  (a larger mass replaces it; patients whose top mass is shared are then settled by ``official_top``).
- |GT ∩ P|, |P| and "true pathology in P" are then bit counts and bit tests; root sets are bitmaps too
  (``pack_roots``), so PER is the bit count of an AND.
- The ground truth is fixed per patient file: ``GroundTruth.prepare`` thresholds it once (as loading derives the
  present roots once); ``per_patient`` only touches the predictions.
Columns at or beyond ``n_pathologies`` are predicted names outside the KB: they count in P, never in GT ∩ P.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

THRESHOLD = 0.01
SUM_TOLERANCE = 1e-6
"""A distribution whose masses sum to 1 within this is left as it is (dividing would move masses across the cut)."""
METRIC_KEYS = ("DDR", "DDP", "DDF1", "GTPA", "GTPA@1", "PER", "IL")
_BITS = 64


@dataclass(frozen=True)
class Entries:
    """Per-patient listings: patient i's entries are ``col[bounds[i]:bounds[i+1]]`` with their ``mass``, in
    listing order; a column appears at most once per patient. The jagged-diagonal copy (``order``, ``slot_col``,
    ``slot_mass``) is built here, once, like any other input array."""

    bounds: np.ndarray
    col: np.ndarray
    mass: np.ndarray
    order: np.ndarray = field(init=False, repr=False)
    slot_col: tuple[np.ndarray, ...] = field(init=False, repr=False)
    slot_mass: tuple[np.ndarray, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        bounds = np.asarray(self.bounds, dtype=np.int64)
        col = np.asarray(self.col, dtype=np.int64)
        mass = np.asarray(self.mass, dtype=np.float64)
        if bounds.ndim != 1 or len(bounds) < 1 or bounds[0] != 0 or bounds[-1] != len(col):
            raise ValueError("Entries.bounds must start at 0 and end at the number of entries.")
        if len(col) != len(mass):
            raise ValueError("Entries need col and mass arrays of one length.")
        counts = np.diff(bounds)
        if np.any(counts < 0):
            raise ValueError("Entries.bounds must be non-decreasing.")
        order = np.argsort(-counts, kind="stable")
        sorted_counts = counts[order]
        starts = bounds[:-1][order]
        slot_col, slot_mass = [], []
        for slot in range(int(sorted_counts[0]) if len(counts) else 0):
            width = int(np.count_nonzero(sorted_counts > slot))
            positions = starts[:width] + slot
            slot_col.append(col[positions])
            slot_mass.append(mass[positions])
        for name, value in (("bounds", bounds), ("col", col), ("mass", mass), ("order", order),
                            ("slot_col", tuple(slot_col)), ("slot_mass", tuple(slot_mass))):
            object.__setattr__(self, name, value)

    @property
    def n_patients(self) -> int:
        return len(self.bounds) - 1

    @classmethod
    def from_lists(cls, listings: Sequence[Sequence[tuple[int, float]]]) -> Entries:
        """From one list of (column, mass) per patient, in listing order."""
        counts = [len(listing) for listing in listings]
        return cls(
            bounds=np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]),
            col=np.asarray([c for listing in listings for c, _ in listing], dtype=np.int64),
            mass=np.asarray([m for listing in listings for _, m in listing], dtype=np.float64),
        )

    @classmethod
    def from_dense(cls, mass: np.ndarray) -> Entries:
        """From a (patients x columns) mass matrix, listed in column order; zero cells are left out."""
        mass = np.asarray(mass, dtype=np.float64)
        rows, cols = np.nonzero(mass)
        counts = np.bincount(rows, minlength=mass.shape[0])
        return cls(bounds=np.concatenate([[0], np.cumsum(counts)]), col=cols, mass=mass[rows, cols])


def pack_roots(matrix: Any) -> np.ndarray:
    """(patients, roots) bool matrix -> (words, patients) uint64 bitmaps (word-major, so that each word is one
    contiguous array)."""
    dense = np.asarray(matrix, dtype=bool)
    n, width = dense.shape
    words = max(1, -(-width // _BITS))
    packed = np.zeros((n, words * 8), dtype=np.uint8)
    packed[:, : -(-width // 8)] = np.packbits(dense, axis=1)
    return np.ascontiguousarray(packed.view(np.uint64).T)


def _popcount(bitmaps: np.ndarray) -> np.ndarray:
    """Per-patient bit counts of (words, patients) bitmaps."""
    total = np.bitwise_count(bitmaps[0]).astype(np.int64)
    for word in bitmaps[1:]:
        total += np.bitwise_count(word)
    return total


@dataclass(frozen=True)
class _Scan:
    kept_bits: np.ndarray
    """(words, patients) bitmaps of the kept KB columns."""
    kept_other: np.ndarray
    """Kept entries outside the KB, per patient."""
    top_col: np.ndarray
    """Column of the first listed entry with the largest mass; -1 without entries."""
    shared_top: np.ndarray
    """Whether another entry has that mass too (``_settle_ties`` decides those)."""


def official_top(final_diags: np.ndarray) -> np.ndarray:
    """The official top of each row of a (patients x pathologies) mass matrix in the official pathology index:
    mila-iqia/ddxplus ``compute_metrics``'s ``np.argsort(final_diags, axis=-1)[:, ::-1][:, 0]``, kept as written
    (numpy's default sort) because among equal masses only that expression gives the official pick."""
    return np.argsort(final_diags, axis=-1)[:, ::-1][:, 0]


def _scan(entries: Entries, n_pathologies: int, threshold: float) -> _Scan:
    """One pass over the jagged diagonals: kept-set bitmaps and the top entry of every patient."""
    n = entries.n_patients
    words = max(1, -(-n_pathologies // _BITS))
    highest = max((int(c.max()) for c in entries.slot_col), default=0)
    width = max(highest, n_pathologies) + 2
    # bit_tables[w][c]: column c's bit in word w; the last cell (where entries that are not kept look) is 0.
    bit_tables = []
    for word in range(words):
        table = np.zeros(width, dtype=np.uint64)
        first, last = word * _BITS, min(n_pathologies, (word + 1) * _BITS)
        table[first:last] = np.left_shift(np.uint64(1), np.arange(last - first, dtype=np.uint64))
        bit_tables.append(table)
    bits = np.zeros((words, n), dtype=np.uint64)
    other = np.zeros(n, dtype=np.int64)
    best = np.full(n, -np.inf)
    top = np.full(n, -1, dtype=np.int64)
    sharing = np.zeros(n, dtype=np.int64)
    for col, mass in zip(entries.slot_col, entries.slot_mass, strict=True):
        span = len(col)
        kept = mass > threshold
        lookup = np.where(kept, col, width - 1)
        for word in range(words):
            bits[word, :span] |= bit_tables[word].take(lookup)
        if highest >= n_pathologies:
            other[:span] += kept & (col >= n_pathologies)
        larger = mass > best[:span]
        equal = mass == best[:span]
        np.copyto(top[:span], col, where=larger)
        sharing[:span] = np.where(larger, 1, sharing[:span] + equal)
        np.maximum(best[:span], mass, out=best[:span])
    # Back from the jagged-diagonal order to patient order.
    out_bits = np.empty_like(bits)
    out_bits[:, entries.order] = bits
    out_other = np.empty_like(other)
    out_other[entries.order] = other
    out_top = np.empty_like(top)
    out_top[entries.order] = top
    out_sharing = np.empty_like(sharing)
    out_sharing[entries.order] = sharing
    return _Scan(kept_bits=out_bits, kept_other=out_other, top_col=out_top, shared_top=out_sharing > 1)


def _settle_ties(entries: Entries, patients: np.ndarray, top: np.ndarray, n_pathologies: int,
                 tie_rank: np.ndarray | None) -> None:
    """Replaces ``top`` of ``patients`` (whose top mass is shared) by the official top, or by a name outside the
    KB that shares it. ``tie_rank``: each KB column's official index (None: the column order)."""
    if not len(patients):
        return
    rank = np.arange(n_pathologies) if tie_rank is None else tie_rank
    column_of_rank = np.argsort(rank)
    dense = np.zeros((len(patients), n_pathologies))
    outside = np.full(len(patients), -1, dtype=np.int64)
    for row, patient in enumerate(patients):
        span = slice(entries.bounds[patient], entries.bounds[patient + 1])
        col, mass = entries.col[span], entries.mass[span]
        at_top = col[mass == mass.max()]
        beyond = at_top[at_top >= n_pathologies]
        if len(beyond):
            outside[row] = beyond[0]
        inside = col < n_pathologies
        dense[row, rank[col[inside]]] = mass[inside]
    top[patients] = np.where(outside >= 0, outside, column_of_rank[official_top(dense)])


def _percent(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole * 100, and 0 where whole is 0 (the recipe's convention for an empty set)."""
    return np.divide(part, whole, out=np.zeros(len(part)), where=whole > 0) * 100.0


def _bit_test(bitmaps: np.ndarray, column: np.ndarray) -> np.ndarray:
    words = bitmaps[0] if len(bitmaps) == 1 else bitmaps[column // _BITS, np.arange(len(column))]
    return ((words >> (column % _BITS).astype(np.uint64)) & np.uint64(1)).astype(bool)


@dataclass(frozen=True)
class GroundTruth:
    """What the metrics need from a patient file, thresholded once: GT sets, true pathologies, present roots."""

    n_pathologies: int
    pathology: np.ndarray
    gt_bits: np.ndarray
    n_gt: np.ndarray
    present_bits: np.ndarray
    n_present: np.ndarray
    threshold: float
    tie_rank: np.ndarray | None
    """Each KB column's official rank among equal top masses (``KnowledgeBase.tie_rank``); None: column order."""

    @classmethod
    def prepare(cls, n_pathologies: int, gt: Entries, pathology: np.ndarray, present: Any,
                threshold: float = THRESHOLD, tie_rank: np.ndarray | None = None) -> GroundTruth:
        pathology = np.asarray(pathology, dtype=np.int64)
        if gt.n_patients != len(pathology):
            raise ValueError(f"The ground truth lists {gt.n_patients} patients, the pathologies {len(pathology)}.")
        gt_bits = _scan(gt, n_pathologies, threshold).kept_bits
        present_bits = pack_roots(present)
        return cls(n_pathologies=n_pathologies, pathology=pathology, gt_bits=gt_bits,
                   n_gt=_popcount(gt_bits).astype(np.float64), present_bits=present_bits,
                   n_present=_popcount(present_bits).astype(np.float64), threshold=threshold,
                   tie_rank=None if tie_rank is None else np.asarray(tie_rank, dtype=np.int64))


def normalised_masses(bounds: np.ndarray, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each patient's masses (patient i's are ``mass[bounds[i]:bounds[i+1]]``) divided by their sum where that sum
    is positive and not 1, and the (patients,) mask of those rescaled."""
    counts: np.ndarray = np.diff(np.asarray(bounds, dtype=np.int64)).astype(np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    totals = np.bincount(owner, weights=mass, minlength=len(counts))
    rescaled = (totals > 0) & (np.abs(totals - 1.0) > SUM_TOLERANCE)
    scale = np.where(rescaled, totals, 1.0)
    return np.where(rescaled[owner], mass / scale[owner], mass), rescaled


def per_patient(truth: GroundTruth, pred: Entries, inquired: Any, n_questions: np.ndarray) -> dict[str, np.ndarray]:
    """Per-patient metric arrays (one value per patient), percentages except IL.

    pred: the predicted differentials; inquired: the inquired roots (initial evidence included), as
    ``pack_roots`` bitmaps or a (patients, roots) bool matrix; n_questions: (patients,) questions asked.
    """
    n = len(truth.pathology)
    if pred.n_patients != n:
        raise ValueError(f"The predictions cover {pred.n_patients} patients, the ground truth {n}.")
    scan = _scan(pred, truth.n_pathologies, truth.threshold)
    _settle_ties(pred, np.flatnonzero(scan.shared_top), scan.top_col, truth.n_pathologies, truth.tie_rank)
    n_pred = (_popcount(scan.kept_bits) + scan.kept_other).astype(np.float64)
    tp = _popcount(scan.kept_bits & truth.gt_bits).astype(np.float64)
    ddr = _percent(tp, truth.n_gt)
    ddp = _percent(tp, n_pred)
    ddf1 = np.divide(2.0 * ddr * ddp, ddr + ddp, out=np.zeros(n), where=ddr + ddp > 0)
    in_p = _bit_test(scan.kept_bits, truth.pathology)
    gtpa = np.where(in_p, 100.0, 0.0)
    gtpa1 = np.where(in_p & (scan.top_col == truth.pathology), 100.0, 0.0)
    inquired_bits = inquired if isinstance(inquired, np.ndarray) and inquired.dtype == np.uint64 else pack_roots(
        inquired)
    per = _percent(_popcount(inquired_bits & truth.present_bits).astype(np.float64), truth.n_present)
    il = np.asarray(n_questions, dtype=np.float64) + 1.0
    return {"DDR": ddr, "DDP": ddp, "DDF1": ddf1, "GTPA": gtpa, "GTPA@1": gtpa1, "PER": per, "IL": il}


def patient_metrics(
    gt: Sequence[tuple[Any, float]],
    pathology: Any,
    pred: Sequence[tuple[Any, float]],
    present: set[Any],
    inquired: set[Any],
    n_questions: int,
    tie_rank: Callable[[Any], int | None],
    n_pathologies: int,
    threshold: float = THRESHOLD,
) -> dict[str, float]:
    """The same metrics for one patient, in plain Python (a consultation's own score costs microseconds).

    gt, pred: (pathology, mass) in listing order; present, inquired: root sets, the initial evidence in
    ``inquired``; tie_rank: a predicted name's official pathology index, None outside the KB
    (``KnowledgeBase.tie_rank_of``), which with ``n_pathologies`` settles a shared top as ``official_top`` does.
    ``pred`` is normalised to sum 1 as ``normalised_masses`` does.
    """
    total = sum(mass for _, mass in pred)
    if total > 0 and abs(total - 1.0) > SUM_TOLERANCE:
        pred = [(name, mass / total) for name, mass in pred]
    gt_set = {name for name, mass in gt if mass > threshold}
    pred_set = {name for name, mass in pred if mass > threshold}
    tp = len(gt_set & pred_set)
    ddr = tp / len(gt_set) * 100.0 if gt_set else 0.0
    ddp = tp / len(pred_set) * 100.0 if pred_set else 0.0
    ddf1 = 2.0 * ddr * ddp / (ddr + ddp) if ddr + ddp > 0 else 0.0
    top = None
    if pred:
        best = max(mass for _, mass in pred)
        at_top = [name for name, mass in pred if mass == best]
        outside = [name for name in at_top if tie_rank(name) is None]
        if len(at_top) == 1 or outside:
            top = (outside or at_top)[0]
        else:
            row = np.zeros((1, n_pathologies))
            index_of = {}
            for name, mass in pred:
                if (index := tie_rank(name)) is not None:
                    row[0, index], index_of[index] = mass, name
            top = index_of.get(int(official_top(row)[0]))  # None: an unlisted zero mass (never in P)
    in_p = pathology in pred_set
    per = len(present & inquired) / len(present) * 100.0 if present else 0.0
    return {"DDR": ddr, "DDP": ddp, "DDF1": ddf1, "GTPA": 100.0 if in_p else 0.0,
            "GTPA@1": 100.0 if in_p and top == pathology else 0.0, "PER": per, "IL": n_questions + 1.0}


def mean_metrics(values: dict[str, np.ndarray]) -> dict[str, float]:
    """Means of per-patient arrays (pairwise summation), in METRIC_KEYS order; NaN when there are no patients."""
    return {key: float(np.sum(values[key]) / len(values[key])) if len(values[key]) else float("nan")
            for key in METRIC_KEYS}


def breakdown(values: dict[str, np.ndarray], groups: np.ndarray, labels: list[str]) -> dict[str, dict[str, float]]:
    """Means per group (e.g. per true pathology), with each group's patient count under ``n``."""
    groups = np.asarray(groups)
    out: dict[str, dict[str, float]] = {}
    for index, label in enumerate(labels):
        mask = groups == index
        if mask.any():
            out[label] = {"n": int(mask.sum()), **mean_metrics({k: v[mask] for k, v in values.items()})}
    return out
