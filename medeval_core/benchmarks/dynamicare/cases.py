"""Open-diagnosis patient records with ground-truth ICD-9 codes, and the AgentClinic importer.

The record shape (JSON Lines, one patient a line; MIMIC-Patient users convert their own records to it):

    {"case_id": "p-001",
     "chief_complaint": "58-year-old man with two days of chest pain",   # all the doctor sees first
     "objective": "optional: the doctor's task, shown with the complaint",
     "record": {"History": "...", "Symptoms": {"Onset": "two days ago"}},  # what the patient knows; nested strings
     "measurements": {"Vitals": {"Blood pressure": "150/95 mmHg"}, "Labs": {...}},  # exam findings, test results
     "icd9": ["428.0", {"code": "401.9", "name": "Hypertension NOS", "confidence": 0.92, "method": "exact"}],
     "diagnosis": "optional free-text diagnosis"}

``icd9`` lists 1-5 ground-truth codes (dotted or not, E- and V-codes too); the record never holds the diagnosis.
The patient simulator answers from ``record`` only: a patient knows their history and symptoms, not their test
results. ``measurements`` reach the doctor only through the test channel ("REQUEST TEST: ...", as AgentClinic's
measurement agent), so a question such as "When did the symptoms start?" can never return a lab value.
``import_agentclinic`` converts the AgentClinic MedQA (and MedQA-extended) OSCE cases the way AgentClinic's
``ScenarioMedQA`` splits them: ``Patient_Actor`` becomes the record (AgentClinic's patient agent), the
``Physical_Examination_Findings`` and ``Test_Results`` the measurements (its measurement agent),
``Objective_for_Doctor`` the objective (its doctor agent's presentation), and the ``Correct_Diagnosis`` is mapped
to ICD-9 with the mapper, its confidence and method kept. A record line written before measurements existed, with
those two AgentClinic sections inside ``record``, is read with them moved to ``measurements``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from medeval_core.data.files import SkippedLine, json_lines, problem_of, read_json_lines
from medeval_core.records import Case
from medeval_core.vocabularies.icd9 import Icd9Mapper, category, display_code, normalise_code

MAX_TRUTH_CODES = 5
MEASUREMENT_SECTIONS = ("Physical_Examination_Findings", "Test_Results")
"""AgentClinic's sections that only its measurement agent holds (``ScenarioMedQA.exam_information``)."""


class RecordFileError(ValueError):
    """A records file that cannot be used; the message says what to fix."""


class TruthCode(BaseModel):
    code: str
    name: str = ""
    confidence: float | None = None
    method: str = "given"

    @property
    def category(self) -> str:
        return category(self.code)


class PatientRecord(Case):
    source: str = ""
    chief_complaint: str
    objective: str = ""
    """The doctor's task as the source states it (AgentClinic's ``Objective_for_Doctor``), shown with the complaint."""
    record: dict[str, Any]
    """What the patient knows: the patient simulator answers from this only."""
    measurements: dict[str, Any] = Field(default_factory=dict)
    """Examination findings and test results: given only through the test channel."""
    icd9: list[TruthCode]
    diagnosis: str = ""

    @property
    def categories(self) -> list[str]:
        return list(dict.fromkeys(code.category for code in self.icd9))

    def fields(self) -> list[tuple[str, str]]:
        """The record flattened to (label path, text) pairs in its order (``Symptoms / Onset``)."""
        return list(_flatten(self.record, ()))

    def measurement_fields(self) -> list[tuple[str, str]]:
        """The measurements flattened the same way (``Test Results / Blood Tests / Hemoglobin``)."""
        return list(_flatten(self.measurements, ()))


def _flatten(value: Any, path: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, (*path, str(key).replace("_", " ")))
    elif isinstance(value, list):
        if all(not isinstance(item, dict | list) for item in value):
            text = "; ".join(str(item) for item in value if str(item).strip())
            if text:
                yield " / ".join(path), text
        else:
            for item in value:
                yield from _flatten(item, path)
    elif value is not None and str(value).strip():
        yield " / ".join(path), str(value).strip()


class RecordSet(BaseModel):
    path: str
    records: list[PatientRecord]
    skipped: list[SkippedLine] = Field(default_factory=list)

    def summary(self) -> str:
        text = f"{len(self.records)} records loaded from {Path(self.path).name}"
        if self.skipped:
            shown = "; ".join(f"line {row.line}: {row.reason}" for row in self.skipped[:5])
            text += f", {len(self.skipped)} lines skipped: {shown}"
        return text


