"""The AgentClinic MedQA cases as a data source (open diagnosis reads them; sequential diagnosis names this source
too), and the plan ``data fetch agentclinic`` downloads them by (the authors' GitHub repository)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from medeval_core.data import DataSource, Fetcher, FetchPlan, Planned, Requirement, require

MEDQA = "agentclinic_medqa.jsonl"
MEDQA_EXTENDED = "agentclinic_medqa_extended.jsonl"

AGENTCLINIC = DataSource(
    name="agentclinic",
    folder="agentclinic",
    title="AgentClinic MedQA",
    description="OSCE-style cases with history, examination and test results; the bundled "
    "sequential-diagnosis cases.",
    licence="MIT (Samuel Schmidgall)",
    required=(Requirement(label=MEDQA, patterns=(MEDQA,)),),
    optional=(Requirement(label=MEDQA_EXTENDED, patterns=(MEDQA_EXTENDED,)),),
    fetch=FetchPlan(name="agentclinic", plan=f"{__name__}:fetch_release"),
)


def fetch_release(fetcher: Fetcher, options: None) -> Planned:
    files = (MEDQA, MEDQA_EXTENDED, "LICENSE.txt")
    return fetcher.github_files("SamuelSchmidgall/AgentClinic", "main", {name: name for name in files}, "MIT")


class AgentClinicPaths(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    medqa: Path
    medqa_extended: Path | None


def agentclinic_paths(data_dir: Path) -> AgentClinicPaths:
    medqa = require(AGENTCLINIC, data_dir, MEDQA, (MEDQA,))
    extended = medqa.with_name(MEDQA_EXTENDED)
    return AgentClinicPaths(medqa=medqa, medqa_extended=extended if extended.is_file() else None)
