"""ICD-9 codes, the category rule, the shortlist-then-choose mapper (offline and LLM over HTTP), Hit@K / Rec@K by
hand, and ``score hitk`` from the command line."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medeval_core.benchmarks.dynamicare.hitk import case_metrics, hit_rec_at, matched
from medeval_core.benchmarks.dynamicare.scoring import mapped_truth_methods, mapped_truth_note, score_files
from medeval_core.models.chat import OpenAIChatBackend, ReplyFormatError
from medeval_core.vocabularies import icd9
from medeval_core.vocabularies.icd9_vocabulary import (
    gem_icd10_to_icd9,
    name_words,
    pointed_names,
    term,
    unspecified_descendant,
)
from tests.fake_openai import FakeOpenAI, Reply

REPO_ROOT = Path(__file__).resolve().parent.parent
# What the mapper reaches on the hand-coded sets (README "ICD-9 mapping"); a change that loses ground fails.
TUNING_FLOOR, HELD_OUT_FLOOR, EXTRA_FLOOR = 0.87, 0.67, 0.92


@pytest.mark.parametrize(("text", "canonical", "category", "dotted"), [
    ("428.0", "4280", "428", "428.0"),
    ("4280", "4280", "428", "428.0"),
    ("428", "428", "428", "428"),
    ("250.00", "25000", "250", "250.00"),
    ("38.9", "0389", "038", "038.9"),
    ("E815.0", "E8150", "E815", "E815.0"),
    ("e8150", "E8150", "E815", "E815.0"),
    ("E815", "E815", "E815", "E815"),
    ("V45.1", "V451", "V45", "V45.1"),
    ("v4511", "V4511", "V45", "V45.11"),
    (" V45 ", "V45", "V45", "V45"),
])
def test_codes_normalise_with_or_without_the_dot(text, canonical, category, dotted):
    assert icd9.normalise_code(text) == canonical
    assert icd9.category(text) == category
    assert icd9.display_code(text) == dotted


@pytest.mark.parametrize("text", ["hypertension", "4280.1", "E81500", "", "428.000", "X12"])
def test_names_and_malformed_codes_are_not_codes(text):
    assert icd9.normalise_code(text) is None
    with pytest.raises(icd9.Icd9Error, match="not an ICD-9 code"):
        icd9.category(text)


def test_the_2015_list_is_complete_and_looked_up_by_any_spelling():
    assert len(icd9.entries()) == 17553
    assert icd9.lookup("401.9").description == "Unspecified essential hypertension"
    assert icd9.lookup("E8150").code == "E8150" and icd9.lookup("v45").description == "Other postprocedural states"
    assert icd9.lookup("999.99") is None


@pytest.fixture(scope="module")
def mapper():
    return icd9.Icd9Mapper()


def test_hypertension_never_maps_to_hypotension(mapper):
    for text in ("hypertension", "Hypertension", "essential hypertension", "Hypertension (HTN)",
                 "arterial hypertension"):
        mapping = mapper.map(text)
        # 401-405 are the hypertensive diseases; 458 is hypotension, never even shortlisted
        assert mapping.category in {"401", "402", "403", "404", "405"}, (text, mapping)
        assert not any(c.code.startswith("458") for c in mapping.candidates)
    assert mapper.map("hypertension").category == mapper.map("Hypertension (HTN)").category == "401"
    assert mapper.map("Endometritis").category != "617"  # endometriosis, the same stem's other disease
    assert mapper.map("hypotension").category == "458"
    assert all(not c.code.startswith("401") for c in mapper.map("hypotension").candidates)


@pytest.mark.parametrize(("name", "category", "method"), [
    ("Myasthenia gravis", "358", "exact"), ("Pneumonia", "486", "exact"), ("Asthma", "493", "exact"),
    ("Congestive heart failure", "428", "exact"), ("Acute myocardial infarction", "410", "exact"),
    ("Pancreatic adenocarcinoma", "157", "exact"), ("Endometriosis", "617", "exact"),
    # ICD-10-CM names the 2015 list words otherwise ("Acute infective polyneuritis"), crosswalked by the GEM
    ("Guillain-Barre syndrome", "357", "crosswalk"),
    # the name an ICD-10-CM excludes note points to a code with: "glue ear (H65.3)" under H65.4
    ("Glue ear", "381", "synonym"),
    # an ICD-10-CM inclusion term: "Crohn's disease NOS" under K50.90
    ("Crohn's disease", "555", "synonym"), ("Lung cancer", "162", "synonym"), ("Hemophilia A", "286", "synonym"),
    # an abbreviation the lists spell out in brackets: Multiple endocrine neoplasia [MEN] type I
    ("MEN1", "258", "exact"),
])
def test_names_map_through_the_vocabularies_and_record_how(mapper, name, category, method):
    mapping = mapper.map(name)
    assert (mapping.category, mapping.method) == (category, method), mapping
    assert 0 < mapping.confidence <= 1 and mapping.candidates and mapping.matched
    assert mapping.candidates[0].source in {"exact", "synonym", "crosswalk"}


@pytest.mark.parametrize(("name", "category"), [
    ("Chronic kidney failure", "585"), ("Acute kidney failure", "584"),
    ("Chronic pancreatitis", "577"), ("Acute pancreatitis", "577"),
    ("Chronic lymphocytic leukemia", "204"), ("Acute lymphoblastic leukemia", "204"),
    ("Chronic myeloid leukemia", "205"), ("Acute myelogenous leukemia", "205"),
])
def test_acute_and_chronic_are_meaning(mapper, name, category):
    mapping = mapper.map(name)
    assert mapping.category == category, mapping
    said = {"acute", "chronic"} & set(name.lower().split())
    assert said <= set(mapping.matched.lower().replace(",", " ").split()), mapping  # the name it came through says so
    assert mapper.map("Chronic kidney failure").code == "5859" and mapper.map("Acute kidney failure").code == "584"


@pytest.mark.parametrize(("name", "look_alike"), [
    ("fibroadenoma", "125"),  # filariasis
    ("adenomatous polyp", "783"),  # polyphagia
    ("pseudocyesis", "372"),  # pseudopterygium
    ("atrial myxoma", "427"),  # atrial flutter
    ("keratoacanthoma", "371"),  # keratomalacia
    ("Crohn's disease", "341"),  # Schilder's disease
    ("MEN1", "781"),  # meningismus
    ("Bed bug bite", "707"),  # bed sore: a shared word, another thing
])
def test_look_alikes_are_refused_by_meaning(mapper, name, look_alike):
    mapping = mapper.map(name)
    assert mapping.category != look_alike, mapping
    assert not any(icd9.category(c.code) == look_alike and c.complete for c in mapping.candidates)
    if mapping.method == "embedding":
        assert max(c.similarity for c in mapping.candidates) >= icd9.EMBEDDING_FLOOR
    if mapping.code is None:
        assert mapping.method == "unmapped" and mapping.note


def test_pointer_notes_give_a_name_and_its_one_code():
    notes = [
        "reactive arthritis (M02.3)",
        "respiratory distress syndrome in newborn (perinatal) (P22.0)",
        "chronic kidney disease (N18.-)",
        "sepsis following abortion (O03.37, O03.87)",  # several codes: no single code to name
        "mycoses (B35-B49)",  # a range
        "myocarditis (in):",  # a heading: the notes after it are fragments of it
        "acute (B57.0)",
    ]
    assert pointed_names(notes) == [("reactive arthritis", "M02.3"),
                                    ("respiratory distress syndrome in newborn (perinatal)", "P22.0"),
                                    ("chronic kidney disease", "N18")]
    # a "code first" note is one text: a heading line, then one name a line
    assert pointed_names(["underlying disease, such as:\nleprosy [Hansen's disease] (A30.-)\nmycoses (B35-B49)"]) == [
        ("leprosy [Hansen's disease]", "A30")]


def test_the_gem_gives_a_combinations_underlying_disease_and_every_alternative():
    gem = gem_icd10_to_icd9()
    assert gem["M0230"] == ("0993",)  # Reiter's disease: 099.3 with the manifestation 711.10, which comes second
    assert set(gem["J449"]) == {"49120", "49320", "496"}  # COPD, unspecified: three alternatives, all kept
    assert gem["A000"] == ("0010",)  # cholera due to Vibrio cholerae 01, one to one


@pytest.mark.parametrize(("category", "unspecified"), [
    ("E03", "E03.9"),  # "Other hypothyroidism" -> "Hypothyroidism, unspecified"
    ("J18", "J18.9"),  # the child with the category's own title, not J18.0 (also "unspecified organism")
    ("M02.3", "M02.30"),  # "Reiter's disease, unspecified site", not a laterality's "unspecified shoulder"
])
def test_a_category_name_is_coded_to_its_unspecified_child(category, unspecified):
    assert unspecified_descendant(category) == unspecified


def test_names_carry_the_situation_of_the_titles_above_their_code():
    plain = term("Intraventricular hemorrhage unspecified grade", "77210", "exact", "77210")
    placed = term("Intraventricular hemorrhage unspecified grade", "77210", "exact", "77210",
                  ("Intraventricular hemorrhage of fetus or newborn", "Fetal and neonatal hemorrhage"))
    assert plain.situation == () and set(placed.situation) == {"fetal", "newborn"}
    assert term("endo (myo) metritis", "6159", "synonym", "N71").words == name_words("endometritis")
    assert name_words("Eczematous dermatitis") == name_words("eczema dermatitis")


@pytest.mark.parametrize(("name", "category", "not_category"), [
    ("Reactive arthritis", "099", "711"),  # Reiter's disease, not the arthropathy manifestation code
    ("Hypothyroidism", "244", "243"),  # acquired, unspecified; not the congenital 243 most E03 children map to
    ("Chronic obstructive pulmonary disease", "496", "491"),  # the least specific of the GEM's alternatives
    ("Intraventricular hemorrhage", "431", "772"),  # 772.1x is the newborn's, said by the title above it
    ("Endometritis", "615", "621"),  # N71's "endo (myo) metritis", not hyperplastic endometritis
    ("Leigh's encephalopathy", "330", None),  # only an excludes note names it: "Leigh's encephalopathy (G31.82)"
])
def test_the_tabular_lists_own_rules_choose_the_code(mapper, name, category, not_category):
    mapping = mapper.map(name)
    assert mapping.category == category and mapping.method in {"exact", "synonym", "crosswalk"}, mapping
    assert not_category is None or mapping.category != not_category


def test_one_word_prefix_forms_sides_and_injuries_follow_the_lists(mapper):
    vocabulary = icd9._vocabulary()
    assert vocabulary.prefixes_apart(name_words("Preeclampsia")) == name_words("Pre-eclampsia")
    assert vocabulary.prefixes_apart(name_words("Pretibial myxedema")) == name_words("Pretibial myxedema")  # known
    assert mapper.map("Preeclampsia").category == "642"
    # ICD-9 codes no side: the side is dropped only when no name holds it, and a name stating the other side is
    # no match ("hypertrophy of right ventricle", tetralogy of Fallot, for the left ventricle)
    assert mapper.map("Right hip fracture").category == mapper.map("Hip fracture").category == "820"
    assert mapper.map("Left ventricular hypertrophy").category == "429"
    assert "left" in mapper.map("Left knee osteoarthritis").matched.lower()  # held by an ICD-10-CM name: kept
    # "Fracture of hip NOS" points to S72.00-, billable only with a 7th character: the initial encounter's GEM
    # (820.8), not the subsequent encounter's aftercare code (V54.13)
    hip = mapper.map("Hip fracture")
    assert (hip.code, hip.matched) == ("8208", "Fracture of hip NOS")
    assert [c.listed_under for c in hip.candidates if c.code == hip.code] == ["S72.00"]


def test_a_name_only_the_embedding_places_says_so(mapper):
    mapping = mapper.map("Acute Mesenteric Ischemia")  # no vocabulary name holds all three words
    assert (mapping.method, mapping.category) == ("embedding", "557"), mapping
    assert mapping.confidence == max(c.similarity for c in mapping.candidates) >= icd9.EMBEDDING_FLOOR
    assert not any(c.complete for c in mapping.candidates)
    refused = mapper.map("atrial myxoma")  # only "atrial" is known, and what shares it means something else
    assert refused.method == "unmapped" and "below" in refused.note


def test_codes_pass_through_the_mapper(mapper):
    for text, code in (("428.0", "4280"), ("4280", "4280"), ("E815.0", "E8150"), ("V45.1", "V451")):
        mapping = mapper.map(text)
        assert (mapping.code, mapping.method, mapping.confidence) == (code, "code", 1.0)
    odd = mapper.map("799.99")
    assert odd.code == "79999" and "not in the 2015 list" in odd.note


def _backend(server):
    return OpenAIChatBackend(base_url=server.url, model="fake-coder", api_key_env="MEDEVAL_TEST_NO_KEY",
                             retry_initial_s=0.01, retry_max_s=0.05, timeout_s=10)


def test_llm_choice_is_made_within_the_shortlist_over_http(mapper):
    replies = [Reply(content='{"code": "999.9", "confidence": 0.9}'),  # outside the shortlist: asked again
               Reply(content='{"code": "401.9", "confidence": 0.8}')]
    calls = []
    with FakeOpenAI(lambda request: replies.pop(0)) as server:
        chooser = icd9.LLMChooser(_backend(server), on_call=calls.append)
        mapping = icd9.Icd9Mapper(chooser=chooser, method="llm").map("hypertension")
        prompts = [r.text() for r in server.chat_requests()]
    assert (mapping.code, mapping.category, mapping.method, mapping.confidence) == ("4019", "401", "llm", 0.8)
    assert "458" not in prompts[0] and "Hypotension" not in prompts[0]  # the near miss is never offered
    assert "401.9: Unspecified essential hypertension" in prompts[0]
    assert "'999.9' is not one of the candidate codes" in prompts[1]
    assert len(calls) == 2 and {c.role for c in calls} == {"coder"}


def test_llm_choice_may_find_no_code_and_fails_after_bad_replies(mapper):
    with FakeOpenAI(Reply(content='{"code": null, "confidence": 0}')) as server:
        mapping = icd9.Icd9Mapper(chooser=icd9.LLMChooser(_backend(server)), method="llm").map("Meigs syndrome")
    assert mapping.code is None and mapping.method == "unmapped" and mapping.candidates
    with (FakeOpenAI(Reply(content="four hundred one")) as server,
          pytest.raises(ReplyFormatError, match="coder model gave no valid reply in 2 tries")):
        icd9.Icd9Mapper(chooser=icd9.LLMChooser(_backend(server), max_invalid=1), method="llm").map("asthma")


def test_hit_and_recall_by_hand():
    truth = ["428", "401", "250"]
    ranked = ["486", "428", None, "428", "493", "401", "038", "V45", "E815", "250", "599"]
    # top 5: 486, 428, (unmapped), 428, 493 -> one of three truth categories
    assert hit_rec_at(ranked, truth, 5) == (1.0, pytest.approx(1 / 3))
    # top 10 adds 401 and 250 -> all three
    assert hit_rec_at(ranked, truth, 10) == (1.0, 1.0)
    assert matched(ranked, truth, 5) == ["428"] and matched(ranked, truth, 10) == ["428", "401", "250"]
    assert case_metrics(["493"], ["428"]) == {"Hit@5": 0.0, "Rec@5": 0.0, "Hit@10": 0.0, "Rec@10": 0.0}
    assert hit_rec_at(["428"], [], 5) == (0.0, 0.0)
    # the sixth prediction is outside the top 5
    assert hit_rec_at(["1", "2", "3", "4", "5", "428"], ["428"], 5) == (0.0, 0.0)
    with pytest.raises(ValueError, match="k must be at least 1"):
        hit_rec_at([], ["428"], 0)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_score_files_with_e_and_v_codes_and_names(tmp_path):
    truth = _write(tmp_path / "truth.jsonl", [
        {"case_id": "a", "codes": ["428.0", "401.9"]},
        {"case_id": "b", "codes": ["E815.0"]},
        {"case_id": "c", "codes": ["V45.11", "250.00"]},
        {"case_id": "d", "codes": ["486"]},
    ])
    predictions = _write(tmp_path / "predictions.jsonl", [
        # a: 4281 is category 428 (dotless); hypertension by name, at rank 7 (outside the top 5)
        {"case_id": "a", "predictions": ["4281", "493.90", "486", "491.21", "518.81", "276.51", "hypertension"]},
        # b: E816 is another E category (4 characters), E8159 the same one
        {"case_id": "b", "predictions": ["E816.0", "E8159"]},
        # c: V45 matches V45.11; the dragon is unmapped
        {"case_id": "c", "predictions": ["dragon scale fever of the gnomes", "V45"]},
        {"case_id": "x", "predictions": ["486"]},
    ])
    report = score_files(predictions, truth)
    assert report.per_case["a"] == {"Hit@5": 1.0, "Rec@5": 0.5, "Hit@10": 1.0, "Rec@10": 1.0}
    assert report.per_case["b"] == {"Hit@5": 1.0, "Rec@5": 1.0, "Hit@10": 1.0, "Rec@10": 1.0}
    assert report.per_case["c"] == {"Hit@5": 1.0, "Rec@5": 0.5, "Hit@10": 1.0, "Rec@10": 0.5}
    assert report.per_case["d"] == {"Hit@5": 0.0, "Rec@5": 0.0, "Hit@10": 0.0, "Rec@10": 0.0}
    assert report.metrics == {"Hit@5": 0.75, "Hit@10": 0.75, "Rec@5": pytest.approx(0.5),
                              "Rec@10": pytest.approx(0.625)}
    assert report.missing_predictions == ["d"] and report.unknown_cases == ["x"]
    assert report.mapped_names["hypertension"] == "401"
    # a name is either mapped or listed as unmapped, never lost
    assert set(report.mapped_names) | set(report.unmapped) == {"hypertension", "dragon scale fever of the gnomes"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medeval_core", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)


def test_score_hitk_command_prints_fractions_and_unmapped_names(tmp_path):
    truth = _write(tmp_path / "truth.jsonl", [{"case_id": 1, "codes": ["401.9"]}, {"case_id": 2, "codes": ["V45"]}])
    predictions = _write(tmp_path / "p.jsonl", [{"case_id": 1, "predictions": ["hypotension", "hypertension"]},
                                                {"case_id": 2, "predictions": ["zzzzqqq xxyy"]}])
    done = _cli("score", "hitk", "--predictions", str(predictions), "--truth", str(truth), "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert {key: figures[key] for key in ("Hit@5", "Hit@10", "Rec@5", "Rec@10", "n")} == {
        "Hit@5": 0.5, "Hit@10": 0.5, "Rec@5": 0.5, "Rec@10": 0.5, "n": 2}
    assert all(0 <= figures[key] <= 1 for key in ("Hit@5", "Hit@10", "Rec@5", "Rec@10"))
    for name in figures["unmapped"]:
        assert f"unmapped: {name}" in done.stderr
    bad = _write(tmp_path / "bad.jsonl", [{"case_id": 1, "codes": ["not a code"]}])
    refused = _cli("score", "hitk", "--predictions", str(predictions), "--truth", str(bad))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().count("\n") == 0 and "'not a code' is not an ICD-9 code" in refused.stderr


def _hand_coded(name: str) -> list[dict[str, str]]:
    with (REPO_ROOT / "tests" / "data" / name).open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _held_out(diagnosis: str) -> bool:
    """The fixed rule that split the AgentClinic set: a third, by the first byte of the name's sha256."""
    return hashlib.sha256(" ".join(diagnosis.lower().split()).encode("utf-8")).digest()[0] % 3 == 0


