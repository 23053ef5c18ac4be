"""SDBench cases: the JSON Lines case format, its validation, and the importers (AgentClinic, users' own files).

One JSON object per line:

    {"id": "ac-0001", "split": "test",
     "case_summary": "A 35-year-old woman presents with double vision.",   # all the agent sees at first
     "full_text": "...",                 # the whole case (gatekeeper and judge only)
     "final_diagnosis": "Myasthenia gravis",                              # judge only
     "findings": {"history": {"Past medical history": "..."},             # optional, structured
                  "examination": {"Vital signs": "Temperature: 36.6 C\nHeart rate: 72 bpm"},
                  "tests": {"Chest CT": "Normal, no thymoma ...", "Complete blood count": "WBC: ...\nHemoglobin: ..."}},
     "provenance": {"source": "...", "line": 1}}

``findings`` values are text; a value made of ``label: value`` lines (a panel) also answers orders for one of its
components. Cases with ``findings`` get real answers from the offline gatekeeper; cases without them need the LLM
gatekeeper, which reads ``full_text``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from medeval_core.data.files import (
    SKIP_REMEDY,
    SkippedLine,
    json_lines,
    problem_of,
    read_json_lines,
    replaced_in_one_step,
)
from medeval_core.records import Case

SPLITS_DEFAULT = "test"
SOURCE_AGENTCLINIC = "AgentClinic MedQA (Schmidgall et al., 2024; MIT licence)"


class CaseFileError(ValueError):
    """A case file that cannot be used; the message names the file, the line and the field."""


class Findings(BaseModel):
    """A structured case: what the history, the examination and each test would show, as chart text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    history: dict[str, str] = Field(default_factory=dict)
    examination: dict[str, str] = Field(default_factory=dict)
    tests: dict[str, str] = Field(default_factory=dict)

    @field_validator("history", "examination", "tests")
    @classmethod
    def _named_texts(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not name.strip() or not text.strip():
                raise ValueError("every finding needs a non-empty name and text")
        return value


class CaseRow(BaseModel):
    """One line of a case file, as written (``id`` is the case id)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    split: str = Field(default=SPLITS_DEFAULT, min_length=1)
    case_summary: str = Field(min_length=1)
    full_text: str = Field(min_length=1)
    final_diagnosis: str = Field(min_length=1)
    findings: Findings | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)


class SDBenchCase(Case):
    split: str
    case_summary: str
    full_text: str
    final_diagnosis: str
    findings: Findings | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_row(cls, row: CaseRow) -> SDBenchCase:
        return cls(case_id=row.id, **row.model_dump(exclude={"id"}))

    def row(self) -> dict[str, Any]:
        return {"id": self.case_id, **self.model_dump(mode="json", exclude={"case_id"}, exclude_none=True)}


class ReadReport(BaseModel):
    """What an importer kept and what it skipped, by line number."""

    cases: list[SDBenchCase]
    skipped: list[SkippedLine] = Field(default_factory=list)

    def summary(self) -> str:
        kept = f"{len(self.cases)} cases kept"
        if not self.skipped:
            return kept
        lines = ", ".join(str(item.line) for item in self.skipped[:20])
        more = f" and {len(self.skipped) - 20} more" if len(self.skipped) > 20 else ""
        return f"{kept}, {len(self.skipped)} rows skipped (lines {lines}{more})"


_MISSING = "does not exist; give the path of a JSON Lines case file."


def _case_of_row(value: Any) -> SDBenchCase:
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return SDBenchCase.from_row(CaseRow.model_validate(value))


def read_case_rows(path: str | Path, skip_bad_lines: bool = False) -> ReadReport:
    """The cases of a case file; a bad or repeated row refuses the file with its line number and field, or with
    ``skip_bad_lines`` is left out and listed."""
    cases, skipped = read_json_lines(
        Path(path), CaseFileError, _MISSING, _case_of_row, lambda case: case.case_id,
        duplicate="field 'id': {key!r} appears on an earlier line; give each case its own id",
        nothing_valid="no cases", skip_bad_lines=skip_bad_lines)
    return ReadReport(cases=cases, skipped=skipped)


def load_cases(path: str | Path) -> list[SDBenchCase]:
    """Every case of a case file; the first bad line fails the load with its line number and field."""
    return read_case_rows(path).cases


def is_agentclinic_file(path: str | Path) -> bool:
    """Whether the file's first row is an AgentClinic row (``OSCE_Examination``) rather than an SDBench case."""
    for _, value, problem in json_lines(Path(path), CaseFileError, _MISSING):
        return problem is None and isinstance(value, dict) and "OSCE_Examination" in value
    return False


def load_any(path: str | Path, skip_bad_lines: bool = False) -> ReadReport:
    """An SDBench case file, or an AgentClinic file converted on the fly; a bad row refuses the file with its line
    number, or with ``skip_bad_lines`` is left out and listed."""
    if not is_agentclinic_file(path):
        return read_case_rows(path, skip_bad_lines)
    report = import_agentclinic(path)
    if report.skipped and not skip_bad_lines:
        first = report.skipped[0]
        raise CaseFileError(f"{path} line {first.line}: {first.reason}; {SKIP_REMEDY}.")
    if not report.cases:
        raise CaseFileError(f"{path} has no usable AgentClinic case ({report.summary()}).")
    return report


# AgentClinic ------------------------------------------------------------------------------------------------------

# Keys that group tests without being one ("Imaging": {"Chest_CT": ...}); their children are the tests.
_GROUPS = frozenset({"blood tests", "blood test", "blood work", "bloodwork", "imaging", "laboratory tests",
                     "laboratory studies", "laboratory", "labs", "lab results", "lab tests", "additional tests",
                     "other tests", "investigations", "tests", "test results", "additional laboratory tests",
                     "imaging and other tests", "imaging results", "imaging studies", "lab work", "other",
                     "basic laboratory tests", "screening tests", "infectious disease testing"})
# Keys under a test that hold its report rather than name a component ("Chest_CT": {"Findings": ...}).
_REPORT_PARTS = frozenset({"findings", "finding", "result", "results", "comments", "comment", "impression",
                           "description", "report", "interpretation", "details", "value", "conclusion"})


def display_name(key: str) -> str:
    """``Acetylcholine_Receptor_Antibodies`` -> ``Acetylcholine Receptor Antibodies``."""
    return re.sub(r"\s+", " ", str(key).replace("_", " ")).strip()


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "; ".join(_text(item) for item in value)
    if isinstance(value, dict):
        return "; ".join(f"{display_name(k)}: {_text(v)}" for k, v in value.items())
    return str(value).strip()


def _flatten(node: Mapping[str, Any], prefix: tuple[str, ...], out: dict[tuple[str, ...], list[str]]) -> None:
    """Test name (path of keys) -> its result lines: a report part joins its test's text, any other leaf is a
    component line (``WBC: 7,500/mm3``) of the panel above it, or its own test at the top."""
    for key, value in node.items():
        name = display_name(key)
        if isinstance(value, dict):
            inner = prefix if (not prefix and name.lower() in _GROUPS) else (*prefix, name)
            _flatten(value, inner, out)
            continue
        text = _text(value)
        if not text:
            continue
        if not prefix:
            out.setdefault((name,), []).append(text)
        elif name.lower() in _REPORT_PARTS:
            lines = out.setdefault(prefix, [])
            lines.append(text if name.lower() in ("findings", "result", "results") else f"{name}: {text}")
        else:
            out.setdefault(prefix, []).append(f"{name}: {text}")


def flatten_results(tree: Mapping[str, Any]) -> dict[str, str]:
    """A nested AgentClinic results dict as test name -> result text (panels as ``label: value`` lines)."""
    out: dict[tuple[str, ...], list[str]] = {}
    _flatten(tree, (), out)
    return {" ".join(path): "\n".join(lines) for path, lines in out.items()}


_HISTORY_FIELDS = (("History", "History of present illness"), ("Past_Medical_History", "Past medical history"),
                   ("Social_History", "Social history"), ("Review_of_Systems", "Review of systems"),
                   ("Family_History", "Family history"), ("Medications", "Medications"),
                   ("Allergies", "Allergies"))


def _history(actor: Mapping[str, Any]) -> dict[str, str]:
    history: dict[str, str] = {}
    for key, label in _HISTORY_FIELDS:
        text = _text(actor.get(key, ""))
        if text:
            history[label] = text
    symptoms = actor.get("Symptoms")
    if isinstance(symptoms, Mapping):
        primary = _text(symptoms.get("Primary_Symptom", ""))
        secondary = _text(symptoms.get("Secondary_Symptoms", ""))
        if primary or secondary:
            history["Symptoms"] = "; ".join(part for part in (primary, secondary) if part)
    for key, value in actor.items():
        known = {k for k, _ in _HISTORY_FIELDS} | {"Demographics", "Symptoms"}
        if key not in known and _text(value):
            history[display_name(key)] = _text(value)
    return history


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3}


