"""A run's input files are stored with their sha256: a resume, or a ``--run-id`` reuse, whose input changed is
refused in one line naming the file (issue 8, item 6), for every benchmark input that a run reads."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from medeval_core import context
from medeval_core.cli import main
from medeval_core.records import RunConfig
from tests.ddi_fixtures import make_ddi_folder, responder_by_colour
from tests.ddxplus_fixtures import sample_csv
from tests.fake_openai import FakeOpenAI


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and err.endswith(errors[0] + "\n") and "Traceback" not in err, err
    return errors[0]


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> None:
    assert main(list(argv)) == 0, capsys.readouterr().err


def write_responses(path: Path, final: str) -> Path:
    path.write_text("".join(json.dumps({"image_id": f"c{i}", "reference": "melanoma",
                                        "response": f"Final diagnosis: {final}"}) + "\n" for i in range(4)),
                    encoding="utf-8")
    return path


def test_responses_rewritten_before_a_resume_or_another_file_under_the_same_run_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    responses = write_responses(tmp_path / "responses.jsonl", "melanoma")
    judge = ["judge", "ddi", "--judge", "offline", "--run-id", "imported", "--json"]
    ok(capsys, *judge, "--responses", str(responses))
    stored = RunConfig.model_validate(context.current_store().get_run("imported-responses").config)
    assert stored.inputs["responses"].path == str(responses)

    write_responses(responses, "psoriasis")  # rewritten in place
    for argv in (("resume", "imported-responses"), ("resume", "imported"),
                 (*judge, "--responses", str(responses))):
        err = refused(capsys, *argv)
        assert "has changed since" in err and str(responses) in err
    other = write_responses(tmp_path / "other.jsonl", "melanoma")
    err = refused(capsys, *judge, "--responses", str(other))
    assert "imported" in err and "other parameters" in err and str(other) in err
    # Nothing was judged again: the stored verdicts are still those of the first file.
    assert all(r.metrics["correct"] for r in context.current_store().results("imported"))


def test_a_cases_csv_rewritten_before_a_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ddi"
    cases = make_ddi_folder(folder)
    answers = {case.ddi_id: f"Final diagnosis: {case.disease}" for case in cases}
    with FakeOpenAI(responder_by_colour(cases, answers)) as server:
        ok(capsys, "run", "ddi", "--images", str(folder), "--model-backend", "openai", "--model", "m",
           "--base-url", server.url, "--judge", "offline", "--run-id", "lesions", "--json")
        metadata = folder / "ddi_metadata.csv"
        with metadata.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
        rows[1][4] = "psoriasis"  # another reference for the first image
        with metadata.open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(rows)
        err = refused(capsys, "resume", "lesions")
        assert "has changed since" in err and str(metadata) in err
        requests = len(server.chat_requests())
    assert requests == len(cases)  # nothing was generated again


def test_a_patients_file_rewritten_before_a_resume_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sample_csv().open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    patients = tmp_path / "patients.csv"
    with patients.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows[:6])
    ok(capsys, "run", "ddxplus", "--patients", str(patients), "--agent", "kb-bayes", "--run-id", "ddx", "--json")
    with patients.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([rows[0], *reversed(rows[1:6])])
    err = refused(capsys, "resume", "ddx")
    assert "has changed since" in err and str(patients) in err
    err = refused(capsys, "run", "ddxplus", "--patients", str(patients), "--agent", "kb-bayes", "--run-id", "ddx")
    assert "has changed since" in err and str(patients) in err
