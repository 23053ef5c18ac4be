"""The MEDIQ release as a data source: the iMedQA and iCraft-MD files (the official release from the authors'
GitHub repository, or the shared sample), and the plan ``data fetch mediq`` downloads them by."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from medeval_core.data import DataSource, Fetcher, FetchPlan, Planned, Requirement, require

Dataset = Literal["imedqa", "icraftmd"]

SOURCE = DataSource(
    name="mediq",
    folder="mediq",
    title="MEDIQ (iMedQA, iCraft-MD)",
    description="Clinical vignettes split into atomic patient facts, for interactive question asking.",
    licence="CC BY 4.0 (Li et al., NeurIPS 2024)",
    required=(
        Requirement(label="iMedQA (all_dev_good.jsonl or imedqa_sample200.jsonl)",
                    patterns=("all_dev_good.jsonl", "imedqa_sample200.jsonl")),
        Requirement(label="iCraft-MD (all_craft_md.jsonl or icraftmd.jsonl)",
                    patterns=("all_craft_md.jsonl", "icraftmd.jsonl")),
    ),
    fetch=FetchPlan(name="mediq", plan=f"{__name__}:fetch_release"),
)

_FILES: dict[Dataset, tuple[str, str]] = {
    "imedqa": ("all_dev_good.jsonl", "imedqa_sample200.jsonl"),
    "icraftmd": ("all_craft_md.jsonl", "icraftmd.jsonl"),
}
"""Each dataset's official file, then the shared sample's (the protocol's 200 iMedQA cases)."""


def fetch_release(fetcher: Fetcher, options: None) -> Planned:
    return fetcher.github_files("stellalisy/mediQ", "main", {f"data/{official}": official
                                                             for official, _ in _FILES.values()}, "CC BY 4.0")


class MediqPaths(BaseModel):
    """One MEDIQ dataset file: the official release or the shared sample (the protocol's 200 iMedQA cases)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: Dataset
    path: Path
    release: Literal["official", "sample"]


def mediq_paths(data_dir: Path, dataset: Dataset) -> MediqPaths:
    official, sample = _FILES[dataset]
    path = require(SOURCE, data_dir, f"{official} (or {sample})", (official, sample))
    return MediqPaths(dataset=dataset, path=path, release="official" if path.name == official else "sample")
