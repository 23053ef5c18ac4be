"""DDXPlus at scale: the bulk loader and prediction reader against a plain per-patient reading.

The shared sample is replicated to a few thousand patients, with rows and prediction lines the bulk paths must
hand to their row-by-row rule books. Blocks are shrunk so that the files span dozens of them: what breaks at a
block boundary on the 134,529-patient test split breaks here too. The reference side reads the raw files with
csv/ast/json and scores one patient at a time (``patient_metrics``).
"""

from __future__ import annotations

import ast
import csv
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest

from medeval_core.benchmarks.ddxplus import patients as patients_module
from medeval_core.benchmarks.ddxplus import scoring as scoring_module
from medeval_core.benchmarks.ddxplus.kb import load_kb
from medeval_core.benchmarks.ddxplus.metrics import METRIC_KEYS, patient_metrics
from medeval_core.benchmarks.ddxplus.patients import load_patients
from medeval_core.benchmarks.ddxplus.scoring import (
    PredictionBuilder,
    PredictionFileError,
    parse_numbers,
    read_predictions,
    score,
)
from tests.ddxplus_fixtures import ddxplus_dir, hard_number_texts, sample_csv

COPIES = 4
# Rows (0-based, after the header) changed in the replicated file, and how the loader must take them.
SKIPPED = {
    101: ("unknown evidence code", lambda r: r.__setitem__(4, r[4].replace("'E_", "'X_", 1))),
    1500: ("bad sex", lambda r: r.__setitem__(2, "Q")),
    2222: ("pathology missing from the KB", lambda r: r.__setitem__(3, "Dragon pox")),
    3001: ("bad age", lambda r: r.__setitem__(0, "thirty")),
}
REREAD = {  # not as repr writes them, but valid: the row parser reads them
    700: lambda r: r.__setitem__(4, r[4].replace("', '", "',  '", 1)),
    2900: lambda r: r.__setitem__(1, r[1][:-1] + ", ]"),
    4000: lambda r: r.__setitem__(1, r[1].replace("[['", "[ ['", 1)),
}


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(patients_module, "_BLOCK_CHARS", 1 << 16)
    monkeypatch.setattr(patients_module, "_BLOCK_ROWS", 97)
    monkeypatch.setattr(scoring_module, "_BLOCK_CHARS", 1 << 14)


