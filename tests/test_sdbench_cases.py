"""SDBench case files: the AgentClinic importer on the shared cases and on malformed rows, the case format's
validation (line and field named), and `cases import` writing nothing half-done."""

from __future__ import annotations

import json
import re

import pytest

from medeval_core.benchmarks.sdbench.cases import (
    CaseFileError,
    import_agentclinic,
    load_any,
    load_cases,
    read_case_rows,
)
from medeval_core.cli import main
from tests.sdbench_fixtures import agentclinic_file, case_row, write_jsonl


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3}


def leaf_texts(node: dict) -> list[str]:
    found: list[str] = []
    for value in node.values():
        if isinstance(value, dict):
            found += leaf_texts(value)
        elif str(value).strip():
            found.append("; ".join(map(str, value)) if isinstance(value, list) else str(value).strip())
    return found


def test_agentclinic_cases_keep_every_finding_and_summaries_leak_nothing(data_dir):
    raw = [json.loads(line) for line in agentclinic_file(data_dir).read_text().splitlines() if line.strip()]
    report = import_agentclinic(agentclinic_file(data_dir))
    assert not report.skipped and len(report.cases) == len(raw) == 107
    for case, row in zip(report.cases, raw, strict=True):
        osce = row["OSCE_Examination"]
        assert case.final_diagnosis == osce["Correct_Diagnosis"]  # verbatim
        sentences = [s for s in re.split(r"(?<=\.)\s+", case.case_summary) if s]
        assert 2 <= len(sentences) <= 3, case.case_summary
        assert osce["Patient_Actor"]["Demographics"].split()[0] in case.case_summary
        assert not words(case.final_diagnosis) & words(case.case_summary), case.case_id
        results = [*case.findings.tests.values(), *case.findings.examination.values()]
        for text in results:
            for line in text.splitlines():
                value = line.split(": ", 1)[-1]
                assert len(value) < 8 or value.lower() not in case.case_summary.lower(), (case.case_id, value)
        # every leaf result of the source is somewhere in the findings
        leaves = [*leaf_texts(osce["Test_Results"]), *leaf_texts(osce["Physical_Examination_Findings"])]
        joined = "\n".join(results)
        assert all(leaf in joined for leaf in leaves), case.case_id
        assert case.provenance["file_line"] >= 1 and "AgentClinic" in case.provenance["source"]
        assert case.provenance["objective_for_doctor"] == osce["Objective_for_Doctor"].strip()
        assert case.provenance["objective_for_doctor"] not in case.case_summary
    first = report.cases[0]
    assert first.findings.tests["Chest CT"] == "Normal, no thymoma or other masses detected."
    assert first.findings.tests["Acetylcholine Receptor Antibodies"] == "Present (elevated)"


def test_importer_skips_malformed_rows_with_their_line_numbers(tmp_path, data_dir):
    good = agentclinic_file(data_dir).read_text().splitlines()[:2]
    no_diagnosis = json.loads(good[0])
    del no_diagnosis["OSCE_Examination"]["Correct_Diagnosis"]
    source = write_jsonl(tmp_path / "mixed.jsonl", [good[0], "{not json", no_diagnosis, "[1, 2]", "", good[1]])
    report = import_agentclinic(source)
    assert [case.provenance["file_line"] for case in report.cases] == [1, 6]
    assert [(s.line, s.reason.split(":")[0]) for s in report.skipped] == [
        (2, "not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
        (3, "field 'OSCE_Examination.Correct_Diagnosis'"), (4, "not a JSON object")]
    assert report.summary() == "2 cases kept, 3 rows skipped (lines 2, 3, 4)"


def test_cases_import_cli_writes_the_good_rows_or_nothing(tmp_path, data_dir, capsys):
    out = tmp_path / "cases.jsonl"
    good = agentclinic_file(data_dir).read_text().splitlines()[0]
    source = write_jsonl(tmp_path / "mixed.jsonl", [good, "{oops"])
    assert main(["cases", "import", "agentclinic", str(source), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "1 cases kept, 1 rows skipped (lines 2)" in captured.out and "skipped line 2" in captured.err
    assert [c.case_id for c in load_cases(out)] == ["agentclinic-0001"]

    bad = write_jsonl(tmp_path / "bad.jsonl", ["{oops", '{"OSCE_Examination": 3}'])
    empty_out = tmp_path / "never.jsonl"
    assert main(["cases", "import", "agentclinic", str(bad), "--out", str(empty_out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "nothing was written" in err
    assert not empty_out.exists() and not list(tmp_path.glob(".never.jsonl.*"))


def test_case_format_validation_names_line_and_field(tmp_path):
    path = write_jsonl(tmp_path / "cases.jsonl", [case_row("a"), case_row("b", final_diagnosis="")])
    with pytest.raises(CaseFileError, match=r"line 2: field 'final_diagnosis'"):
        load_cases(path)
    path = write_jsonl(tmp_path / "dup.jsonl", [case_row("a"), case_row("a")])
    with pytest.raises(CaseFileError, match=r"line 2: field 'id': 'a' appears on an earlier line"):
        load_cases(path)
    extra = case_row("a")
    extra["findings"]["labs"] = {}
    with pytest.raises(CaseFileError, match=r"line 1: field 'findings.labs'"):
        load_cases(write_jsonl(tmp_path / "extra.jsonl", [extra]))
    user = write_jsonl(tmp_path / "user.jsonl", [case_row("a"), {"id": "b"}, case_row("a")])
    with pytest.raises(CaseFileError, match=r"user.jsonl line 2: field 'case_summary'.*--skip-bad-lines"):
        read_case_rows(user)
    report = read_case_rows(user, skip_bad_lines=True)
    assert [c.case_id for c in report.cases] == ["a"]
    assert [s.line for s in report.skipped] == [2, 3] and "case_summary" in report.skipped[0].reason


def test_users_jsonl_import_round_trips_and_agentclinic_files_load_directly(tmp_path, data_dir):
    source = write_jsonl(tmp_path / "mine.jsonl", [case_row("nejm-1"), case_row("nejm-2", split="validation")])
    out = tmp_path / "out.jsonl"
    assert main(["cases", "import", "jsonl", str(source), "--out", str(out)]) == 0
    cases = load_cases(out)
    assert [(c.case_id, c.split) for c in cases] == [("nejm-1", "test"), ("nejm-2", "validation")]
    assert cases[0].findings.tests["Chest CT"].startswith("Normal")
    assert len(load_any(agentclinic_file(data_dir)).cases) == 107
