"""DDXPlus KB and patient loading: display cleaning, malformed rows, zip archives, French names."""

from __future__ import annotations

import ast
import csv
import json
import shutil
import zipfile

import numpy as np
import pytest

from medeval_core.benchmarks.ddxplus.kb import KnowledgeBaseError, load_kb
from medeval_core.benchmarks.ddxplus.patients import PatientFileError, load_patients
from tests.ddxplus_fixtures import ddxplus_dir, sample_csv, write_patients

GOOD = [30, [["URTI", 0.6], ["Influenza", 0.4]], "M", "URTI", ["E_91", "E_201", "E_55_@_V_89"], "E_201"]


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


def test_kb_shape_and_structure(kb):
    assert (kb.n_roots, kb.n_pathologies, kb.language) == (223, 49, "en")
    assert sorted(kb.children_of) == ["E_129", "E_151", "E_53"]
    assert set(kb.children_of["E_53"]) == {"E_54", "E_55", "E_56", "E_57", "E_58", "E_59"}
    # A code_question naming no KB evidence (E_69 -> E_68) is not a parent.
    assert kb.evidences["E_69"].parent is None
    # Every non-binary root has its default among its items.
    for root, evidence in kb.evidences.items():
        if not evidence.binary:
            assert kb.item_is_default[kb.item_index[f"{root}_@_{evidence.default_value}"]]


def test_display_texts_are_cleaned_but_codes_kept(kb):
    assert kb.evidences["E_55"].value_text("V_137") == "palate"
    assert kb.evidences["E_54"].value_text("V_112") == "shooting"
    assert kb.evidences["E_204"].value_text("V_8") == "Caribbean"
    assert kb.evidences["E_135"].value_text("V_12") == "yes"
    assert kb.evidences["E_135"].value_text("V_12", "fr") == "oui"
    assert "’" not in kb.evidences["E_23"].question("en")
    assert kb.evidences["E_55"].value_meaning["V_137"]["en"] == "palace"  # the released text is untouched
    icd = {c.name: c.icd10 for c in kb.conditions}
    assert icd["SLE"] == "M32" and icd["Pneumonia"] == "J17, J18" and icd["URTI"] == "J06.9"
    assert next(c for c in kb.conditions if c.name == "SLE").icd10_released == "M34"


def test_pathologies_resolve_by_key_english_or_french_name(kb):
    assert kb.pathology_index("GERD") == kb.pathology_index("RGO") == kb.pathology_names.index("GERD")
    assert kb.pathology_index("  gerd ") == kb.pathology_index("GERD")
    assert kb.pathology_index("Not a disease") is None


def test_question_search_is_accent_and_case_insensitive(kb):
    assert "E_91" in kb.search_questions("FEVER")
    assert "E_91" in kb.search_questions("fièvre", language="fr")
    assert kb.search_questions("fievre", language="fr") == kb.search_questions("fièvre", language="fr")


def test_sample_loads_whole_and_fast_parser_agrees_with_literal_eval(kb):
    patients = load_patients(sample_csv(), kb)
    assert len(patients) == patients.report.total_rows == 1066
    assert patients.report.n_skipped == 0
    with sample_csv().open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for i in (0, 17, 555, 1065):
        patient = patients.patient(i)
        assert patient.evidences == tuple(ast.literal_eval(rows[i]["EVIDENCES"]))
        assert list(patient.differential) == [tuple(p) for p in ast.literal_eval(rows[i]["DIFFERENTIAL_DIAGNOSIS"])]
    # Every patient's present roots are in its pathology's KB lists (design.md §3.2).
    assert not (patients.present & ~kb.condition_roots[patients.pathology]).any()


def test_cases_in_bulk_are_the_validated_patients(kb):
    from medeval_core.benchmarks.ddxplus import patients as module

    patients = load_patients(sample_csv(), kb)
    cases = patients.cases()
    assert len(cases) == len(patients)
    for i in range(len(patients)):
        validated = patients.patient(i)
        assert cases[i] == validated and hash(cases[i]) == hash(validated)
        assert cases[i].model_dump() == validated.model_dump()
        assert cases[i].model_fields_set == validated.model_fields_set
    assert patients.cases(limit=5) == cases[:5] and patients.cases(limit=0) == []
    assert patients.cases(limit=10**6) == cases
    assert patients.subset(np.array([9, 2])).cases() == [cases[9], cases[2]]
    assert patients.evidences.all() == [patients.evidences[i] for i in range(len(patients))]
    assert patients.differential_pairs.all() == list(patients.differential_pairs)
    # Built without validation only while that gives what validation gives; frozen all the same.
    assert module._patient_record is module._construct_patient
    with pytest.raises(ValueError):
        cases[0].age = 3  # type: ignore[misc]


def test_case_list_builds_each_patient_as_the_bulk_cases_do(kb):
    """A run's cases (``PatientSet.case_list``): ids known up front, each patient built when asked, equal to the
    bulk-built and to the validated patient; selection and lookup by id build nothing else."""
    patients = load_patients(sample_csv(), kb)
    cases, lazy = patients.cases(), patients.case_list()
    assert len(lazy) == len(cases) and lazy.ids == [case.case_id for case in cases]
    assert [lazy[i] for i in range(len(lazy))] == cases and lazy[-1] == cases[-1] and lazy[2:5] == cases[2:5]
    assert lazy[7] == patients.patient(7) and hash(lazy[7]) == hash(patients.patient(7))
    with pytest.raises(IndexError):
        lazy[len(lazy)]
    assert lazy.find(cases[9].case_id) == cases[9] and lazy.find("row-999999") is None
    odd = lazy.keeping(lambda case_id: int(case_id.removeprefix("row-")) % 2 == 1)
    assert list(odd) == [case for case in cases if case.row % 2 == 1]
    assert odd.find(cases[2].case_id) is None and odd.find(cases[3].case_id) == cases[3]


