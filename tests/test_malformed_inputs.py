"""Malformed input files end the command with one line on stderr, exit status 2, and nothing in the store
(issue 8, items 4 and 5): each file below crashed with a traceback, was scored silently, or was opened outside the
images folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from medeval_core import context
from medeval_core.cli import main
from tests.ddxplus_fixtures import ddxplus_dir, sample_csv

IMAGE = "lesion.png"


def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    Image.new("RGB", (64, 64), "red").save(folder / IMAGE)
    return folder


def write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def case_csv(text: str | bytes) -> Callable[[Path], list[str]]:
    def argv(tmp_path: Path) -> list[str]:
        return ["run", "ddi", "--images", str(images(tmp_path)), "--metadata", str(write(tmp_path / "cases.csv", text))]
    return argv


def responses(data: str | bytes) -> Callable[[Path], list[str]]:
    def argv(tmp_path: Path) -> list[str]:
        return ["judge", "ddi", "--responses", str(write(tmp_path / "responses.jsonl", data)), "--judge", "offline"]
    return argv


def predictions(data: str | bytes) -> Callable[[Path], list[str]]:
    def argv(tmp_path: Path) -> list[str]:
        return ["score", "ddxplus", "--patients", str(sample_csv()), "--kb", str(ddxplus_dir()),
                "--predictions", str(write(tmp_path / "predictions.jsonl", data))]
    return argv


def line(**fields: object) -> str:
    return json.dumps({"image_id": "c1", "reference": "melanoma", "response": "Final diagnosis: melanoma",
                       **fields}) + "\n"


CASES = {
    "empty case CSV": (case_csv(""), "cases.csv is empty; it needs a header row"),
    "a row with an extra field": (case_csv(f"DDI_file,disease\n{IMAGE},melanoma\n{IMAGE},melanoma,oops\n"),
                                  "cases.csv line 3 has 3 fields but the header has 2"),
    "every row with an extra field": (case_csv(f"DDI_file,disease\n{IMAGE},melanoma,oops\n"),
                                      "cases.csv line 2 has 3 fields but the header has 2"),
    "a CSV that is not UTF-8": (case_csv("DDI_file,disease\nlesion.png,m\xe9lanome\n".encode("latin-1")),
                                "cases.csv is not UTF-8 text"),
    "a path up out of the images folder": (case_csv("DDI_file,disease\n../../../../etc/passwd,melanoma\n"),
                                           "names the image '../../../../etc/passwd', which is outside the images"),
    "an absolute path": (case_csv("DDI_file,disease\n/etc/passwd,melanoma\n"),
                         "names the image '/etc/passwd', which is outside the images folder"),
    "responses not UTF-8": (responses(line().encode().replace(b"melanoma", b"m\xe9lanome", 1)),
                            "responses.jsonl line 1 is not UTF-8 text"),
    "an empty image id": (responses(line(image_id=" ")), "responses.jsonl line 1: image_id must not be empty"),
    "an empty reference": (responses(line(reference="")), "responses.jsonl line 1: reference must not be empty"),
    "a skin tone out of range": (responses(line(skin_tone=7)), "skin_tone must be 12, 34 or 56"),
    "deeply nested responses": (responses("[" * 100_000 + "]" * 100_000 + "\n"), "nested too deeply"),
    "predictions not UTF-8": (predictions(b'{"index": 0, "differential": {"caf\xe9": 1.0}}\n'),
                              "predictions.jsonl line 1 is not UTF-8 text"),
    "deeply nested predictions": (predictions('{"index": 0, "differential": ' + "[" * 100_000 + "]" * 100_000
                                              + "}\n"), "nested too deeply"),
    "a negative mass": (predictions('{"index": 0, "differential": {"URTI": -0.5, "Bronchitis": 1.5}}\n'),
                        "the mass of 'URTI' is -0.5"),
    "223 inquired evidences": (predictions(json.dumps({"index": 0, "differential": {"URTI": 1.0},
                                                       "inquired": [f"E_{i}" for i in range(1, 224)]}) + "\n"),
                               "inquires 223 evidences"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_malformed_input_is_one_line_exit_2_and_nothing_written(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_argv, message = CASES[name]
    # A configured endpoint that is never reached: the input must be refused before any model is asked.
    monkeypatch.setenv("MEDEVAL_VLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEDEVAL_VLM_MODEL", "never-called")
    context.reset()
    assert main(make_argv(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err
    assert context.current_store().list_runs() == []