def _rows() -> tuple[list[str], list[list[str]]]:
    with sample_csv().open(newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    rows = [list(row) for row in rows * COPIES]
    for i, (_, change) in SKIPPED.items():
        change(rows[i])
    for i, change in REREAD.items():
        change(rows[i])
    return header, rows


def _write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    # The released files: every list cell quoted, CRLF line ends.
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8", newline="")
    return path


def _present(evidences: dict, codes: list[str]) -> set[str]:
    present = set()
    for code in codes:
        root, _, value = code.partition("_@_")
        if evidences[root]["data_type"] == "B" or value != str(evidences[root]["default_value"]):
            present.add(root)
    return present


def _predictions(path: Path, kb, rows: list[list[str]], seed: int) -> dict[int, dict]:
    """A prediction per row in every spelling the reader accepts; some rows have none. Returns them by row."""
    rng = random.Random(seed)
    names = [*kb.pathology_names, "IVRS ou virémie", "urti", "Not a pathology"]
    codes = [*kb.roots, "E_55_@_V_89", "E_99999"]
    records, lines = {}, []
    for row in range(len(rows)):
        if rng.random() < 0.03:
            continue
        masses = {name: rng.choice([0.0, 0.01, rng.random(), rng.random() / 50, 1]) for name in
                  rng.sample(names[:49], rng.randint(0, 6))}
        if rng.random() < 0.1:
            masses.pop("URTI", None)  # the aliases below are URTI's: naming it twice is an error
            masses[rng.choice(names[49:])] = rng.random()
        inquired = [rng.choice(codes) for _ in range(rng.randint(0, 9))]
        record = {"index": row, "differential": masses, "inquired": inquired}
        style = rng.random()
        if style < 0.7:
            line = json.dumps(record)
        elif style < 0.8:
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
        elif style < 0.9:
            line = json.dumps({**record, "differential": [[n, m] for n, m in masses.items()]})
        else:
            line = json.dumps({"inquired": record["inquired"], "index": row, "differential": masses})
        records[row] = record
        lines.append(line + ("\n\n" if rng.random() < 0.01 else "\n"))
    rng.shuffle(lines)
    path.write_text("".join(lines), encoding="utf-8")
    return records


def _reference(kb, rows: list[list[str]], loaded_rows: list[int], records: dict[int, dict]) -> dict[str, np.ndarray]:
    evidences = json.loads((ddxplus_dir() / "release_evidences.json").read_text(encoding="utf-8"))
    values = {key: [] for key in METRIC_KEYS}
    for row in loaded_rows:
        _, differential, _, pathology, cell, initial = rows[row]
        record = records.get(row, {"differential": {}, "inquired": []})
        pred = [((kb.pathology_names[k] if (k := kb.pathology_index(name)) is not None else name), mass)
                for name, mass in record["differential"].items()]
        metrics = patient_metrics(
            gt=[tuple(pair) for pair in ast.literal_eval(differential)], pathology=pathology, pred=pred,
            present=_present(evidences, [code.strip() for code in ast.literal_eval(cell)]),
            inquired={code.partition("_@_")[0] for code in record["inquired"]} | {initial},
            n_questions=len(record["inquired"]), tie_rank=kb.tie_rank_of,
            n_pathologies=kb.n_pathologies)
        for key in METRIC_KEYS:
            values[key].append(metrics[key])
    return {key: np.asarray(value) for key, value in values.items()}


@pytest.mark.parametrize("layout", ["released", "csv module"])
def test_replicated_file_loads_and_scores_as_patient_by_patient(tmp_path, kb, layout):
    header, rows = _rows()
    if layout == "csv module":
        rows[1234][1] = "[]"  # written unquoted: not the released layout, so the csv module reads the file
    patients = load_patients(_write(tmp_path / "p.csv", header, rows), kb)
    report = patients.report
    assert report.total_rows == len(rows) == COPIES * 1066
    assert dict(report.skipped) == {reason: 1 for reason, _ in SKIPPED.values()}
    loaded = [i for i in range(len(rows)) if i not in SKIPPED]
    assert patients.rows.tolist() == loaded
    for i, row in enumerate(loaded):
        patient = patients.patient(i)
        assert patient.evidences == tuple(code.strip() for code in ast.literal_eval(rows[row][4]))
        assert patient.differential == tuple(tuple(pair) for pair in ast.literal_eval(rows[row][1]))
        assert (patient.age, patient.pathology, patient.initial_evidence) == (int(rows[row][0]), rows[row][3],
                                                                            rows[row][5])

    records = _predictions(tmp_path / "p.jsonl", kb, rows, seed=len(layout))
    report = score(patients, read_predictions(tmp_path / "p.jsonl", patients))
    expected = _reference(kb, rows, loaded, records)
    for key in METRIC_KEYS:
        np.testing.assert_allclose(report.per_patient[key], expected[key], rtol=0, atol=1e-12, err_msg=key)
    missing = sum(row not in records for row in loaded)
    assert any(f"{missing} patient(s) have no prediction line" in warning for warning in report.warnings)
    skipped_lines = sum(row in records for row in SKIPPED)
    assert any(f"{skipped_lines} prediction line(s) are for rows the loader skipped" in warning
               for warning in report.warnings)


def test_the_first_bad_line_deep_in_a_large_file_is_the_one_named(tmp_path, kb):
    header, rows = _rows()
    patients = load_patients(_write(tmp_path / "p.csv", header, rows), kb)
    lines = [json.dumps({"index": row, "differential": {"URTI": 0.5}, "inquired": ["E_91"]}) for row in range(4000)]
    path = tmp_path / "bad.jsonl"
    for number, bad, message in [
        (3500, "{oops", "line 3500 is not valid JSON"),
        (2600, json.dumps({"index": 17, "differential": {}}), "line 2600: index 17 already has a prediction"),
        (1999, lines[1998].replace('"URTI"', '"URTI": 0.2, "IVRS ou virémie"'), "line 1999: the differential "
                                                                               "names 'URTI' twice"),
        (1000, lines[999].replace("0.5", "1e999"), "line 1000: the mass of 'URTI' is inf"),
        (400, lines[399].replace("0.5", "05"), "line 400 is not valid JSON"),
    ]:
        lines[number - 1] = bad
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        with pytest.raises(PredictionFileError, match=message):
            read_predictions(path, patients)


SPELLINGS = [
    '{"index": 0, "differential": {"URTI": -0, "Bronchitis": -0.0, "Influenza": 1}, "inquired": ["E_91"]}',
    '{"index": 1, "differential": {"URTI": 0.3, "Influenza": 0.1, "URTI": 0.6}, "inquired": []}',
    r'{"index": 2, "differential": {"\u0055RTI": 0.5, "Bronchitis": 5E-1}, "inquired": ["E_\u0039\u0031", "E_53"]}',
    r'{"index": 3, "differential": {"Not \"a\" pathology": 0.5, "a\\": 0.2}, "inquired": ["E_91", "E_91"]}',
    '{"inquired": ["E_53"], "extra": 1, "index": 4, "differential": [["URTI", 0.5]]}',
    '{"index":5,"differential":{"URTI":1e-3},"inquired":[]}',
    ' {"index":\t6 , "differential" : { } }  ',
    "   ",
    "\x0c",
    '{"index": 7, "differential": {"IVRS ou virémie": 0.9, "Pneumonia": 0.05}}',
    '{"index": 8, "differential": {"URTI": 0.9}, "inquired": ["E_55_@_V_89", "E_99999", "E_204_@_V_10"]}',
]


OUTSIDE_THE_LAYOUT = ['{"differential": {}, "inquired": ["E_151", "E_41"], "index": 9}',
                      '{"inquired": ["E_91"], "differential": {"URTI": 1}, "index": 10}']


@pytest.mark.parametrize("lines", [SPELLINGS, OUTSIDE_THE_LAYOUT])
def test_every_spelling_reads_as_json_loads_reads_it(tmp_path, kb, lines):
    header, rows = _rows()
    patients = load_patients(_write(tmp_path / "p.csv", header, rows[:20]), kb)
    path = tmp_path / "spellings.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bulk = read_predictions(path, patients)
    one_by_one = PredictionBuilder(patients)
    for line in lines:
        if line.strip():
            record = json.loads(line)
            differential = record["differential"]
            pairs = differential.items() if isinstance(differential, dict) else [tuple(p) for p in differential]
            one_by_one.add(record["index"], pairs, record.get("inquired", []))
    expected = one_by_one.build()
    assert bulk.entries.bounds.tolist() == expected.entries.bounds.tolist()
    assert bulk.entries.col.tolist() == expected.entries.col.tolist()
    assert [(m, bool(np.signbit(m))) for m in bulk.entries.mass] == [(m, bool(np.signbit(m)))
                                                                     for m in expected.entries.mass]
    np.testing.assert_array_equal(bulk.inquired, expected.inquired)
    assert bulk.n_questions.tolist() == expected.n_questions.tolist()
    assert bulk.extra_names == expected.extra_names and bulk.warnings == expected.warnings


def test_a_bad_last_line_alone_in_its_block_is_named(tmp_path, kb):
    header, rows = _rows()
    patients = load_patients(_write(tmp_path / "p.csv", header, rows[:20]), kb)
    path = tmp_path / "p.jsonl"
    # Without a final line break the last line is a block of its own; it holds codes but, spoilt at its start, no
    # record the bulk reading can see.
    path.write_text('{"index": 1, "differential": {}}\n\ufeff{"index": 2, "differential": {}, "inquired": ["E_91"]}',
                    encoding="utf-8")
    with pytest.raises(PredictionFileError, match="line 2 is not valid JSON"):
        read_predictions(path, patients)


def test_bulk_number_parsing_is_floats_own():
    """The numbers of a predictions file, parsed all at once (Arrow's cast), are ``float``'s doubles; a piece not
    kept, or with no digits, is NaN."""
    texts = hard_number_texts(5, 20_000)
    pieces = [f", {text}]" for text in texts]
    parsed = parse_numbers("\x00".join(pieces).encode(), pieces, np.ones(len(pieces), dtype=bool))
    expected = np.array([float(text) for text in texts])
    assert np.array_equal(parsed, expected) and np.array_equal(np.signbit(parsed), np.signbit(expected))
    keep = np.arange(len(pieces)) % 3 != 0
    pieces[1] = ", ]"
    partly = parse_numbers("\x00".join(pieces).encode(), pieces, keep)
    expected[~keep] = np.nan
    expected[1] = np.nan
    np.testing.assert_array_equal(partly, expected)


def test_lines_read_by_a_forked_process_score_as_read_in_place(tmp_path, kb, monkeypatch):
    """``score ddxplus`` reads the predictions in a forked process while it loads the patients: the same
    predictions as a read in place, the same refusal for a bad file, and no child left behind when the caller
    stops early."""
    import os

    header, rows = _rows()
    patients = load_patients(_write(tmp_path / "p.csv", header, rows), kb)
    _predictions(tmp_path / "p.jsonl", kb, rows, seed=3)
    with scoring_module.lines_read_aside(tmp_path / "p.jsonl") as lines:
        assert lines is not None
        aside = read_predictions(tmp_path / "p.jsonl", patients, lines)
    in_place = read_predictions(tmp_path / "p.jsonl", patients)
    for key, value in score(patients, in_place).per_patient.items():
        np.testing.assert_array_equal(score(patients, aside).per_patient[key], value, err_msg=key)
    assert aside.warnings == in_place.warnings

    (tmp_path / "bad.jsonl").write_bytes(b'{"index": 0, "differential": {"URTI": 1.0}}\n\xff\n')
    with scoring_module.lines_read_aside(tmp_path / "bad.jsonl") as lines, \
            pytest.raises(PredictionFileError, match="line 2 is not UTF-8"):
        read_predictions(tmp_path / "bad.jsonl", patients, lines)

    forked = []
    fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forked.append(pid := fork()) or pid)
    with pytest.raises(RuntimeError), scoring_module.lines_read_aside(tmp_path / "p.jsonl"):
        raise RuntimeError("the patients could not be loaded")
    [child] = forked
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)  # the reader was waited for
