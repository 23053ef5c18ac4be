"""bench/gpu_check.py runs the backend's real path; on a CPU its tiny shape keeps the script from rotting."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_shape_on_cpu_measures_sdpa_and_reports_flash_attention_as_not_measured(tmp_path: Path) -> None:
    script = load_script()
    assert script.main(["--shape", "tiny", "--device", "cpu", "--max-new-tokens", "3", "--batches", "2",
                        "--repeats", "1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    (run,) = report["results"]["sdpa"]["runs"]
    assert run["batch"] == 2 and run["images_per_s"] > 0
    assert run["generated_tokens_per_image"] == 3
    assert run["image_grid_thw"] == [1, 54, 72]  # 1022x767 within the protocol's pixel bounds
    assert report["results"]["flash_attention_2"].startswith("not measured")
    assert report["sampling"]["do_sample"] is True and report["pixel_bounds"] == [3136, 1003520]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message printed where no GPU exists")
def test_without_cuda_it_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert load_script().main(["--out", str(tmp_path)]) == 2
    assert "no CUDA device is visible" in capsys.readouterr().out
    assert not (tmp_path / "gpu_check.json").exists()
