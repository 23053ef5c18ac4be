"""Scoring DDXPlus predictions made elsewhere (``score ddxplus``) or by a run, through the vectorised metrics.

Prediction file: JSON Lines, one object per patient::

    {"index": 0, "differential": {"URTI": 0.7, "Bronchitis": 0.3}, "inquired": ["E_91", "E_53"]}

``index`` is the patient's 0-based row in the patients file; ``differential`` maps pathology names (KB key,
English or French name) to masses, or is a list of ``[name, mass]`` pairs; ``inquired`` lists the root asked at
each turn in order (repeats are turns; the initial evidence only when asked again; ``E_54_@_V_161`` counts as
its root ``E_54``). A missing ``inquired`` means no question was asked.

Decisions, each reported as a warning:
- a patient without a prediction line counts as an empty prediction with no questions (IL = 1), so that the
  means stay over all patients;
- a predicted name outside the KB counts in P (it lowers DDP) and never matches the ground truth;
- an inquired code outside the KB counts as a turn and is never a positive evidence;
- a line for a row that the loader skipped is ignored.
A line that is not valid JSON, lacks ``index``/``differential``, repeats an index, or gives a non-numeric mass
is an error naming the line: scores from a half-read file would mislead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase, root_of
from medeval_core.benchmarks.ddxplus.patients import PatientSet
from medeval_core.metrics import ddxplus as ddx_metrics

REFERENCE_ROWS = {
    # Published test-set figures (134,529 patients), design.md §3.2.
    "AARLC": {"DDR": 97.73, "DDP": 69.53, "DDF1": 78.24, "GTPA": 99.92, "GTPA@1": 75.39, "PER": 54.55, "IL": 25.75},
    "BASD": {"DDR": 85.03, "DDP": 88.34, "DDF1": 83.69, "GTPA": 99.30, "GTPA@1": 67.71, "PER": 88.18, "IL": 17.86},
}


class PredictionFileError(ValueError):
    """A prediction file that cannot be scored; the message names the line and what to fix."""


@dataclass
class Predictions:
    """Predictions aligned with a PatientSet (row i is patient i), as the metric arrays need them."""

    entries: ddx_metrics.Entries
    inquired: np.ndarray
    """Inquired roots (initial evidence included) as ``pack_roots`` bitmaps."""
    n_questions: np.ndarray
    has_line: np.ndarray
    extra_names: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class ScoreReport:
    metrics: dict[str, float]
    n_patients: int
    per_patient: dict[str, np.ndarray]
    per_pathology: dict[str, dict[str, float]]
    warnings: list[str]


def _mass(value: Any, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PredictionFileError(f"{where}: the mass of {name!r} is {value!r}; masses must be finite numbers.")
    return float(value)


def _entries(differential: Any, where: str) -> list[tuple[str, float]]:
    if isinstance(differential, dict):
        return [(str(name), _mass(mass, where, name)) for name, mass in differential.items()]
    if isinstance(differential, list):
        pairs = []
        for entry in differential:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
                raise PredictionFileError(f"{where}: a differential list must hold [name, mass] pairs.")
            pairs.append((entry[0], _mass(entry[1], where, entry[0])))
        if len({name for name, _ in pairs}) != len(pairs):
            raise PredictionFileError(f"{where}: the differential lists a pathology twice.")
        return pairs
    raise PredictionFileError(f"{where}: 'differential' must be an object of name -> mass (or [name, mass] pairs).")


class PredictionBuilder:
    """Collects per-patient predictions into arrays; used for prediction files and for finished runs alike."""

    def __init__(self, patients: PatientSet) -> None:
        self.patients = patients
        self.kb: KnowledgeBase = patients.kb
        n = len(patients)
        self.has_line = np.zeros(n, dtype=bool)
        self.n_questions = np.zeros(n, dtype=np.int64)
        self.inquired = np.zeros((n, self.kb.n_roots), dtype=bool)
        self._rows: list[int] = []
        self._cols: list[int] = []
        self._masses: list[float] = []
        self.extra: dict[str, int] = {}
        self.unknown_names: set[str] = set()
        self.unknown_codes: set[str] = set()

    def add(self, position: int, entries: Iterable[tuple[str, float]], inquired: Iterable[str]) -> None:
        """Record one patient's prediction. Raises ValueError for a second prediction or a pathology named twice
        (e.g. by its English and its French name)."""
        k = self.kb.n_pathologies
        if self.has_line[position]:
            raise ValueError(f"patient {int(self.patients.rows[position])} already has a prediction")
        seen: set[int] = set()
        for name, mass in entries:
            column = self.kb.pathology_index(name)
            if column is None:
                self.unknown_names.add(name)
                column = k + self.extra.setdefault(name, len(self.extra))
            if column in seen:
                raise ValueError(f"the differential names {self.kb.pathology_names[column] if column < k else name!r} "
                                 "twice")
            seen.add(column)
            self._rows.append(position)
            self._cols.append(column)
            self._masses.append(mass)
        self.has_line[position] = True
        self.inquired[position, self.patients.initial_root[position]] = True
        count = 0
        for code in inquired:
            count += 1
            root = self.kb.root_index.get(root_of(code))
            if root is None:
                self.unknown_codes.add(code)
            else:
                self.inquired[position, root] = True
        self.n_questions[position] = count

    def build(self, warnings: list[str] | None = None) -> Predictions:
        rows = np.asarray(self._rows, dtype=np.int64)
        # Group by patient; the stable sort keeps each patient's listing order.
        grouped = np.argsort(rows, kind="stable")
        entries = ddx_metrics.Entries(
            bounds=np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(self.patients)))]),
            col=np.asarray(self._cols, dtype=np.int64)[grouped],
            mass=np.asarray(self._masses, dtype=np.float64)[grouped],
        )
        # Rows never given stay at their defaults: no mass, and the initial evidence as the only inquired root.
        missing = np.flatnonzero(~self.has_line)
        self.inquired[missing, self.patients.initial_root[missing]] = True
        notes = list(warnings or [])
        if missing.size:
            shown = ", ".join(str(int(self.patients.rows[i])) for i in missing[:10])
            more = "" if missing.size <= 10 else f" and {missing.size - 10} more"
            notes.append(f"{missing.size} patient(s) have no prediction line (rows {shown}{more}); each counts as "
                         "an empty differential with no questions (IL = 1).")
        if self.unknown_names:
            notes.append(f"{len(self.unknown_names)} predicted name(s) are not pathologies of the KB "
                         f"({', '.join(sorted(self.unknown_names)[:5])}); they count in the predicted set only.")
        if self.unknown_codes:
            notes.append(f"{len(self.unknown_codes)} inquired code(s) are not KB evidences "
                         f"({', '.join(sorted(self.unknown_codes)[:5])}); they count as turns only.")
        return Predictions(entries=entries, inquired=ddx_metrics.pack_roots(self.inquired),
                           n_questions=self.n_questions,
                           has_line=self.has_line, extra_names=list(self.extra), warnings=notes)


def read_predictions(path: str | Path, patients: PatientSet) -> Predictions:
    path = Path(path)
    if not path.is_file():
        raise PredictionFileError(f"{path} does not exist; give a JSON Lines file with one prediction per patient.")
    builder = PredictionBuilder(patients)
    total_rows = patients.report.total_rows
    position = patients.position
    seen: set[int] = set()
    skipped_rows: list[int] = []
    with path.open(encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PredictionFileError(f"{where} is not valid JSON ({exc.msg}).") from None
            if not isinstance(record, dict) or "index" not in record or "differential" not in record:
                raise PredictionFileError(f"{where} needs an object with 'index' and 'differential'.")
            index = record["index"]
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < total_rows:
                raise PredictionFileError(
                    f"{where}: index {index!r} is not a row of the patients file (0 to {total_rows - 1})."
                )
            if index in seen:
                raise PredictionFileError(f"{where}: index {index} already has a prediction; keep one line each.")
            seen.add(index)
            inquired = record.get("inquired", [])
            if not isinstance(inquired, list) or not all(isinstance(code, str) for code in inquired):
                raise PredictionFileError(f"{where}: 'inquired' must be a list of evidence codes.")
            entries = _entries(record["differential"], where)
            if index not in position:
                skipped_rows.append(index)
                continue
            try:
                builder.add(position[index], entries, inquired)
            except ValueError as exc:
                raise PredictionFileError(f"{where}: {exc}.") from None
    warnings = []
    if skipped_rows:
        warnings.append(f"{len(skipped_rows)} prediction line(s) are for rows the loader skipped; they are ignored.")
    return builder.build(warnings)


def score(patients: PatientSet, predictions: Predictions) -> ScoreReport:
    values = ddx_metrics.per_patient(patients.truth, predictions.entries, predictions.inquired,
                                     predictions.n_questions)
    return ScoreReport(
        metrics=ddx_metrics.mean_metrics(values),
        n_patients=len(patients),
        per_patient=values,
        per_pathology=ddx_metrics.breakdown(values, patients.pathology, patients.kb.pathology_names),
        warnings=predictions.warnings,
    )


def format_table(rows: dict[str, dict[str, float]]) -> str:
    """Metrics as a fixed-width table, one labelled row each (the reference rows print beside a run's)."""
    header = f"{'':<12}" + "".join(f"{key:>9}" for key in ddx_metrics.METRIC_KEYS)
    lines = [header]
    for label, metrics in rows.items():
        lines.append(f"{label:<12}" + "".join(f"{metrics[key]:>9.2f}" for key in ddx_metrics.METRIC_KEYS))
    return "\n".join(lines)
