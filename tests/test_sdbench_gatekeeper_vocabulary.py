"""The offline SDBench gatekeeper's naming vocabulary (synonyms answered without the encoder, never another test's
result) and its withholding rule (every interpretive phrasing, the run option, the count, questions that never
name the diagnosis)."""

from __future__ import annotations

import re

import pytest

from medeval_core.benchmarks.sdbench import gatekeeper as gatekeeper_module
from medeval_core.benchmarks.sdbench.benchmark import SDBenchParams, output_of
from medeval_core.benchmarks.sdbench.cases import SDBenchCase, load_cases
from medeval_core.benchmarks.sdbench.catalog import CatalogEntry, TestCatalog, TestVocabulary, plain
from medeval_core.benchmarks.sdbench.costing import Pricer, load_prices
from medeval_core.benchmarks.sdbench.gatekeeper import (
    INTERPRETIVE_PHRASES,
    CaseEnvironment,
    OfflineGatekeeper,
    Tests,
    withhold_interpretation,
)
from tests.sdbench_fixtures import case_row, write_jsonl


def structured_case(tmp_path, tests: dict[str, str], diagnosis: str = "Hirschsprung disease") -> SDBenchCase:
    row = case_row(diagnosis=diagnosis)
    row["findings"]["tests"] = tests
    return load_cases(write_jsonl(tmp_path / "case.jsonl", [row]))[0]


@pytest.fixture
def no_encoder(monkeypatch):
    """Any sentence encoding fails the test: what the vocabulary decides must not need it."""

    def refuse(texts):
        raise AssertionError(f"encoded {list(texts)}")

    monkeypatch.setattr(gatekeeper_module, "embed", refuse)


def test_synonyms_the_vocabulary_names_come_back_real_without_encoding(tmp_path, catalog, no_encoder):
    case = structured_case(tmp_path, {
        "Chest X-ray": "Bilateral hilar lymphadenopathy.", "ESR": "62 mm/h",
        "Thyroid Function Tests": "TSH: 0.01 mIU/L\nFree T4: 3.1 ng/dL",
        "Complete Blood Count": "WBC: 12,000/mm3\nHemoglobin: 10.1 g/dL\nPlatelets: 480,000/mm3",
        "Electrolytes": "Na: 131 mEq/L\nK: 3.1 mEq/L", "Coagulation Profile": "PT: 13 s\naPTT: 31 s",
        "X-Ray Knee": "Joint effusion.", "Urinalysis": "Glucose: negative\nProtein: trace"})
    orders = {"roentgenogram of the thorax": "Chest X-ray", "Westergren settling rate": "ESR",
              "TSH and free T4": "Thyroid Function Tests", "haemogram with white cell and platelet counts":
              "Complete Blood Count", "U&E": "Electrolytes", "PT/INR and aPTT": "Coagulation Profile",
              "plain film of the knee": "X-Ray Knee", "Na K Cl HCO3": "Electrolytes", "FBC": "Complete Blood Count",
              "haemoglobin": "Complete Blood Count: Hemoglobin", "serum sodium": "Electrolytes: Na",
              "free thyroxine": "Thyroid Function Tests: Free T4"}
    answers = OfflineGatekeeper(case, catalog).answer("tests", list(orders))
    assert [(a.source, a.matched) for a in answers] == [("REAL", matched) for matched in orders.values()]
    # a test the vocabulary names that the case lacks: its normal result, still without the encoder
    (lipase,) = OfflineGatekeeper(case, catalog).answer("tests", ["serum lipase"])
    assert (lipase.source, lipase.matched) == ("SYNTHETIC", "lipase")


def test_a_panel_line_answers_only_an_order_on_its_specimen(tmp_path, catalog):
    case = structured_case(tmp_path, {"Urinalysis": "Glucose: 2+\nProtein: trace", "CBC": "WBC: 7,000/mm3"})
    blood, urine = OfflineGatekeeper(case, catalog).answer("tests", ["blood glucose", "urine glucose"])
    assert blood.source == "SYNTHETIC" and blood.matched == "glucose"
    assert (urine.source, urine.matched) == ("REAL", "Urinalysis: Glucose")


def test_a_panel_answers_the_panel_or_test_it_holds(tmp_path, catalog, no_encoder):
    case = structured_case(tmp_path, {"Chemistry Panel": "Sodium 131, potassium 3.1, creatinine 1.0",
                                      "Pulmonary Function Tests": "Obstructive pattern, reversible."})
    electrolytes, spirometry, lipids = OfflineGatekeeper(case, catalog).answer(
        "tests", ["serum electrolytes", "spirometry", "lipid panel"])
    assert (electrolytes.source, electrolytes.matched) == ("REAL", "Chemistry Panel")
    assert (spirometry.source, spirometry.matched) == ("REAL", "Pulmonary Function Tests")
    assert lipids.source == "SYNTHETIC"