def _truth(item: Any) -> TruthCode:
    raw = {"code": item} if isinstance(item, str) else item
    if not isinstance(raw, dict) or not isinstance(raw.get("code"), str):
        raise ValueError('each icd9 entry is a code or {"code": ..., "name": ...}')
    canonical = normalise_code(raw["code"])
    if canonical is None:
        raise ValueError(f"{raw['code']!r} is not an ICD-9 code (e.g. 428.0, E815.0, V45.1)")
    return TruthCode.model_validate({**raw, "code": canonical})


def parse_record(raw: Any, source: str = "") -> PatientRecord:
    """One record line; ValueError says what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError("the line is not a JSON object")
    case_id = raw.get("case_id")
    if not isinstance(case_id, str | int) or isinstance(case_id, bool) or not str(case_id).strip():
        raise ValueError("case_id must be a non-empty string")
    complaint = raw.get("chief_complaint")
    if not isinstance(complaint, str) or not complaint.strip():
        raise ValueError("chief_complaint must be a non-empty string")
    record = raw.get("record")
    if not isinstance(record, dict) or not record:
        raise ValueError("record must be a non-empty JSON object")
    measurements = raw.get("measurements", {})
    if not isinstance(measurements, dict):
        raise ValueError("measurements must be a JSON object")
    moved = {key: record[key] for key in MEASUREMENT_SECTIONS if key in record}
    record = {key: value for key, value in record.items() if key not in moved}
    measurements = {**moved, **measurements}
    objective = raw.get("objective", "")
    if not isinstance(objective, str):
        raise ValueError("objective must be a string")
    codes = raw.get("icd9")
    if not isinstance(codes, list) or not 1 <= len(codes) <= MAX_TRUTH_CODES:
        raise ValueError(f"icd9 must list 1 to {MAX_TRUTH_CODES} ground-truth codes")
    diagnosis = raw.get("diagnosis", "")
    if not isinstance(diagnosis, str):
        raise ValueError("diagnosis must be a string")
    patient = PatientRecord(case_id=str(case_id).strip(), source=str(raw.get("source", source)),
                            chief_complaint=complaint.strip(), objective=objective.strip(), record=record,
                            measurements=measurements, icd9=[_truth(c) for c in codes], diagnosis=diagnosis)
    if not patient.fields():
        raise ValueError("record holds no text to answer from")
    return patient


def load_records(path: str | Path, limit: int | None = None, skip_bad_lines: bool = False) -> RecordSet:
    path = Path(path)
    records, skipped = read_json_lines(
        path, RecordFileError, "does not exist; give a records JSON Lines file (see `python -m medeval_core "
        "import-agentclinic --help` to make one from AgentClinic).", lambda raw: parse_record(raw, source=path.name),
        lambda patient: patient.case_id, duplicate="case_id {key} appears earlier", nothing_valid="no valid records",
        limit=limit, skip_bad_lines=skip_bad_lines)
    return RecordSet(path=str(path), records=records, skipped=skipped)


class ImportReport(BaseModel):
    written: int
    skipped: list[SkippedLine] = Field(default_factory=list)
    mappings: list[dict[str, Any]] = Field(default_factory=list)
    truth_mapped: dict[str, int] = Field(default_factory=dict)
    """Every written case's truth is mapped from its diagnosis name: how many by each method."""


def agentclinic_record(raw: Any, case_id: str, mapper: Icd9Mapper) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the record line, the mapping made) for one AgentClinic OSCE case; ValueError when it cannot be used."""
    exam = raw.get("OSCE_Examination") if isinstance(raw, dict) else None
    if not isinstance(exam, dict):
        raise ValueError("the line has no OSCE_Examination object")
    diagnosis = exam.get("Correct_Diagnosis")
    actor = exam.get("Patient_Actor")
    if not isinstance(diagnosis, str) or not diagnosis.strip() or not isinstance(actor, dict):
        raise ValueError("the case lacks Correct_Diagnosis or Patient_Actor")
    mapping = mapper.map(diagnosis)
    if mapping.code is None:
        raise ValueError(f"Correct_Diagnosis {diagnosis!r} maps to no ICD-9 code ({mapping.note})")
    objective = exam.get("Objective_for_Doctor", "")
    line = {"case_id": case_id, "source": "agentclinic", "chief_complaint": complaint_of(raw),
            "objective": objective.strip() if isinstance(objective, str) else "",
            "record": {"Patient_Actor": actor},
            "measurements": {key: exam[key] for key in MEASUREMENT_SECTIONS if key in exam},
            "diagnosis": diagnosis.strip(),
            "icd9": [{"code": display_code(mapping.code), "name": mapping.description,
                      "confidence": mapping.confidence, "method": mapping.method}]}
    made = {"case_id": case_id, "diagnosis": diagnosis.strip(), "code": display_code(mapping.code),
            "description": mapping.description, "confidence": mapping.confidence, "method": mapping.method,
            "matched": mapping.matched}
    return line, made


def agentclinic_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, case) of every JSON line of an AgentClinic file, for picking a case before mapping it; a line
    that is not JSON refuses the file with its number."""
    found = []
    for number, value, problem in json_lines(path, RecordFileError,
                                             "does not exist; give an AgentClinic JSON Lines file."):
        if problem is not None:
            raise RecordFileError(f"{path} line {number}: {problem_of(problem)}; fix that line.") from None
        found.append((number, value))
    return found


