"""Real stored runs for the annotation tests: two DDI model runs (two named models answering over HTTP from the local
OpenAI-compatible server, each judged by the offline judge) and a DDXPlus KB-Bayes run whose simulated patient's
answers are stored as turns; plus annotator accounts made through the CLI."""

from __future__ import annotations

import csv
import io
import json
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from medeval_core.benchmarks.ddxplus.benchmark import build_params
from medeval_core.cli import main
from medeval_core.context import current_settings, current_store
from medeval_core.runs import service
from tests.ddi_fixtures import make_ddi_folder, responder_by_colour
from tests.ddxplus_fixtures import sample_csv
from tests.fake_openai import FakeOpenAI

MODEL_A, MODEL_B = "vlm-alpha-7b", "lesion-beta-13b"
RUN_A, RUN_B, DDX_RUN = "ddi-alpha-run", "ddi-beta-run", "ddx-kb-run"
SECRET_NAMES = (MODEL_A, MODEL_B, RUN_A, RUN_B, f"{RUN_A}-judge", f"{RUN_B}-judge", "offline-rules-v1")
PASSCODES = {"dr.ada": "ada-passcode-1", "dr.bo": "bo-passcode-22", "dr.cy": "cy-passcode-333",
             "admin.eve": "eve-admin-pass"}

ANSWERS_A = {
    "1": "Irregular pigmented macule.\nFinal diagnosis: melanoma in situ",
    "2": "Pearly papule.\nFinal diagnosis: basal cell carcinoma",
    "3": "Waxy stuck-on plaque.\nFinal diagnosis: seborrheic keratosis",
    "4": "Hyperkeratotic papule.\nFinal diagnosis: verruca vulgaris",
    "5": "Scaly plaque.\nFinal diagnosis: squamous cell carcinoma in situ",
    "6": "Final diagnosis: epidermal cyst",
}
ANSWERS_B = {
    "1": "Final diagnosis: benign naevus",
    "2": "Nodular pearly lesion with telangiectasia.\nFinal diagnosis: nodular basal cell carcinoma",
    "3": "Final diagnosis: solar lentigo",
    "4": "Final diagnosis: common wart",
    "5": "Final diagnosis: psoriasis",
    "6": "Firm dome-shaped nodule with punctum.\nFinal diagnosis: epidermal cyst",
}


@dataclass(frozen=True)
class SeededRuns:
    ddi_folder: Path
    run_a: str = RUN_A
    run_b: str = RUN_B
    judge_run_a: str = f"{RUN_A}-judge"
    ddxplus_run: str = DDX_RUN
    ddxplus_patients: Path | None = None


def cli(*argv: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    out = io.StringIO()
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    with redirect_stdout(out):
        status = main(list(argv))
    assert status == 0, f"{argv} exited {status}"
    return out.getvalue()


def add_accounts(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, passcode in PASSCODES.items():
        cli("annotators", "add", name, *(["--admin"] if name.startswith("admin") else []),
            stdin=passcode + "\n", monkeypatch=monkeypatch)


def _ddi_run(folder: Path, cases: list, model: str, run_id: str, answers: dict[str, str]) -> None:
    with FakeOpenAI(responder_by_colour(cases, answers)) as server:
        cli("run", "ddi", "--images", str(folder), "--model-backend", "openai", "--model", model, "--base-url",
            server.url, "--judge", "offline", "--run-id", run_id, "--json")


def _ddxplus_run(tmp_path: Path, patients: int) -> Path:
    with sample_csv().open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    test, train = tmp_path / "ddx-test.csv", tmp_path / "ddx-train.csv"
    for path, chosen in ((test, rows[1:1 + patients]), (train, rows[1 + patients:])):
        with path.open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([rows[0], *chosen])
    settings = current_settings()
    service.launch("ddxplus", build_params(settings, test, "kb-bayes", train=train), settings, current_store(),
                   run_id=DDX_RUN)
    return test


def seed_runs(tmp_path: Path, ddxplus_patients: int = 2) -> SeededRuns:
    folder = tmp_path / "ddi"
    cases = make_ddi_folder(folder)
    _ddi_run(folder, cases, MODEL_A, RUN_A, ANSWERS_A)
    _ddi_run(folder, cases, MODEL_B, RUN_B, ANSWERS_B)
    patients = _ddxplus_run(tmp_path, ddxplus_patients) if ddxplus_patients else None
    return SeededRuns(ddi_folder=folder, ddxplus_patients=patients)


def create_task(*argv: str) -> dict:
    return json.loads(cli("annotations", "task", "create", *argv, "--json"))