def _leaks(text: str, diagnosis: str, results: Iterable[str]) -> bool:
    """Whether ``text`` gives away the diagnosis (any of its longer words) or quotes a finding's text."""
    lowered = text.lower()
    if _words(diagnosis) & _words(text):
        return True
    return any(len(result) >= 8 and result.lower() in lowered for result in results)


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] + "." if text else ""


def summary_of(demographics: str, primary: str, secondary: Sequence[str], diagnosis: str,
               results: Sequence[str]) -> str:
    """2-3 sentences: who the patient is and what they present with; nothing of the diagnosis or any finding."""
    who = demographics.strip() or "An adult patient"
    article = "An" if who[:1].lower() in "aeiou8" or who[:2] in ("11", "18") else "A"
    complaint = primary.strip() if primary.strip() and not _leaks(primary, diagnosis, results) else ""
    first = f"{article} {who} presents with {complaint.lower()}" if complaint else f"{article} {who} presents for "\
        "evaluation"
    sentences = [_sentence(first)]
    also = [s.strip() for s in secondary if s.strip() and not _leaks(s, diagnosis, results)]
    if also:
        sentences.append(_sentence("The patient also reports " + ", ".join(s[:1].lower() + s[1:] for s in also[:4])))
    else:
        sentences.append("The patient has come for a diagnostic evaluation.")
    return " ".join(sentences)


