"""DDXPlus (Fansi Tchango et al., NeurIPS 2022): KB, patients, simulator, agents, runs. See design.md §3.2."""

from __future__ import annotations

from pathlib import Path

DATA_SUBDIR = "ddxplus"
SAMPLE_PATIENTS = "patients_sample_en.csv"


def default_kb_dir(data_dir: Path) -> Path:
    """Where the KB files live under the data folder (``MEDEVAL_DATA_DIR``)."""
    return Path(data_dir) / DATA_SUBDIR
