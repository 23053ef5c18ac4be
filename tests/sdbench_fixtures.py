"""Shared helpers of the SDBench tests: the shared AgentClinic cases converted once, small case and price files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medeval_core.benchmarks.sdbench.cases import import_agentclinic
from medeval_core.benchmarks.sdbench.catalog import load_catalog

AGENTCLINIC = "agentclinic/agentclinic_medqa.jsonl"


def agentclinic_file(data_dir: Path) -> Path:
    return data_dir / AGENTCLINIC


@pytest.fixture(scope="module")
def catalog():
    """The test catalogue, loaded once per module that imports this fixture."""
    return load_catalog()


@pytest.fixture(scope="module")
def shared_cases(data_dir):
    """The 107 shared AgentClinic cases, converted once per module that imports this fixture."""
    return import_agentclinic(agentclinic_file(data_dir)).cases


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows),
                    encoding="utf-8")
    return path


def case_row(case_id: str = "c1", diagnosis: str = "Myasthenia gravis", **extra: Any) -> dict[str, Any]:
    row = {
        "id": case_id, "split": "test",
        "case_summary": "A 35-year-old woman presents with double vision.",
        "full_text": "35-year-old woman with double vision and fatigable weakness. AChR antibodies positive.",
        "final_diagnosis": diagnosis,
        "findings": {
            "history": {"Social history": "Non-smoker. Works as a designer.",
                        "Past medical history": "No significant past medical history."},
            "examination": {"Vital Signs": "Temperature: 36.6 C\nHeart Rate: 72 bpm"},
            "tests": {"Acetylcholine Receptor Antibodies": "Present (elevated)",
                      "Chest CT": "Normal, no thymoma, consistent with myasthenia gravis without thymoma.",
                      "Complete Blood Count": "WBC: 7,500/mm3\nHemoglobin: 13.5 g/dL\nPlatelets: 250,000/mm3"},
        },
        "provenance": {"source": "test fixture"},
    }
    row.update(extra)
    return row


def replay_line(case_id: str, *actions: tuple[str, str]) -> dict[str, Any]:
    return {"case_id": case_id, "actions": [{"kind": kind, "text": text} for kind, text in actions]}