def test_malformed_rows_are_skipped_and_counted(tmp_path, kb):
    rows = [
        GOOD,
        [30, [["URTI", 1.0]], "M", "URTI", ["E_91", "E_9999"], "E_91"],             # unknown code
        [30, [["URTI", 1.0]], "M", "URTI", "['E_91', 'E_201'", "E_91"],             # malformed list cell
        [30, [["URTI", 1.0]], "M", "Dragon pox", ["E_91"], "E_91"],                  # pathology not in KB
        [30, [["Dragon pox", 1.0]], "M", "URTI", ["E_91"], "E_91"],                  # differential name not in KB
        ["thirty", [["URTI", 1.0]], "M", "URTI", ["E_91"], "E_91"],                  # bad age
        [30, [["URTI", 1.0]], "X", "URTI", ["E_91"], "E_91"],                        # bad sex
        [30, [["URTI", 1.0]], "M", "URTI", ["E_91", "E_55_@_V_9999"], "E_91"],       # impossible value
        [30, [["URTI", 1.0]], "M", "URTI", ["E_91_@_V_1"], "E_91"],                  # value on a yes/no root
        [30, [["URTI", 1.0]], "M", "URTI", ["E_91"], "E_201"],                       # initial not in evidences
        [30, "[['URTI', 'lots']]", "M", "URTI", ["E_91"], "E_91"],                   # non-numeric mass
        GOOD,
    ]
    path = write_patients(tmp_path / "bad.csv", rows)
    with path.open("a", encoding="utf-8") as handle:
        handle.write("30,only three,fields\n")
    patients = load_patients(path, kb)
    report = patients.report
    assert (report.total_rows, report.loaded, report.n_skipped) == (13, 2, 11)
    assert patients.rows.tolist() == [0, 11]
    assert report.skipped == {
        "unknown evidence code": 3, "malformed list cell": 2, "pathology missing from the KB": 2, "bad age": 1,
        "bad sex": 1, "initial evidence not among the evidences": 1, "wrong number of fields": 1,
    }
    text = report.summary()
    assert text.startswith("bad.csv: loaded 2 of 13 patients; skipped 11")
    assert "row 1: unknown evidence code 'E_9999'" in text


def test_differential_in_another_literal_spelling_still_loads(tmp_path, kb):
    row = list(GOOD)
    row[1] = '[("URTI", 6e-1), ("Influenza", .4)]'
    row[4] = '("E_91", "E_201")'
    patients = load_patients(write_patients(tmp_path / "alt.csv", [row]), kb)
    assert patients.report.n_skipped == 0
    assert patients.differential[0, kb.pathology_index("URTI")] == 0.6
    assert patients.evidences[0] == ("E_91", "E_201")


def test_release_zip_and_french_pathology_names(tmp_path, kb):
    french = list(GOOD)
    french[3] = "IVRS ou virémie"  # cond-name-fr of URTI
    french[1] = [["IVRS ou virémie", 0.6], ["Influenza", 0.4]]
    csv_path = write_patients(tmp_path / "release_test_patients", [GOOD, french])
    archive = tmp_path / "release_test_patients.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.write(csv_path, arcname="release_test_patients")
    patients = load_patients(archive, kb)
    assert len(patients) == 2, patients.report.summary()
    assert patients.pathology.tolist() == [kb.pathology_index("URTI")] * 2
    np.testing.assert_array_equal(patients.differential[0], patients.differential[1])


def test_french_release_is_detected_from_the_condition_keys(tmp_path):
    folder = tmp_path / "fr"
    folder.mkdir()
    shutil.copy(ddxplus_dir() / "release_evidences.json", folder)
    conditions = json.loads((ddxplus_dir() / "release_conditions.json").read_text(encoding="utf-8"))
    renamed = {c["cond-name-fr"]: {**c, "condition_name": c["cond-name-fr"]} for c in conditions.values()}
    (folder / "release_conditions.json").write_text(json.dumps(renamed, ensure_ascii=False), encoding="utf-8")
    french_kb = load_kb(folder)
    assert french_kb.language == "fr"
    assert french_kb.pathology_index("GERD") == french_kb.pathology_names.index("RGO")
    assert french_kb.evidences["E_91"].question(french_kb.language).startswith("Avez-vous")


def test_unreadable_inputs_give_one_clear_error(tmp_path, kb):
    with pytest.raises(KnowledgeBaseError, match="missing"):
        load_kb(tmp_path)
    with pytest.raises(PatientFileError, match="does not exist"):
        load_patients(tmp_path / "nope.csv", kb)
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("A,B\n1,2\n", encoding="utf-8")
    with pytest.raises(PatientFileError, match="lacks the column"):
        load_patients(wrong, kb)
    empty_zip = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty_zip, "w"):
        pass
    with pytest.raises(PatientFileError, match="expected exactly one patients file"):
        load_patients(empty_zip, kb)
