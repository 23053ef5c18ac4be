"""A single lesion evaluation reports its stages while it runs and can be cancelled (issue 8, item 10)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PIL import Image

from medeval_core import context
from medeval_core.benchmarks.ddi.images import validate_image
from medeval_core.benchmarks.ddi.interactive import CANCELLED, evaluate_lesion, new_session_id
from medeval_core.benchmarks.ddi.judge import OfflineDdiJudge
from medeval_core.models.openai_vision import OpenAIVisionBackend
from tests.fake_openai import FakeOpenAI, Reply


class Cancelled(BaseException):
    """What Streamlit raises in the script thread when the Cancel button asks for a rerun."""


def lesion(tmp_path: Path):
    path = tmp_path / "lesion.png"
    Image.new("RGB", (64, 64), (180, 90, 60)).save(path)
    return validate_image(path.read_bytes(), name=path.name)


def test_the_stages_are_reported_while_the_model_and_the_judge_run(tmp_path: Path) -> None:
    settings, store = context.current_settings(), context.current_store()
    seen: list[tuple[str, float]] = []
    with FakeOpenAI(Reply(content="Final diagnosis: melanoma"), latency_s=1.2) as server:
        backend = OpenAIVisionBackend(base_url=server.url, model="slow-vlm", api_key_env="UNSET_KEY")
        evaluation = evaluate_lesion(settings, store, "open", new_session_id(), image=lesion(tmp_path),
                                     backend=backend, reference="melanoma",
                                     judge=OfflineDdiJudge.from_settings(settings),
                                     on_progress=lambda stage, seconds: seen.append((stage, seconds)))
    assert evaluation.verdict is not None and evaluation.verdict["correct"]
    generating = [seconds for stage, seconds in seen if stage == "generating"]
    assert len(generating) >= 2 and generating == sorted(generating) and generating[-1] >= 0.9
    assert [stage for stage, _ in seen][-1] == "judging"


def test_raising_from_the_progress_callback_cancels_at_once_and_is_stored(tmp_path: Path) -> None:
    settings, store = context.current_settings(), context.current_store()

    def cancel_after_a_second(stage: str, seconds: float) -> None:
        if seconds >= 1.0:
            raise Cancelled

    with FakeOpenAI(Reply(content="Final diagnosis: melanoma"), latency_s=8.0) as server:
        backend = OpenAIVisionBackend(base_url=server.url, model="slow-vlm", api_key_env="UNSET_KEY")
        started = time.monotonic()
        with pytest.raises(Cancelled):
            evaluate_lesion(settings, store, "open", new_session_id(), image=lesion(tmp_path), backend=backend,
                            on_progress=cancel_after_a_second)
        assert time.monotonic() - started < 3.0  # not the model's 8 s
    (run,) = store.list_runs(benchmark="ddi")
    assert run.status == "failed" and run.error == CANCELLED
