"""Fuzz test of every JSON Lines and CSV input through the CLI (issue 19, item 4): a seeded generator damages one
line of a small good file (truncated, 100,000 brackets deep, not an object, not UTF-8, a repeated id, a required
field missing, a CSV row of the wrong width, a byte-order mark in front of the damage, an empty file) and each
command must refuse it in one stderr line naming the file and the line, exit status 2, no run stored; where
``--skip-bad-lines`` is offered, the good lines run and the skipped one is recorded with the run."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from medeval_core import context
from medeval_core.cli import main
from medeval_core.runs import service
from tests.ddxplus_fixtures import ddxplus_dir, sample_csv
from tests.sdbench_fixtures import case_row, replay_line

SEED = 19
BOM = b"\xef\xbb\xbf"
DEEP = "[" * 100_000 + "]" * 100_000


@dataclass
class InputFile:
    """One input of one command: its good lines (a CSV's first line is its header), how to make the command's
    argv around it, the fields every line needs, the field naming a row, and whether --skip-bad-lines applies."""

    name: str
    good: Callable[[Path], list[str]]
    argv: Callable[[Path, Path], list[str]]
    csv: bool = False
    required: tuple[str, ...] = ()
    id_field: str | None = None
    skippable: bool = False
    stores_run: bool = True
    others: dict[str, Callable[[Path], Path]] = field(default_factory=dict)


def jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def mediq_rows(data_dir: Path) -> list[str]:
    return (data_dir / "mediq" / "imedqa_sample200.jsonl").read_text(encoding="utf-8").splitlines()[:3]


def mediq_actions(tmp_path: Path, data_dir: Path) -> Path:
    return jsonl(tmp_path / "mediq_actions.jsonl", [
        {"case_id": json.loads(row)["id"], "actions": [{"kind": "choice", "option": "A"}]}
        for row in mediq_rows(data_dir)])


RECORD = {"case_id": "p-1", "chief_complaint": "58-year-old man with two days of breathlessness",
          "record": {"History": "Two days of worsening shortness of breath.", "Social history": "Smokes."},
          "icd9": ["428.0", "401.9"]}
RECORDS = [RECORD, {**RECORD, "case_id": "p-2"}, {**RECORD, "case_id": "p-3", "icd9": ["250.00"]}]
DOCTOR = [{"case_id": record["case_id"], "actions": [{"kind": "diagnosis", "diagnoses": ["428.0"]}]}
          for record in RECORDS]
SDBENCH_CASES = [case_row("c1"), case_row("c2"), case_row("c3")]
SDBENCH_ACTIONS = [replay_line(case["id"], ("question", "Do you smoke?"), ("diagnosis", case["final_diagnosis"]))
                   for case in SDBENCH_CASES]


def mediq_result(row: str) -> dict[str, object]:
    case = json.loads(row)
    return {"id": case["id"], "info": {"correct_answer_idx": case["answer_idx"], "options": case["options"]},
            "interactive_system": {"letter_choice": "A", "questions": [], "num_questions": 0,
                                   "intermediate_choices": ["A"]}}


def lines(rows: list[object]) -> Callable[[Path], list[str]]:
    return lambda data_dir: [json.dumps(row) for row in rows]


def csv_lines(path: Path, count: int = 3) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[:count + 1]


INPUTS = [
    InputFile("mediq cases", mediq_rows, lambda f, t: [
        "run", "mediq", "--cases", str(f), "--expert", "replay", "--actions", str(t / "mediq_actions.jsonl")],
        required=("options", "answer_idx"), id_field="id", skippable=True),
    InputFile("mediq replay actions",
              lambda d: [json.dumps({"case_id": json.loads(r)["id"], "actions": [{"kind": "choice", "option": "A"}]})
                         for r in mediq_rows(d)],
              lambda f, t: ["run", "mediq", "--cases", str(t / "mediq_cases.jsonl"), "--expert", "replay",
                            "--actions", str(f)],
              required=("actions",), id_field="case_id"),
    InputFile("mediq results", lambda d: [json.dumps(mediq_result(r)) for r in mediq_rows(d)],
              lambda f, t: ["score", "mediq", "--results", str(f)], required=("interactive_system",),
              id_field="id", stores_run=False),
    InputFile("sdbench cases import", lines(SDBENCH_CASES),
              lambda f, t: ["cases", "import", "jsonl", str(f), "--out", str(t / "imported.jsonl")],
              required=("final_diagnosis",), id_field="id", stores_run=False),
    InputFile("sdbench cases", lines(SDBENCH_CASES), lambda f, t: [
        "run", "sdbench", "--cases", str(f), "--agent", "replay", "--actions", str(t / "sdbench_actions.jsonl"),
        "--gatekeeper", "offline", "--judge", "offline"], required=("final_diagnosis",), id_field="id",
        skippable=True),
    InputFile("sdbench replay actions", lines(SDBENCH_ACTIONS), lambda f, t: [
        "run", "sdbench", "--cases", str(t / "sdbench_cases.jsonl"), "--agent", "replay", "--actions", str(f),
        "--gatekeeper", "offline", "--judge", "offline"], required=("actions",), id_field="case_id"),
    InputFile("dynamicare records", lines(RECORDS), lambda f, t: [
        "run", "dynamicare", "--cases", str(f), "--doctor", "replay", "--actions",
        str(t / "dynamicare_actions.jsonl")], required=("icd9",), id_field="case_id", skippable=True),
    InputFile("dynamicare replay actions", lines(DOCTOR), lambda f, t: [
        "run", "dynamicare", "--cases", str(t / "dynamicare_records.jsonl"), "--doctor", "replay",
        "--actions", str(f)], required=("actions",), id_field="case_id"),
    InputFile("hitk truth", lines([{"case_id": i, "codes": ["401.9"]} for i in (1, 2, 3)]),
              lambda f, t: ["score", "hitk", "--truth", str(f), "--predictions", str(t / "hitk_predictions.jsonl")],
              required=("codes",), id_field="case_id", stores_run=False),
    InputFile("hitk predictions", lines([{"case_id": i, "predictions": ["hypertension"]} for i in (1, 2, 3)]),
              lambda f, t: ["score", "hitk", "--predictions", str(f), "--truth", str(t / "hitk_truth.jsonl")],
              required=("predictions",), id_field="case_id", stores_run=False),
    InputFile("ddi cases csv", lambda d: ["DDI_file,disease", "lesion.png,melanoma", "lesion.png,nevus"],
              lambda f, t: ["run", "ddi", "--images", str(t / "images"), "--metadata", str(f)], csv=True),
    InputFile("sdbench prices csv", lambda d: csv_lines(d / "costing" / "cms_prices.csv"), lambda f, t: [
        "run", "sdbench", "--cases", str(t / "sdbench_cases.jsonl"), "--agent", "replay", "--actions",
        str(t / "sdbench_actions.jsonl"), "--gatekeeper", "offline", "--judge", "offline", "--prices", str(f)],
        csv=True),
    InputFile("ddxplus patients csv", lambda d: csv_lines(sample_csv()), lambda f, t: [
        "run", "ddxplus", "--patients", str(f), "--kb", str(ddxplus_dir()), "--agent", "kb-bayes", "--train",
        str(t / "ddxplus_train.csv")], csv=True),
]


def companions(tmp_path: Path, data_dir: Path) -> None:
    """The good other inputs each command needs beside the one being damaged."""
    from PIL import Image

    (tmp_path / "mediq_cases.jsonl").write_text("\n".join(mediq_rows(data_dir)) + "\n", encoding="utf-8")
    mediq_actions(tmp_path, data_dir)
    jsonl(tmp_path / "sdbench_cases.jsonl", SDBENCH_CASES)
    jsonl(tmp_path / "sdbench_actions.jsonl", SDBENCH_ACTIONS)
    jsonl(tmp_path / "dynamicare_records.jsonl", RECORDS)
    jsonl(tmp_path / "dynamicare_actions.jsonl", DOCTOR)
    jsonl(tmp_path / "hitk_truth.jsonl", [{"case_id": i, "codes": ["401.9"]} for i in (1, 2, 3)])
    jsonl(tmp_path / "hitk_predictions.jsonl", [{"case_id": i, "predictions": ["hypertension"]} for i in (1, 2, 3)])
    (tmp_path / "ddxplus_train.csv").write_text("\n".join(csv_lines(sample_csv(), 20)) + "\n", encoding="utf-8")
    (tmp_path / "images").mkdir()
    Image.new("RGB", (32, 32), "red").save(tmp_path / "images" / "lesion.png")


@dataclass
class Damage:
    """A damaged file's bytes, the line the refusal must name (None for a file with no lines) and the kind."""

    kind: str
    data: bytes
    line: int | None


def damaged(spec: InputFile, good: list[str], rng: random.Random) -> list[Damage]:
    """Every kind of damage that applies to ``spec``, each at a line chosen by ``rng`` among the data lines."""
    at = rng.randrange(1, len(good))  # a CSV keeps its header, a JSON file one good line first

    def with_line(text: str | bytes, bom: bool = False) -> bytes:
        rows = [row.encode() for row in good]
        rows[at] = text if isinstance(text, bytes) else text.encode()
        return (BOM if bom else b"") + b"\n".join(rows) + b"\n"

    original = good[at]
    damages = [Damage("empty file", b"", None),
               Damage("not UTF-8", with_line(original.encode()[:5] + b"\xff\xfe" + original.encode()[5:]), at + 1)]
    if spec.csv:
        width = len(good[0].split(","))
        damages += [Damage("one field too many", with_line(original + ",extra"), at + 1),
                    Damage("one field too few", with_line(",".join(["x"] * (width - 1))), at + 1),
                    Damage("BOM and too many fields", with_line(original + ",extra", bom=True), at + 1)]
        return damages
    row = json.loads(original)
    cut = rng.randrange(1, len(original) - 1)
    damages += [Damage("truncated line", with_line(original[:cut]), at + 1),
                Damage("100,000 deep", with_line(DEEP), at + 1),
                Damage("deep inside an object", with_line(json.dumps({**row, "deep": 0})[:-2] + DEEP + "}"),
                       at + 1),
                Damage("not an object", with_line(rng.choice(["[1, 2]", "42", '"text"', "null"])), at + 1),
                Damage("BOM and a truncated line", with_line(original[:cut], bom=True), at + 1)]
    for name in spec.required:
        damages.append(Damage(f"no {name}", with_line(json.dumps({k: v for k, v in row.items() if k != name})),
                              at + 1))
    if spec.id_field:
        damages.append(Damage("repeated id", with_line(good[0]), at + 1))
    return damages


CASES = [(spec, kind) for spec in INPUTS for kind in [
    "empty file", "not UTF-8", "one field too many", "one field too few", "BOM and too many fields"]
         if spec.csv] + [
    (spec, kind) for spec in INPUTS if not spec.csv for kind in [
        "empty file", "not UTF-8", "truncated line", "100,000 deep", "deep inside an object", "not an object",
        "BOM and a truncated line", *[f"no {name}" for name in spec.required],
        *(["repeated id"] if spec.id_field else [])]]


@pytest.fixture(scope="module")
def shared_data(data_dir: Path) -> Path:
    return data_dir


@pytest.mark.parametrize(("spec", "kind"), CASES, ids=[f"{spec.name}: {kind}" for spec, kind in CASES])
def test_a_damaged_input_is_refused_in_one_line_and_nothing_is_stored(
    spec: InputFile, kind: str, tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A configured endpoint that is never reached: the input must be refused before any model is asked.
    monkeypatch.setenv("MEDEVAL_VLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEDEVAL_VLM_MODEL", "never-called")
    context.reset()
    companions(tmp_path, shared_data)
    rng = random.Random(f"{SEED}:{spec.name}:{kind}")
    [damage] = [d for d in damaged(spec, spec.good(shared_data), rng) if d.kind == kind]
    path = tmp_path / f"input{'.csv' if spec.csv else '.jsonl'}"
    path.write_bytes(damage.data)
    capsys.readouterr()
    status = main(spec.argv(path, tmp_path))
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert str(path) in err, err
    if damage.line is not None:
        assert re.search(rf"\bline {damage.line}\b", err), err
    assert context.current_store().list_runs() == []
    assert not (tmp_path / "imported.jsonl").exists()


SKIPPABLE = [spec for spec in INPUTS if spec.skippable]


@pytest.mark.parametrize("spec", SKIPPABLE, ids=[spec.name for spec in SKIPPABLE])
def test_skip_bad_lines_runs_the_good_lines_and_records_the_skipped_one(
    spec: InputFile, tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context.reset()
    companions(tmp_path, shared_data)
    good = spec.good(shared_data)
    path = tmp_path / "input.jsonl"
    path.write_text("\n".join([good[0], good[1][:20], DEEP, *good[2:]]) + "\n", encoding="utf-8")
    assert main([*spec.argv(path, tmp_path), "--skip-bad-lines", "--run-id", "skipping", "--json"]) == 0, \
        capsys.readouterr().err
    store = context.current_store()
    summary = service.stored_summary(store, "skipping")
    assert summary.counts.done + summary.counts.failed == len(good) - 1
    notes = " ".join(summary.notes)
    assert "skipped" in notes and re.search(r"\blines? 2\b.*\b3\b", notes), notes
