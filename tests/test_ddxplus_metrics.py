"""DDXPlus metrics: hand-worked patients, and the vectorised scorer against a plain-Python reference.

The reference below reads the raw files with csv/ast/json only and follows design.md §3.2 one patient at a
time, so it shares no code with medeval_core.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from medeval_core.benchmarks.ddxplus.kb import load_kb
from medeval_core.benchmarks.ddxplus.metrics import (
    METRIC_KEYS,
    Entries,
    GroundTruth,
    pack_roots,
    patient_metrics,
    per_patient,
)
from medeval_core.benchmarks.ddxplus.patients import load_patients
from medeval_core.benchmarks.ddxplus.scoring import PredictionFileError, read_predictions, score
from tests.ddxplus_fixtures import ddxplus_dir, sample_csv, write_patients

THRESHOLD = 0.01


# Plain-Python reference ------------------------------------------------------------------------------------


def reference_scores(kb_dir: Path, patients_csv: Path, predictions_jsonl: Path) -> dict[str, float]:
    evidences = json.loads((kb_dir / "release_evidences.json").read_text(encoding="utf-8"))
    # The official pathology index (mila-iqia/ddxplus sim_utils.load_and_check_data): sorted condition keys; the
    # official top is np.argsort(final_diags)[:, ::-1][:, 0]; a name outside the KB sharing the top wins.
    official_index = {key: i for i, key in enumerate(sorted(json.loads(
        (kb_dir / "release_conditions.json").read_text(encoding="utf-8"))))}
    with patients_csv.open(newline="", encoding="utf-8") as handle:
        patients = list(csv.DictReader(handle))
    predictions = {}
    for line in predictions_jsonl.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            predictions[record["index"]] = record
    totals = {key: [] for key in METRIC_KEYS}
    for index, patient in enumerate(patients):
        gt = {name for name, mass in ast.literal_eval(patient["DIFFERENTIAL_DIAGNOSIS"]) if mass > THRESHOLD}
        record = predictions.get(index, {"differential": {}, "inquired": []})
        differential = record["differential"]
        if isinstance(differential, list):
            differential = dict(differential)
        total = sum(differential.values())
        if total > 0 and abs(total - 1) > 1e-6:  # design.md §3.2: normalised to sum 1 before the cut
            differential = {name: mass / total for name, mass in differential.items()}
        pred = {name for name, mass in differential.items() if mass > THRESHOLD}
        tp = len(gt & pred)
        ddr = tp / len(gt) * 100 if gt else 0.0
        ddp = tp / len(pred) * 100 if pred else 0.0
        ddf1 = 2 * ddr * ddp / (ddr + ddp) if ddr + ddp > 0 else 0.0
        truth = patient["PATHOLOGY"]
        top = None
        if differential:
            best = max(differential.values())
            at_top = [name for name, mass in differential.items() if mass == best]
            outside = [name for name in at_top if name not in official_index]
            final_diags = np.zeros((1, len(official_index)))
            for name, mass in differential.items():
                if name in official_index:
                    final_diags[0, official_index[name]] = mass
            top = outside[0] if outside else sorted(official_index)[np.argsort(final_diags, axis=-1)[:, ::-1][0, 0]]
        present = set()
        for code in ast.literal_eval(patient["EVIDENCES"]):
            root, _, value = code.partition("_@_")
            entry = evidences[root]
            if entry["data_type"] == "B" or value != str(entry["default_value"]):
                present.add(root)
        inquired = {code.partition("_@_")[0] for code in record.get("inquired", [])}
        inquired.add(patient["INITIAL_EVIDENCE"])
        per = len(inquired & present) / len(present) * 100 if present else 0.0
        values = {
            "DDR": ddr, "DDP": ddp, "DDF1": ddf1,
            "GTPA": 100.0 if truth in pred else 0.0,
            "GTPA@1": 100.0 if truth in pred and top == truth else 0.0,
            "PER": per, "IL": len(record.get("inquired", [])) + 1,
        }
        for key, value in values.items():
            totals[key].append(value)
    return {key: sum(values) / len(values) for key, values in totals.items()}


# Hand-worked patients ----------------------------------------------------------------------------------------

HAND_PATIENTS = [
    # 0: multi-choice root with two values, a default-only multi-choice root, a default categorical root.
    [40, [["Pneumonia", 0.5], ["Bronchitis", 0.3], ["URTI", 0.19], ["Influenza", 0.01], ["Tuberculosis", 0.0]],
     "M", "Pneumonia", ["E_53", "E_55_@_V_89", "E_55_@_V_62", "E_57_@_V_123", "E_204_@_V_10", "E_91"], "E_91"],
    # 1: empty prediction.
    [25, [["URTI", 0.6], ["Influenza", 0.4]], "F", "URTI", ["E_91", "E_201"], "E_201"],
    # 2 and 3: a tie at the top mass, the true pathology listed second (2) or first (3); URTI sorts after
    # Pneumonia, so it is the official top in both.
    [60, [["Pneumonia", 0.7], ["Bronchitis", 0.3]], "F", "Pneumonia", ["E_91"], "E_91"],
    [60, [["Pneumonia", 0.7], ["Bronchitis", 0.3]], "F", "Pneumonia", ["E_91"], "E_91"],
    # 4: the true pathology is the top but carries exactly the threshold mass.
    [5, [["Croup", 0.9], ["Bronchiolitis", 0.1]], "M", "Croup", ["E_91", "E_56_@_0"], "E_91"],
]
HAND_PREDICTIONS = [
    {"index": 0, "differential": {"Bronchitis": 0.6, "Pneumonia": 0.3, "Influenza": 0.1, "Tuberculosis": 0.0},
     "inquired": ["E_55", "E_204", "E_57_@_V_123"]},
    {"index": 1, "differential": {}, "inquired": []},
    {"index": 2, "differential": {"URTI": 0.4, "Pneumonia": 0.4, "Bronchitis": 0.2}, "inquired": ["E_91"]},
    {"index": 3, "differential": [["Pneumonia", 0.4], ["URTI", 0.4], ["Bronchitis", 0.2]], "inquired": []},
    {"index": 4, "differential": {"Croup": 0.01, "Bronchiolitis": 0.99}, "inquired": ["E_56", "E_56"]},
]
# Worked by hand from design.md §3.2.
HAND_EXPECTED = [
    # GT {Pneumonia, Bronchitis, URTI}; P {Bronchitis, Pneumonia, Influenza}; present {E_53, E_55, E_91},
    # inquired {E_55, E_204, E_57, E_91}.
    {"DDR": 200 / 3, "DDP": 200 / 3, "DDF1": 200 / 3, "GTPA": 100.0, "GTPA@1": 0.0, "PER": 200 / 3, "IL": 4.0},
    {"DDR": 0.0, "DDP": 0.0, "DDF1": 0.0, "GTPA": 0.0, "GTPA@1": 0.0, "PER": 50.0, "IL": 1.0},
    {"DDR": 100.0, "DDP": 200 / 3, "DDF1": 80.0, "GTPA": 100.0, "GTPA@1": 0.0, "PER": 100.0, "IL": 2.0},
    {"DDR": 100.0, "DDP": 200 / 3, "DDF1": 80.0, "GTPA": 100.0, "GTPA@1": 0.0, "PER": 100.0, "IL": 1.0},
    # E_56_@_0 is the default intensity: not present. P is {Bronchiolitis} (Croup's 0.01 is not above the
    # threshold); E_56 asked twice is two turns.
    {"DDR": 50.0, "DDP": 100.0, "DDF1": 200 / 3, "GTPA": 0.0, "GTPA@1": 0.0, "PER": 100.0, "IL": 3.0},
]


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def test_hand_worked_patients(tmp_path, kb):
    patients = load_patients(write_patients(tmp_path / "p.csv", HAND_PATIENTS), kb)
    assert patients.report.n_skipped == 0
    report = score(patients, read_predictions(_write_jsonl(tmp_path / "p.jsonl", HAND_PREDICTIONS), patients))
    for i, expected in enumerate(HAND_EXPECTED):
        got = {key: float(report.per_patient[key][i]) for key in METRIC_KEYS}
        assert got == pytest.approx(expected, abs=1e-12), f"patient {i}"
    for key in METRIC_KEYS:
        assert report.metrics[key] == pytest.approx(sum(e[key] for e in HAND_EXPECTED) / 5, abs=1e-12)
    assert report.metrics == pytest.approx(
        reference_scores(ddxplus_dir(), tmp_path / "p.csv", tmp_path / "p.jsonl"), abs=1e-12)


def test_missing_line_is_an_empty_prediction_with_a_warning(tmp_path, kb):
    patients = load_patients(write_patients(tmp_path / "p.csv", HAND_PATIENTS), kb)
    predictions = read_predictions(_write_jsonl(tmp_path / "p.jsonl", HAND_PREDICTIONS[:1]), patients)
    assert any("no prediction line" in warning and "IL = 1" in warning for warning in predictions.warnings)
    report = score(patients, predictions)
    assert report.per_patient["IL"].tolist() == [4.0, 1.0, 1.0, 1.0, 1.0]
    assert report.per_patient["DDF1"][1:].tolist() == [0.0] * 4
    # Only the initial evidence counts as inquired for a patient without a line.
    assert report.per_patient["PER"][1] == 50.0


def _listing(mass, order=None):
    """Entries of a dense mass matrix (zero cells left out), listed by ``order`` (default: column order)."""
    mass = np.asarray(mass, dtype=float)
    order = np.tile(np.arange(mass.shape[1]), (len(mass), 1)) if order is None else np.asarray(order)
    return Entries.from_lists([[(int(c), float(row[c])) for c in np.argsort(rank, kind="stable") if row[c] != 0]
                               for row, rank in zip(mass, order, strict=True)])


def _truth(gt_mass, pathology, present=None):
    gt_mass = np.asarray(gt_mass, dtype=float)
    present = np.ones((len(gt_mass), 1), bool) if present is None else present
    return GroundTruth.prepare(gt_mass.shape[1], Entries.from_dense(gt_mass), np.asarray(pathology), present)


def test_top_ties_follow_the_official_index_whatever_the_listing_order():
    # Patients 0 and 1: a tie between columns 0 and 1, listed either way; patient 2: columns 1 and 2.
    mass = [[0.4, 0.4, 0.2], [0.4, 0.4, 0.2], [0.1, 0.5, 0.5]]
    order = [[1, 0, 2], [0, 1, 2], [0, 2, 1]]
    inquired, questions = np.ones((3, 1), bool), np.zeros(3)
    for listing in (_listing(mass, order), _listing(mass)):
        # Column order as the index: the higher column wins.
        assert per_patient(_truth(mass, [1, 1, 2]), listing, inquired, questions)["GTPA@1"].tolist() == [100] * 3
        assert per_patient(_truth(mass, [0, 0, 1]), listing, inquired, questions)["GTPA@1"].tolist() == [0] * 3
        # An official index that reverses the columns: the lower column wins.
        reversed_rank = GroundTruth.prepare(3, Entries.from_dense(np.asarray(mass)), np.asarray([0, 0, 1]),
                                            np.ones((3, 1), bool), tie_rank=np.asarray([2, 1, 0]))
        assert per_patient(reversed_rank, listing, inquired, questions)["GTPA@1"].tolist() == [100] * 3


def test_a_shared_top_is_what_the_official_expression_picks(kb):
    """Crafted ties over the 49 real pathologies, listed in random order: the top the metrics credit is what the
    official ``np.argsort(final_diags)[:, ::-1][:, 0]`` picks over the official index (sorted keys)."""
    rng = np.random.default_rng(11)
    n = kb.n_pathologies
    official = np.argsort(kb.tie_rank)  # official index -> KB column
    dense = rng.random((400, n)) * (rng.random((400, n)) < 0.3)
    for row in dense:
        tied = rng.choice(n, rng.integers(2, 5), replace=False)
        row[tied] = row.max() + 0.5
    dense /= dense.sum(axis=1, keepdims=True)
    final_diags = dense[:, official]  # the official layout: column j is the pathology with index j
    expected_top = official[np.argsort(final_diags, axis=-1)[:, ::-1][:, 0]]
    tied = [set(np.flatnonzero(row == row.max())) for row in dense]
    assert all(top in ties for top, ties in zip(expected_top, tied, strict=True))
    # Not a fixed rule: neither the lowest nor the highest official index always wins.
    picked_highest = [kb.tie_rank[top] == max(kb.tie_rank[list(ties)]) for top, ties in zip(expected_top, tied,
                                                                                          strict=True)]
    assert any(picked_highest) and not all(picked_highest)
    present = np.ones((400, 1), bool)
    for truth in (expected_top, rng.integers(0, n, 400)):
        ground = GroundTruth.prepare(n, Entries.from_dense(dense), truth, present, tie_rank=kb.tie_rank)
        shuffled = _listing(dense, rng.permuted(np.tile(np.arange(n), (400, 1)), axis=1))
        got = per_patient(ground, shuffled, present, np.zeros(400))["GTPA@1"]
        np.testing.assert_array_equal(got, np.where(truth == expected_top, 100.0, 0.0))
        for i in range(20):
            pairs = [(kb.pathology_names[c], float(dense[i, c])) for c in np.flatnonzero(dense[i])[::-1]]
            single = patient_metrics(gt=pairs, pathology=kb.pathology_names[truth[i]], pred=pairs, present=set(),
                                     inquired=set(), n_questions=0, tie_rank=kb.tie_rank_of,
                                     n_pathologies=n)
            assert single["GTPA@1"] == got[i]


def test_names_outside_the_kb_count_in_p_and_can_take_the_top():
    pred = Entries.from_lists([[(0, 0.3), (1, 0.3), (2, 0.4)]])  # column 2: a name outside a 2-pathology KB
    values = per_patient(_truth([[0.6, 0.4]], [0]), pred, np.ones((1, 1), bool), np.zeros(1))
    assert values["DDR"][0] == 100.0 and values["DDP"][0] == pytest.approx(200 / 3)
    assert values["GTPA"][0] == 100.0 and values["GTPA@1"][0] == 0.0


def test_root_set_forms_agree_and_wide_kbs_use_several_words():
    rng = np.random.default_rng(3)
    present = rng.random((50, 130)) < 0.2
    present[:, 0] = True
    inquired = rng.random((50, 130)) < 0.3
    # 150 pathologies: the set bitmaps span three 64-column words.
    gt_mass = rng.random((50, 150)) * (rng.random((50, 150)) < 0.4)
    pred_mass = rng.random((50, 155)) * (rng.random((50, 155)) < 0.3)
    pathology = rng.integers(0, 150, 50)
    pred = _listing(pred_mass, rng.permuted(np.tile(np.arange(155), (50, 1)), axis=1))
    dense = per_patient(_truth(gt_mass, pathology, present), pred, inquired, np.zeros(50))
    packed = per_patient(_truth(gt_mass, pathology, present), pred, pack_roots(inquired), np.zeros(50))
    for key in METRIC_KEYS:
        np.testing.assert_array_equal(dense[key], packed[key])
    for i in range(50):
        gt_set = set(np.flatnonzero(gt_mass[i] > 0.01))
        pred_set = set(np.flatnonzero(pred_mass[i] > 0.01))
        tp = len(gt_set & pred_set & set(range(150)))
        assert dense["DDR"][i] == pytest.approx(tp / len(gt_set) * 100 if gt_set else 0.0, abs=1e-12)
        assert dense["DDP"][i] == pytest.approx(tp / len(pred_set) * 100 if pred_set else 0.0, abs=1e-12)
        hits = np.count_nonzero(present[i] & inquired[i]) / np.count_nonzero(present[i]) * 100
        assert dense["PER"][i] == pytest.approx(hits, abs=1e-12)


def _random_predictions(names: list[str], codes: list[str], n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    lines = []
    for index in range(n):
        if rng.random() < 0.05:
            continue  # missing line
        chosen = rng.sample(names, rng.randint(0, 12))
        style = rng.random()
        masses = {}
        for name in chosen:
            masses[name] = rng.choice([0.0, 0.01, 0.010000001, rng.random(), rng.random() / 50])
        if chosen and style < 0.3:
            top = max(masses.values())
            masses[rng.choice(chosen)] = top  # ties at the top
        if rng.random() < 0.05:
            masses["Not a pathology"] = rng.random()
        inquired = [rng.choice(codes) for _ in range(rng.randint(0, 29))]
        if rng.random() < 0.05:
            inquired.append("E_99999")
        differential = list(map(list, masses.items())) if style > 0.9 else masses
        lines.append({"index": index, "differential": differential, "inquired": inquired})
    rng.shuffle(lines)
    return lines


def test_vectorised_scores_match_plain_reference_on_sample(tmp_path, kb):
    names = kb.pathology_names
    codes = [*kb.roots, "E_55_@_V_89", "E_204_@_V_10", "E_54_@_V_161"]
    with sample_csv().open(newline="") as handle:
        n = sum(1 for _ in csv.DictReader(handle))
    patients = load_patients(sample_csv(), kb)
    for seed in range(3):
        path = _write_jsonl(tmp_path / f"pred{seed}.jsonl", _random_predictions(names, codes, n, seed))
        ours = score(patients, read_predictions(path, patients)).metrics
        theirs = reference_scores(ddxplus_dir(), sample_csv(), path)
        for key in METRIC_KEYS:
            assert math.isclose(ours[key], theirs[key], abs_tol=1e-9), (seed, key, ours[key], theirs[key])


def test_single_patient_function_matches_the_vectorised_scorer(tmp_path, kb):
    patients = load_patients(sample_csv(), kb)
    path = _write_jsonl(tmp_path / "pred.jsonl", _random_predictions(kb.pathology_names, kb.roots, len(patients), 7))
    report = score(patients, read_predictions(path, patients))
    records = {json.loads(line)["index"]: json.loads(line) for line in path.read_text().splitlines()}
    for i in range(len(patients)):
        record = records.get(i, {"differential": {}, "inquired": []})
        differential = record["differential"]
        pairs = [tuple(p) for p in differential] if isinstance(differential, list) else list(differential.items())
        single = patient_metrics(
            gt=list(patients.differential_pairs[i]), pathology=kb.pathology_names[patients.pathology[i]],
            pred=pairs, present={kb.roots[r] for r in np.flatnonzero(patients.present[i])},
            inquired={c.partition("_@_")[0] for c in record["inquired"]} | {kb.roots[patients.initial_root[i]]},
            n_questions=len(record["inquired"]), tie_rank=kb.tie_rank_of,
            n_pathologies=kb.n_pathologies,
        )
        for key in METRIC_KEYS:
            assert single[key] == pytest.approx(report.per_patient[key][i], abs=1e-12), (i, key)


def test_ground_truth_as_prediction_gives_perfect_differential(tmp_path, kb):
    patients = load_patients(sample_csv(), kb)
    with sample_csv().open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    lines = [{"index": i, "differential": ast.literal_eval(r["DIFFERENTIAL_DIAGNOSIS"]), "inquired": []}
             for i, r in enumerate(rows)]
    metrics = score(patients, read_predictions(_write_jsonl(tmp_path / "gt.jsonl", lines), patients)).metrics
    assert metrics["DDF1"] == metrics["DDR"] == metrics["DDP"] == 100.0
    assert 70 < metrics["GTPA@1"] < 78  # design.md: the exact GT differential gets GTPA@1 about 74


@pytest.mark.parametrize("line, message", [
    ("not json", "not valid JSON"),
    ('{"index": 0}', "needs an object"),
    ('{"index": 99, "differential": {}}', "not a row"),
    ('{"index": 0, "differential": {"URTI": "high"}}', "finite numbers"),
    ('{"index": 0, "differential": {"URTI": -0.2, "Pneumonia": 1.2}}', "-0.2; masses must be finite numbers of at "
                                                                        "least 0"),
    ('{"index": 0, "differential": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
    (json.dumps({"index": 0, "differential": {"URTI": 1.0}, "inquired": [f"E_{i}" for i in range(1, 224)]}),
     "inquires 223 evidences; the protocol allows at most 30 questions"),
    ('{"index": 0, "differential": {}, "inquired": "E_91"}', "list of evidence codes"),
])
def test_bad_prediction_lines_are_named(tmp_path, kb, line, message):
    patients = load_patients(write_patients(tmp_path / "p.csv", HAND_PATIENTS), kb)
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(PredictionFileError, match=message):
        read_predictions(path, patients)


def test_duplicate_index_is_an_error(tmp_path, kb):
    patients = load_patients(write_patients(tmp_path / "p.csv", HAND_PATIENTS), kb)
    path = _write_jsonl(tmp_path / "dup.jsonl", [HAND_PREDICTIONS[0], HAND_PREDICTIONS[0]])
    with pytest.raises(PredictionFileError, match="already has a prediction"):
        read_predictions(path, patients)


def test_score_command_json_has_exactly_the_seven_keys(tmp_path):
    kb_dir = ddxplus_dir()
    csv_path = write_patients(tmp_path / "p.csv", HAND_PATIENTS)
    jsonl = _write_jsonl(tmp_path / "p.jsonl", HAND_PREDICTIONS[:4])
    done = subprocess.run(
        [sys.executable, "-m", "medeval_core", "score", "ddxplus", "--patients", str(csv_path),
         "--predictions", str(jsonl), "--kb", str(kb_dir), "--json"],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert list(payload) == list(METRIC_KEYS)
    assert payload == pytest.approx(reference_scores(kb_dir, csv_path, jsonl), abs=1e-9)
    assert "no prediction line" in done.stderr


def test_score_command_reports_a_bad_file_in_one_sentence(tmp_path):
    csv_path = write_patients(tmp_path / "p.csv", HAND_PATIENTS)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "medeval_core", "score", "ddxplus", "--patients", str(csv_path),
         "--predictions", str(bad), "--kb", str(ddxplus_dir())],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: bad.jsonl line 1 is not valid JSON")


def test_a_differential_in_percent_scores_as_the_same_one_in_proportions(tmp_path, kb):
    """The ground truth given in percent used to score DDP 99.46: masses of 0.5-1 % were kept as above 0.01."""
    patients = load_patients(sample_csv(), kb)
    with sample_csv().open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    as_is = [{"index": i, "differential": ast.literal_eval(r["DIFFERENTIAL_DIAGNOSIS"]), "inquired": []}
             for i, r in enumerate(rows)]
    percent = [{**line, "differential": [[name, mass * 100] for name, mass in line["differential"]]}
               for line in as_is]
    proportions = score(patients, read_predictions(_write_jsonl(tmp_path / "gt.jsonl", as_is), patients))
    predictions = read_predictions(_write_jsonl(tmp_path / "percent.jsonl", percent), patients)
    in_percent = score(patients, predictions)
    assert in_percent.metrics == pytest.approx(proportions.metrics, abs=1e-9)
    assert in_percent.metrics["DDP"] == 100.0
    assert any(f"{len(rows)} differential(s) do not sum to 1" in w and "normalised" in w for w in predictions.warnings)
    assert not any("normalised" in w for w in read_predictions(tmp_path / "gt.jsonl", patients).warnings)


def test_a_repeated_question_counts_as_a_turn_with_a_warning(tmp_path, kb):
    patients = load_patients(write_patients(tmp_path / "p.csv", HAND_PATIENTS), kb)
    lines = [{"index": 1, "differential": {"URTI": 1.0}, "inquired": ["E_91", "E_91_@_V_1", "E_201"]},
             {"index": 2, "differential": {"Pneumonia": 1.0}, "inquired": ["E_91"]}]
    predictions = read_predictions(_write_jsonl(tmp_path / "p.jsonl", lines), patients)
    report = score(patients, predictions)
    assert report.per_patient["IL"][1] == 4.0 and report.per_patient["PER"][1] == 100.0
    assert any(w.startswith("1 patient(s) inquire the same evidence more than once") for w in predictions.warnings)


def test_predictions_that_are_not_utf8_are_named_in_one_line(tmp_path, kb):
    patients = load_patients(write_patients(tmp_path / "p.csv", HAND_PATIENTS), kb)
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"index": 0, "differential": {"URTI": 1.0}}\n{"index": 1, "differential": {"caf\xe9": 1}}\n')
    with pytest.raises(PredictionFileError, match=r"^latin1.jsonl line 2 is not UTF-8 text"):
        read_predictions(path, patients)