def test_unnamed_orders_use_meaning_and_vague_ones_are_refused(tmp_path, catalog):
    case = structured_case(tmp_path, {"Complete Blood Count": "WBC: 7,000/mm3\nHemoglobin: 13 g/dL",
                                      "Chest CT": "Normal."})
    answers = OfflineGatekeeper(case, catalog).answer(
        "tests", ["full blood picture", "blood work", "some imaging", "chest radiograph", "Serum amyloid A"])
    assert [(a.source, a.matched) for a in answers[:3]] == [
        ("REAL", "Complete Blood Count"), ("REFUSED", None), ("REFUSED", None)]
    assert answers[3].source == "SYNTHETIC" and answers[3].matched == "chest x-ray"  # never the chest CT
    assert answers[4].source == "SYNTHETIC"


def test_catalogue_names_lead_to_one_test_each_and_the_vocabulary_names_only_catalogue_tests(catalog):
    owners: dict[frozenset[str], str] = {}
    for entry in catalog.entries:
        for name in (entry.name, *entry.aliases, *catalog.vocabulary.names.get(entry.name, [])):
            assert owners.setdefault(catalog.key(name), entry.name) == entry.name, name
    entry = CatalogEntry(name="sodium", codes=["84295"], kind="lab", normal="140 mEq/L")
    with pytest.raises(ValueError, match="lacks"):
        TestCatalog([entry], vocabulary=TestVocabulary(names={"potassium": ["k+"]}))


@pytest.mark.parametrize("phrase", [*INTERPRETIVE_PHRASES, "highly suggestive of", "strongly supportive of",
                                    "which is consistent with", "findings are in keeping with"])
def test_every_interpretive_phrasing_naming_the_diagnosis_is_withheld(phrase):
    text = f"Absent ganglion cells in the submucosa, {phrase} Hirschsprung disease. Transition zone at the sigmoid."
    kept, withheld = withhold_interpretation(text, "Hirschsprung disease")
    assert "hirschsprung" not in kept.lower()
    assert kept == "Absent ganglion cells in the submucosa. Transition zone at the sigmoid."
    assert len(withheld) == 1 and re.sub(r"\s+", " ", phrase.split()[-1]) in withheld[0]


@pytest.mark.parametrize(("text", "diagnosis"), [
    ("Blasts 42% of nucleated cells, suggestive of AML.", "Acute myeloid leukemia"),
    ("Impression: progressive multifocal leukoencephalopathy.", "Progressive multifocal leukoencephalopathy (PML)"),
    ("JC virus DNA detected, confirming PML.", "Progressive multifocal leukoencephalopathy (PML)"),
])
def test_abbreviations_and_impression_lines_are_names_too(text, diagnosis):
    kept, withheld = withhold_interpretation(text, diagnosis)
    assert withheld and "aml" not in kept.lower() and "pml" not in kept.lower()
    assert "leukoencephalopathy" not in kept.lower()


def test_a_result_that_states_the_diagnosis_is_returned(tmp_path, catalog):
    case = structured_case(tmp_path, {"Rectal Biopsy": "Absence of ganglion cells; Hirschsprung disease.",
                                      "Skin Biopsy": "Basal cell carcinoma, nodular type."},
                           diagnosis="Hirschsprung disease")
    rectal, skin = OfflineGatekeeper(case, catalog).answer("tests", ["Rectal Biopsy", "Skin Biopsy"])
    assert rectal.text == "Absence of ganglion cells; Hirschsprung disease." and rectal.withheld == []
    assert skin.text == "Basal cell carcinoma, nodular type."


def test_the_rule_is_a_recorded_option_and_each_withheld_clause_is_counted(tmp_path, catalog, data_dir):
    tests = {"Rectal Biopsy": "Absent ganglion cells, supportive of Hirschsprung disease.",
             "Barium Enema": "Transition zone, hinting at Hirschsprung disease."}
    case = structured_case(tmp_path, tests)
    assert SDBenchParams.model_fields["interpretation"].default == "withhold"
    pricer = Pricer(catalog, load_prices(data_dir / "costing" / "cms_prices.csv"))
    counted = {}
    for option in ("withhold", "keep"):
        gatekeeper = OfflineGatekeeper(case, catalog, interpretation=option)
        assert gatekeeper.describe()["interpretation"] == option
        environment = CaseEnvironment(case, gatekeeper, pricer)
        reply = environment.step(Tests(items=list(tests))).observation
        counted[option] = output_of(environment, "agent").withheld
        assert ("hirschsprung" in reply.text.lower()) == (option == "keep")
    assert counted == {"withhold": 2, "keep": 0}


QUESTIONS = ["What is the diagnosis?", "What do you think I have?", "Has a doctor told you what this is?",
             "What did the specialist say it was?", "Tell me about your medical history.",
             "What do the results show?", "Is it {diagnosis}?"]


def test_no_question_names_the_diagnosis_on_any_shared_case(shared_cases, catalog):
    for case in shared_cases:
        gatekeeper = OfflineGatekeeper(case, catalog)
        diagnosis = case.final_diagnosis
        name = plain(re.sub(r"\([^()]*\)", " ", diagnosis))
        abbreviations = {plain(a) for a in re.findall(r"\(([^()]+)\)", diagnosis)}
        asked = [q.format(diagnosis=diagnosis) for q in QUESTIONS]
        for answer in gatekeeper.answer("questions", asked):
            said = f" {plain(answer.text)} "
            assert f" {name} " not in said, (case.case_id, answer.request, answer.text)
            assert not any(f" {a} " in said for a in abbreviations), (case.case_id, answer.request)