def render_full_text(demographics: str, findings: Findings, diagnosis: str) -> str:
    """The whole case as chart text, for the LLM gatekeeper and the judge."""
    parts = [f"Patient: {demographics}"]
    for title, section in (("History", findings.history), ("Physical examination", findings.examination),
                           ("Test results", findings.tests)):
        if section:
            parts.append(f"{title}:")
            parts.extend(f"- {name}: {text}" for name, text in section.items())
    parts.append(f"Final diagnosis: {diagnosis}")
    return "\n".join(parts)


def from_agentclinic(row: Mapping[str, Any], number: int, source: str, split: str = SPLITS_DEFAULT) -> SDBenchCase:
    """One AgentClinic MedQA (or MedQA-extended) row as an SDBench case; a ValueError names what is missing."""
    osce = row.get("OSCE_Examination")
    if not isinstance(osce, Mapping):
        raise ValueError("field 'OSCE_Examination': missing or not an object")
    diagnosis = osce.get("Correct_Diagnosis")
    if not isinstance(diagnosis, str) or not diagnosis.strip():
        raise ValueError("field 'OSCE_Examination.Correct_Diagnosis': missing or empty")
    actor = osce.get("Patient_Actor")
    if not isinstance(actor, Mapping):
        raise ValueError("field 'OSCE_Examination.Patient_Actor': missing or not an object")
    tests_tree = osce.get("Test_Results", {})
    exam_tree = osce.get("Physical_Examination_Findings", {})
    if not isinstance(tests_tree, Mapping) or not isinstance(exam_tree, Mapping):
        raise ValueError("fields 'Test_Results' and 'Physical_Examination_Findings' must be objects")
    findings = Findings(history=_history(actor), examination=flatten_results(exam_tree),
                        tests=flatten_results(tests_tree))
    symptoms = actor.get("Symptoms") if isinstance(actor.get("Symptoms"), Mapping) else {}
    secondary = symptoms.get("Secondary_Symptoms", []) if isinstance(symptoms, Mapping) else []
    demographics = _text(actor.get("Demographics", ""))
    results = [*findings.examination.values(), *findings.tests.values()]
    results += [line.split(": ", 1)[-1] for text in results for line in text.splitlines()]
    summary = summary_of(demographics, _text(symptoms.get("Primary_Symptom", "")) if symptoms else "",
                         [_text(s) for s in secondary] if isinstance(secondary, list) else [_text(secondary)],
                         diagnosis, results)
    return SDBenchCase(
        case_id=f"agentclinic-{number:04d}", split=split, case_summary=summary,
        full_text=render_full_text(demographics, findings, diagnosis.strip()), final_diagnosis=diagnosis,
        findings=findings, provenance={"source": source, "file_line": number, **_objective(osce)},
    )


def _objective(osce: Mapping[str, Any]) -> dict[str, str]:
    """AgentClinic's ``Objective_for_Doctor`` (its doctor agent's presentation), kept with the case's provenance:
    the SDBench agent sees the case summary only, as in the protocol."""
    objective = osce.get("Objective_for_Doctor")
    return {"objective_for_doctor": objective.strip()} if isinstance(objective, str) and objective.strip() else {}


def import_agentclinic(path: str | Path, split: str = SPLITS_DEFAULT) -> ReadReport:
    """Every usable row of an AgentClinic MedQA / MedQA-extended file; bad rows are skipped with their lines."""
    path = Path(path)
    report = ReadReport(cases=[])
    for number, value, problem in json_lines(path, CaseFileError, _MISSING):
        try:
            if problem is not None:
                raise problem
            if not isinstance(value, Mapping):
                raise ValueError("not a JSON object")
            report.cases.append(from_agentclinic(value, number, f"{SOURCE_AGENTCLINIC}: {path.name}", split))
        except ValueError as exc:
            report.skipped.append(SkippedLine(line=number, reason=problem_of(exc)))
    return report


def write_cases(cases: Sequence[SDBenchCase], out: str | Path) -> Path:
    """Write the case file in one step (a temporary file renamed over ``out``): never half-written."""
    out = Path(out)
    with replaced_in_one_step(out, "w", encoding="utf-8") as handle:
        for case in cases:
            handle.write(json.dumps(case.row(), ensure_ascii=False) + "\n")
    return out