def agentclinic_case(path: Path, line: int, mapper: Icd9Mapper) -> PatientRecord:
    """One AgentClinic case as a record (its diagnosis mapped now), by its line number."""
    for number, raw in agentclinic_lines(path):
        if number == line:
            try:
                record, _ = agentclinic_record(raw, f"agentclinic-{path.stem}-{line}", mapper)
                return parse_record(record, source=path.name)
            except ValueError as exc:
                raise RecordFileError(f"{path.name} line {line}: {exc}.") from None
    raise RecordFileError(f"{path.name} has no case on line {line}.")


def load_agentclinic(path: Path, mapper: Icd9Mapper, limit: int | None = None) -> RecordSet:
    """An AgentClinic file read as records directly (each diagnosis mapped now), cases that cannot be mapped
    reported by line."""
    records: list[PatientRecord] = []
    skipped: list[SkippedLine] = []
    for number, raw in agentclinic_lines(path):
        try:
            line, _ = agentclinic_record(raw, f"agentclinic-{path.stem}-{number}", mapper)
            records.append(parse_record(line, source=path.name))
        except ValueError as exc:
            skipped.append(SkippedLine(line=number, reason=str(exc)))
        if limit is not None and len(records) >= limit:
            break
    if not records:
        raise RecordFileError(f"{path} has no AgentClinic case that could be used.")
    return RecordSet(path=str(path), records=records, skipped=skipped)


def complaint_of(raw: Any) -> str:
    """The chief complaint of an AgentClinic case as the doctor sees it (no mapping needed)."""
    exam = raw.get("OSCE_Examination", {}) if isinstance(raw, dict) else {}
    actor = exam.get("Patient_Actor", {}) if isinstance(exam, dict) else {}
    symptoms = actor.get("Symptoms", {}) if isinstance(actor, dict) else {}
    primary = str(symptoms.get("Primary_Symptom", "")).strip() if isinstance(symptoms, dict) else ""
    demographics = str(actor.get("Demographics", "")).strip() if isinstance(actor, dict) else ""
    return ", ".join(part for part in (demographics, primary.lower()) if part) or "a new patient"


def import_agentclinic(sources: list[tuple[str, Path]], out: Path, mapper: Icd9Mapper) -> ImportReport:
    """Convert AgentClinic files (``[(prefix, path)]``) to records at ``out``, written whole or not at all."""
    lines: list[str] = []
    report = ImportReport(written=0)
    for prefix, path in sources:
        for number, raw in agentclinic_lines(path):
            try:
                line, made = agentclinic_record(raw, f"{prefix}-{number}", mapper)
            except ValueError as exc:
                report.skipped.append(SkippedLine(line=number, reason=f"{path.name}: {exc}"))
                continue
            lines.append(json.dumps(line, ensure_ascii=False))
            report.mappings.append(made)
    if not lines:
        raise RecordFileError("No AgentClinic case could be converted; check the input files.")
    _write_whole(out, lines)
    report.written = len(lines)
    report.truth_mapped = dict(Counter(made["method"] for made in report.mappings))
    return report


def _write_whole(out: Path, lines: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
    partial.replace(out)


def write_records(records: list[PatientRecord], out: Path) -> None:
    """Records in the documented shape, codes dotted, written whole or not at all."""
    lines = []
    for record in records:
        line = record.model_dump(mode="json")
        line["icd9"] = [{**code, "code": display_code(code["code"])} for code in line["icd9"]]
        lines.append(json.dumps(line, ensure_ascii=False))
    _write_whole(out, lines)
