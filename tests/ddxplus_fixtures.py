"""Shared helpers for the DDXPlus tests: where the data is, and small patient files written on the fly."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

COLUMNS = ["AGE", "DIFFERENTIAL_DIAGNOSIS", "SEX", "PATHOLOGY", "EVIDENCES", "INITIAL_EVIDENCE"]


def ddxplus_dir() -> Path:
    root = os.environ.get("MEDEVAL_DATA_DIR")
    if not root or not (Path(root) / "ddxplus" / "release_evidences.json").is_file():
        pytest.fail("MEDEVAL_DATA_DIR does not point at the shared data (ddxplus/ missing); export "
                    "MEDEVAL_DATA_DIR=../shared/data")
    return Path(root) / "ddxplus"


def sample_csv() -> Path:
    return ddxplus_dir() / "patients_sample_en.csv"


def write_patients(path: Path, rows: Sequence[Sequence[object]]) -> Path:
    """A patients CSV in the official layout; list cells are given as Python objects (written with repr)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([cell if isinstance(cell, str) else repr(cell) for cell in row])
    return path