def _rate(mapper, rows: list[dict[str, str]], label: str) -> float:
    hits = [row["diagnosis"] for row in rows if mapper.map(row["diagnosis"]).category == icd9.category(row["icd9"])]
    rate = len(hits) / len(rows)
    print(f"ICD-9 mapper exact category, {label}: {len(hits)}/{len(rows)} = {rate:.1%}")
    return rate


def test_hand_coded_sets_are_whole_and_valid():
    agentclinic = _hand_coded("icd9_hand_coded_agentclinic.csv")
    cases = [json.loads(line)["OSCE_Examination"]["Correct_Diagnosis"]
             for line in (Path(os.environ.get("MEDEVAL_DATA_DIR", "/work/shared/data")) / "agentclinic"
                          / "agentclinic_medqa.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert {row["diagnosis"] for row in agentclinic} == set(cases)  # every final diagnosis of the shared cases
    assert all(row["part"] == ("held-out" if _held_out(row["diagnosis"]) else "tuning") for row in agentclinic)
    extra = _hand_coded("icd9_hand_coded_extra.csv")
    assert not {row["diagnosis"].lower() for row in extra} & {name.lower() for name in cases}
    for row in agentclinic + extra:
        entry = icd9.lookup(row["icd9"])
        assert entry is not None and entry.billable and row["reason"].strip(), row


def test_exact_category_rate_on_hand_coded_diagnoses(mapper):
    """The figures in the README: exact ICD-9 category against codes assigned by hand, on the AgentClinic final
    diagnoses (tuning part, and the held-out third no tuning read) and on common diagnoses from elsewhere."""
    agentclinic = _hand_coded("icd9_hand_coded_agentclinic.csv")
    tuning = _rate(mapper, [row for row in agentclinic if row["part"] == "tuning"], "AgentClinic tuning part")
    held_out = _rate(mapper, [row for row in agentclinic if row["part"] == "held-out"], "AgentClinic held-out part")
    extra = _rate(mapper, _hand_coded("icd9_hand_coded_extra.csv"), "common diagnoses from elsewhere")
    # Goals are 0.90 (tuning) and 0.85 (held-out); the floors below are what this mapper reaches (README), so a
    # change that loses ground fails.
    assert tuning >= TUNING_FLOOR and held_out >= HELD_OUT_FLOOR and extra >= EXTRA_FLOOR


def test_score_hitk_prints_method_shares_and_flags_mapped_truth(tmp_path):
    truth = _write(tmp_path / "records.jsonl", [
        {"case_id": "a", "icd9": [{"code": "585.9", "name": "Chronic kidney disease", "method": "synonym"}]},
        {"case_id": "b", "icd9": ["486"]},
    ])
    predictions = _write(tmp_path / "p.jsonl", [
        {"case_id": "a", "predictions": ["Chronic kidney failure", "Guillain-Barre syndrome"]},
        {"case_id": "b", "predictions": ["Pneumonia"]},
    ])
    done = _cli("score", "hitk", "--predictions", str(predictions), "--truth", str(truth))
    assert done.returncode == 0, done.stderr
    assert "Predicted names mapped by: " in done.stdout
    assert "synonym 33% (1)" in done.stdout and "crosswalk 33% (1)" in done.stdout and "exact 33% (1)" in done.stdout
    assert "Ground truth of 1 of 2 cases is mapped from free-text diagnoses, not hand-coded (synonym 100% (1))." \
        in done.stdout
    figures = json.loads(_cli("score", "hitk", "--predictions", str(predictions), "--truth", str(truth),
                              "--json").stdout)
    assert figures["name_methods"] == {"synonym": 1, "crosswalk": 1, "exact": 1}
    assert figures["truth_mapped"] == {"synonym": 1} and figures["Hit@5"] == 1.0


def test_mapped_truth_is_counted_by_method_and_given_codes_are_not():
    methods = [["synonym"], ["given"], ["given", "embedding"], ["corrected"], []]
    assert mapped_truth_methods(methods) == {"synonym": 1, "embedding": 1}
    assert mapped_truth_note({"synonym": 1, "embedding": 1}, 5) == (
        "Ground truth of 2 of 5 cases is mapped from free-text diagnoses, not hand-coded (synonym 50% (1), "
        "embedding 50% (1)).")
    assert mapped_truth_note({}, 5) == ""
