"""Shared helpers for the DDXPlus tests: where the data is, and small patient files written on the fly."""

from __future__ import annotations

import csv
import os
import random
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import numpy as np
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


def hard_number_texts(seed: int, count: int) -> list[str]:
    """Decimal numbers that only an exactly rounding parser reads as ``float`` does: mantissas up to 30 digits,
    exponents out of range either way, subnormals, -0, and numbers exactly halfway between two doubles."""
    rng = random.Random(seed)
    texts = ["-0", "0", "1e400", "-1e400", "4.9e-324", "2.4703282292062328e-324", "2.4703282292062327e-324",
             "1.7976931348623159e308", "1.7976931348623158e308", "9007199254740993", "0.010000000000000000208",
             "123456789012345678901234567890", "2.2250738585072011e-308", "1e0000000000000000005",
             "1e-99999999999999999999", "0e99999999999999999999"]
    for _ in range(count):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30)))
        text = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        if rng.random() < 0.5:
            text += f"{rng.choice('eE')}{rng.choice(['', '-', '+'])}{rng.randint(0, 340)}"
        texts.append(("-" if rng.random() < 0.3 else "") + text)
    for _ in range(count // 40):
        bits = rng.getrandbits(62) | (1 << 52)
        low = float(np.frombuffer(np.uint64(bits).tobytes(), dtype=np.float64)[0])
        high = float(np.nextafter(low, np.inf))
        texts.append(f"{(Decimal(low) + Decimal(high)) / 2:e}" if low < 1e-30 or low > 1e30
                     else format((Decimal(low) + Decimal(high)) / 2, "f"))
    return texts
