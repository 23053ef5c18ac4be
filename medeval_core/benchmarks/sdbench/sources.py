"""Sequential diagnosis's own data sources: the test price table, and the SDBench cases (not public; runs use the
AgentClinic cases, a source the open-diagnosis benchmark declares)."""

from __future__ import annotations

from pathlib import Path

from medeval_core.data import DataSource, Requirement, require

PRICES = "cms_prices.csv"

COSTING = DataSource(
    name="costing",
    folder="costing",
    title="Test prices",
    description="Price table for ordered tests; without it, test costs are estimates marked as such.",
    licence="CMS fee schedules (US government work, public domain)",
    required=(Requirement(label=PRICES, patterns=(PRICES,)),),
    manual_instructions=f"Build {PRICES} from the CMS Clinical Laboratory Fee Schedule and Physician Fee Schedule "
    "files, or supply a charge-master CSV under that name with the columns code, kind, national_price_usd, "
    "source_file, year.",
)

CASES = DataSource(
    name="sdbench",
    folder="sdbench",
    title="SDBench (NEJM CPC cases)",
    description="The sequential-diagnosis benchmark cases of the SDBench paper.",
    licence="not public",
    required=(Requirement(label="SDBench case files", patterns=("*",)),),
    manual_instructions="SDBench's NEJM cases are not public and cannot be downloaded; sequential-diagnosis "
    "runs use the AgentClinic cases (`python -m medeval_core data fetch agentclinic`). If you hold the "
    "cases under an agreement with their owners, put them in this folder.",
)


def cms_prices_path(data_dir: Path) -> Path:
    return require(COSTING, data_dir, PRICES, (PRICES,))
