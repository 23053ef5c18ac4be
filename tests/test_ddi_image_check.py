"""Every image of a DDI model run is checked before the first model call (issue 19, item 5): a bad one fails its
own case with the reason, the others run, and the command says how many were refused and why, on stderr and in
the run's summary, with exit status 1."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from PIL import Image

from medeval_core import context
from medeval_core.benchmarks.ddi.images import REFUSED_BEFORE_MODEL
from medeval_core.cli import main
from medeval_core.records import CaseStatus
from tests.ddi_fixtures import make_ddi_folder, responder_by_colour
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply
from tests.test_ddi_inputs import png_bomb


def truncated_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.effect_noise((256, 256), 64).convert("RGB").save(buffer, "JPEG", quality=95)
    data = buffer.getvalue()
    return data[: len(data) // 2]


def animated_png() -> bytes:
    frames = [Image.new("RGB", (64, 48), colour) for colour in ("red", "blue", "green")]
    buffer = io.BytesIO()
    frames[0].save(buffer, "PNG", save_all=True, append_images=frames[1:])
    return buffer.getvalue()


BAD_IMAGES = {
    "000002.png": (lambda: png_bomb(30_000), "decompression bomb"),
    "000003.png": (truncated_jpeg, "truncated or corrupt"),
    "000004.png": (animated_png, "animated"),
    "000005.png": (lambda: b"Final diagnosis: this is a text file named .png\n", "not an image"),
}


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_bad_images_are_refused_before_the_first_model_call_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ddi"
    cases = make_ddi_folder(folder)
    for name, (make, _) in BAD_IMAGES.items():
        (folder / name).write_bytes(make())
    answer = responder_by_colour(cases, {case.ddi_id: "Final diagnosis: melanoma" for case in cases})
    warned_before_first_call: list[bool] = []

    def respond(request: RecordedRequest) -> Reply:
        warned_before_first_call.append(any("refused before the first model call" in m for m in warnings.messages))
        return answer(request)

    warnings = Collect()
    logger = logging.getLogger("medeval_core.benchmarks.ddi.benchmark")
    logger.addHandler(warnings)
    try:
        with FakeOpenAI(respond) as server:
            status = main(["run", "ddi", "--images", str(folder), "--model-backend", "openai", "--model", "m",
                           "--base-url", server.url, "--run-id", "bad-images", "--judge", "offline"])
    finally:
        logger.removeHandler(warnings)
    assert status == 1
    # Only the two good images reached the model, and the check had reported the four before it was first asked.
    assert len(server.chat_requests()) == 2 and warned_before_first_call == [True, True]
    expected = "4 of 6 images were refused before the first model call (1 animated, 1 decompression bomb, 1 not an " \
               "image, 1 truncated or corrupt)"
    assert any(expected in message for message in warnings.messages)
    error_lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1 and expected in error_lines[0] and "runs show bad-images" in error_lines[0]

    store = context.current_store()
    failed = {r.case_id: r.error or "" for r in store.results("bad-images", status=CaseStatus.FAILED)}
    assert set(failed) == {"2", "3", "4", "5"}
    for name, (_, kind) in BAD_IMAGES.items():
        assert f"{REFUSED_BEFORE_MODEL} [{kind}]: {name}" in failed[str(int(name.split(".")[0]))]
    summary = store.get_run("bad-images").summary
    assert summary["extras"]["images_refused"] == {"decompression bomb": 1, "truncated or corrupt": 1,
                                                   "animated": 1, "not an image": 1}
    assert any(expected in note for note in summary["notes"])
    # The good cases were judged as usual: a bad image stops nothing else.
    assert {r.case_id for r in store.results("bad-images-judge", status=CaseStatus.OK)} == {"1", "6"}
