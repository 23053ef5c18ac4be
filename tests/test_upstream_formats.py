"""Files in upstream harnesses' own layouts, produced or read by the upstream code (tests/data/upstream/*/README.md
say how), read by medeval's commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ddxplus_fixtures import sample_csv

UPSTREAM = Path(__file__).parent / "data" / "upstream"


def _cli(*args: str, env_db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medeval_core", *args], cwd=UPSTREAM.parents[2], capture_output=True,
                          text=True, env={**os.environ, "MEDEVAL_DB_URL": env_db}, timeout=300, check=False)


def test_ddxplus_predictions_score_as_the_official_compute_metrics(tmp_path, isolated_store):
    # The first 60 patients of the shared sample, as make_official_metrics.py read them.
    lines = sample_csv().read_text(encoding="utf-8").splitlines(keepends=True)
    patients = tmp_path / "patients.csv"
    patients.write_text("".join(lines[:61]), encoding="utf-8")
    done = _cli("score", "ddxplus", "--patients", str(patients), "--predictions",
                str(UPSTREAM / "ddxplus" / "predictions.jsonl"), "--json", env_db=isolated_store)
    assert done.returncode == 0, done.stderr
    ours = json.loads(done.stdout)
    official = json.loads((UPSTREAM / "ddxplus" / "official_metrics.json").read_text(encoding="utf-8"))
    assert set(official) == {"GTPA", "GTPA@1", "DDR", "DDP", "DDF1", "IL"}
    for key, value in official.items():
        expected = value if key == "IL" else value * 100
        # 1e-6: the official F1 adds 1e-10 to its denominator.
        assert ours[key] == pytest.approx(expected, abs=1e-6), key
    assert 0 < ours["GTPA@1"] < 100  # the ties decide part of it


def _digest(value) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def test_agentclinic_cases_carry_the_fields_agentclinics_own_loader_gives_its_agents(tmp_path, data_dir):
    from medeval_core.benchmarks.dynamicare.cases import import_agentclinic, load_records
    from medeval_core.vocabularies.icd9 import Icd9Mapper

    upstream = json.loads((UPSTREAM / "agentclinic" / "medqa_field_digests.json").read_text(encoding="utf-8"))
    assert upstream["loader"] == "ScenarioLoaderMedQA" and len(upstream["scenarios"]) == 107
    source = data_dir / "agentclinic" / "agentclinic_medqa.jsonl"
    out = tmp_path / "records.jsonl"
    report = import_agentclinic([("ac", source)], out, Icd9Mapper())
    records = {record.case_id: record for record in load_records(out).records}
    # A diagnosis the ICD-9 mapper refuses skips its case with the reason (line = scenario + 1); every other case
    # is written, and each one written carries exactly what AgentClinic's loader gives its agents.
    skipped_lines = {skip.line for skip in report.skipped}
    assert report.written == len(records) and report.written + len(skipped_lines) == 107
    assert all("maps to no ICD-9 code" in skip.reason for skip in report.skipped)
    for row in upstream["scenarios"]:
        if row["scenario"] + 1 in skipped_lines:
            continue
        record = records[f"ac-{row['scenario'] + 1}"]
        # Patient agent: Patient_Actor only; doctor agent: Objective_for_Doctor; measurement agent: the
        # examination findings with the test results under "tests" (ScenarioMedQA.exam_information).
        assert _digest(record.record["Patient_Actor"]) == row["patient_information"]
        assert _digest(record.objective) == row["examiner_information"]
        measured = {**record.measurements["Physical_Examination_Findings"],
                    "tests": record.measurements["Test_Results"]}
        assert _digest(measured) == row["exam_information"]
        assert _digest(record.diagnosis) == row["diagnosis_information"]
        assert set(record.record) == {"Patient_Actor"}
