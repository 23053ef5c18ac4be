"""The DDXPlus release as a data source: the files a loader needs (the knowledge base and the patients of the
official release, or the shared sample of test patients) and the plan ``data fetch ddxplus`` downloads it by (the
figshare article, its sizes and md5 sums checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from medeval_core.data import DataSource, Fetcher, FetchPlan, Planned, Requirement, first_match, missing, require

Split = Literal["train", "validate", "test"]

FIGSHARE_ARTICLE = 22687585
RELEASE_FILES = (
    "release_evidences.json",
    "release_conditions.json",
    "release_train_patients.zip",
    "release_validate_patients.zip",
    "release_test_patients.zip",
)
SAMPLE_PATIENTS = "patients_sample_en.csv"

SOURCE = DataSource(
    name="ddxplus",
    folder="ddxplus",
    title="DDXPlus (English)",
    description="Synthetic patients with evidences, pathology and differential; knowledge base of "
    "223 evidences and 49 pathologies.",
    licence="CC-BY 4.0 (Mila / Dialogue Health Technologies)",
    required=(
        Requirement(label="release_evidences.json", patterns=("release_evidences.json",)),
        Requirement(label="release_conditions.json", patterns=("release_conditions.json",)),
        Requirement(
            label=f"patients (release_{{train,validate,test}}_patients.zip or .csv, or {SAMPLE_PATIENTS})",
            patterns=("release_*_patients.csv", "release_*_patients.zip", SAMPLE_PATIENTS),
        ),
    ),
    fetch=FetchPlan(name="ddxplus", plan=f"{__name__}:fetch_release"),
)


def default_kb_dir(data_dir: Path) -> Path:
    """Where the KB files live under the data folder (``MEDEVAL_DATA_DIR``)."""
    return SOURCE.folder_in(data_dir)


def fetch_release(fetcher: Fetcher, options: None) -> Planned:
    return fetcher.figshare_article(FIGSHARE_ARTICLE, RELEASE_FILES, licence="CC-BY 4.0")


class DdxplusPaths(BaseModel):
    """The DDXPlus knowledge base and whichever patient files are present (official release or the sample)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    folder: Path
    evidences: Path
    conditions: Path
    patients: dict[Split, Path]
    sample_patients: Path | None

    def patients_file(self, split: Split = "test") -> Path:
        """The official patients of ``split``; for the test split, the shared sample when that is all there is."""
        if split in self.patients:
            return self.patients[split]
        if split == "test" and self.sample_patients is not None:
            return self.sample_patients
        raise missing(SOURCE, f"release_{split}_patients.zip", self.folder)


def ddxplus_paths(data_dir: Path) -> DdxplusPaths:
    folder = SOURCE.folder_in(data_dir)
    evidences = require(SOURCE, data_dir, "release_evidences.json", ("release_evidences.json",))
    conditions = require(SOURCE, data_dir, "release_conditions.json", ("release_conditions.json",))
    patients: dict[Split, Path] = {}
    for split in ("train", "validate", "test"):
        # An unpacked CSV reads faster than the zip it came from.
        if found := first_match(folder, (f"release_{split}_patients.csv", f"release_{split}_patients.zip")):
            patients[split] = found[0]
    sample = folder / SAMPLE_PATIENTS
    sample_patients = sample if sample.is_file() else None
    if not patients and sample_patients is None:
        raise missing(SOURCE, f"a patients file (release_test_patients.zip or {SAMPLE_PATIENTS})", folder)
    return DdxplusPaths(folder=folder, evidences=evidences, conditions=conditions, patients=patients,
                        sample_patients=sample_patients)
