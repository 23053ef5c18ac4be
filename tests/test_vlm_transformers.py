"""The transformers Qwen2.5-VL backend on a tiny random-weight checkpoint: the real loading and generation code."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from medeval_core.models import for_role, qwen_transformers
from medeval_core.models.qwen_transformers import (
    QwenTransformersBackend,
    cached_worker,
    choose_attention,
    generation_config,
)
from medeval_core.models.vlm import (
    VlmNotConfiguredError,
    VlmPrompt,
    greedy_settings,
)
from medeval_core.settings import GenerationSettings, load_settings
from tests.tiny_qwen import tiny_qwen  # noqa: F401 - session fixture

PATCH = 14
MERGE = 2


@pytest.fixture
def generation() -> GenerationSettings:
    """The protocol settings with sizes that suit a CPU test: small pixel bounds, few new tokens."""
    return load_settings().generation.model_copy(
        update={"max_new_tokens": 12, "batch_size": 2, "min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16}
    )


def noise_image(height: int, width: int, seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


PROMPTS = [
    VlmPrompt(system="You are a dermatology assistant.", user="Analyze the dermatologic image."),
    VlmPrompt(user="Choose exactly one diagnosis from:\nMelanoma\nAcne"),
]


def test_batch_of_two_is_left_padded_and_pixel_bounded(tiny_qwen: Path, generation: GenerationSettings) -> None:  # noqa: F811
    worker = cached_worker(str(tiny_qwen), "cpu", generation)
    images = [noise_image(900, 1200, 1), noise_image(30, 20, 2)]
    inputs = worker.prepare(images, PROMPTS, generation)

    # Left padding: the shorter row's padding sits before its tokens, and every row ends with real tokens.
    mask = inputs["attention_mask"]
    assert mask[:, -1].tolist() == [1, 1]
    short_row = int(mask.sum(dim=1).argmin())
    assert mask[short_row, 0] == 0
    assert torch.all(mask[short_row].diff() >= 0), "padding must come first"

    # Pixel bounds: the large image is shrunk below max_pixels and the tiny one enlarged above min_pixels.
    pixels = [int(t * h * w) * PATCH * PATCH for t, h, w in inputs["image_grid_thw"].tolist()]
    assert pixels[0] <= generation.max_pixels
    assert pixels[1] >= generation.min_pixels
    # The number of image placeholder tokens per row matches the grid after the 2x2 merge.
    image_token = worker.model.config.image_token_id
    tokens_per_row = (inputs["input_ids"] == image_token).sum(dim=1).tolist()
    assert tokens_per_row == [int(grid.prod()) // MERGE**2 for grid in inputs["image_grid_thw"]]

    # Tighter bounds from the settings give fewer visual tokens for the same image.
    tighter = generation.model_copy(update={"max_pixels": 28 * 28 * 4})
    smaller = worker.prepare(images[:1], PROMPTS[:1], tighter)
    assert int(smaller["image_grid_thw"][0].prod()) * PATCH * PATCH <= tighter.max_pixels
    assert int(smaller["image_grid_thw"][0].prod()) < int(inputs["image_grid_thw"][0].prod())


def test_rendered_prompt_keeps_system_and_user_and_places_image_first(
    tiny_qwen: Path, generation: GenerationSettings  # noqa: F811
) -> None:
    worker = cached_worker(str(tiny_qwen), "cpu", generation)
    with_system, without_system = worker.render(PROMPTS)
    assert "<|im_start|>system\nYou are a dermatology assistant.<|im_end|>" in with_system
    assert with_system.index("<|image_pad|>") < with_system.index("Analyze the dermatologic image.")
    assert without_system.endswith("<|im_start|>assistant\n")
    assert "You are a dermatology assistant." not in without_system


def test_same_seed_same_output_and_only_new_tokens(tiny_qwen: Path, generation: GenerationSettings) -> None:  # noqa: F811
    backend = QwenTransformersBackend(str(tiny_qwen), generation)
    images = [noise_image(200, 300, 3), noise_image(120, 90, 4)]
    first = backend.generate(images, PROMPTS, generation)
    second = backend.generate(images, PROMPTS, generation)
    assert first == second
    assert len(first) == 2
    other_seed = backend.generate(images, PROMPTS, generation.model_copy(update={"seed": 7}))
    assert other_seed != first

    # The decoded text is exactly the generated continuation: decode the new tokens of a manual run.
    worker = backend.workers()[0]
    inputs = worker.prepare(images, PROMPTS, generation)
    torch.manual_seed(generation.seed)
    with torch.inference_mode():
        output = worker.model.generate(**inputs, generation_config=worker.effective_generation_config(generation))
    new_tokens = output[:, inputs["input_ids"].shape[1]:]
    assert new_tokens.shape[1] <= generation.max_new_tokens
    assert first == worker.processor.batch_decode(new_tokens, skip_special_tokens=True)
    full = worker.processor.batch_decode(output, skip_special_tokens=True)
    assert all(len(f) > len(n) for f, n in zip(full, first, strict=True))


def test_batches_split_by_batch_size_give_the_same_texts_as_one_by_one_greedy(
    tiny_qwen: Path, generation: GenerationSettings  # noqa: F811
) -> None:
    greedy = greedy_settings(generation)
    backend = QwenTransformersBackend(str(tiny_qwen), greedy)
    images = [noise_image(140, 140, 5), noise_image(140, 140, 6), noise_image(140, 140, 7)]
    prompts = [PROMPTS[1]] * 3
    batched = backend.generate(images, prompts, greedy)
    single = [backend.generate([image], [prompt], greedy)[0] for image, prompt in zip(images, prompts, strict=True)]
    assert batched == single


def test_fresh_generation_config_ignores_checkpoint_sampling_values(
    tiny_qwen: Path, generation: GenerationSettings  # noqa: F811
) -> None:
    worker = cached_worker(str(tiny_qwen), "cpu", generation)
    effective, _ = worker.model._prepare_generation_config(worker.effective_generation_config(generation))
    assert (effective.do_sample, effective.temperature, effective.top_p, effective.top_k) == (True, 0.7, 0.9, 0)
    assert (effective.repetition_penalty, effective.num_beams, effective.num_return_sequences) == (1.0, 1, 1)
    assert effective.max_new_tokens == 12 and effective.use_cache is True

    greedy = generation_config(greedy_settings(generation), eos_token_id=2, pad_token_id=0)
    assert greedy.do_sample is False
    assert "temperature" not in greedy.to_diff_dict() and "top_p" not in greedy.to_diff_dict()


def test_load_report(tiny_qwen: Path, generation: GenerationSettings) -> None:  # noqa: F811
    report = cached_worker(str(tiny_qwen), "cpu", generation).report
    assert (report.device, report.dtype, report.attention, report.tf32) == ("cpu", "float32", "sdpa", False)
    assert "needs CUDA" in report.attention_note
    assert 100_000 < report.parameters < 1_000_000
    assert report.missing_keys == report.unexpected_keys == report.mismatched_keys == []
    assert report.warnings == []
    assert report.architectures == ["Qwen2_5_VLForConditionalGeneration"]
    shard = tiny_qwen / "model.safetensors"
    assert [s.model_dump() for s in report.shards] == [
        {"name": "model.safetensors", "size_bytes": shard.stat().st_size,
         "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()}
    ]
    assert (report.min_pixels, report.max_pixels) == (generation.min_pixels, generation.max_pixels)


def test_extra_checkpoint_weights_are_reported_as_a_warning(
    tiny_qwen: Path, tmp_path: Path, generation: GenerationSettings, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # A checkpoint saved from a subclass with an adapter: the plain class drops the adapter's weights.
    folder = tmp_path / "with-adapter"
    shutil.copytree(tiny_qwen, folder)
    weights = load_file(folder / "model.safetensors")
    weights["model.skin_tone_adapter.weight"] = torch.zeros(4, 4)
    del weights["lm_head.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})

    report = cached_worker(str(folder), "cpu", generation).report
    assert len(report.unexpected_keys) == 1 and report.unexpected_keys[0].endswith("skin_tone_adapter.weight")
    assert report.missing_keys == ["lm_head.weight"]
    assert len(report.warnings) == 2
    assert "skin_tone_adapter" in caplog.text and "lm_head.weight" in caplog.text


def test_workers_are_cached_per_model_and_load_settings(tiny_qwen: Path, generation: GenerationSettings) -> None:  # noqa: F811
    first = QwenTransformersBackend(str(tiny_qwen), generation).workers()[0]
    again = QwenTransformersBackend(str(tiny_qwen), generation.model_copy(update={"temperature": 0.2})).workers()[0]
    assert again is first  # sampling settings are per call, not part of what is loaded
    other = QwenTransformersBackend(str(tiny_qwen), generation.model_copy(update={"max_pixels": 28 * 28 * 8}))
    assert other.workers()[0] is not first


def test_attention_choice_is_made_before_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_attention("flash_attention_2", "cpu")[0] == "sdpa"
    monkeypatch.setattr(qwen_transformers.importlib.util, "find_spec", lambda name: None)
    attention, note = choose_attention("flash_attention_2", "cuda:0")
    assert attention == "sdpa" and "flash-attn package is not installed" in note
    monkeypatch.setattr(qwen_transformers.importlib.util, "find_spec", lambda name: object())
    assert choose_attention("flash_attention_2", "cuda:1")[0] == "flash_attention_2"
    assert choose_attention("eager", "cuda:0")[0] == "eager"


def test_cpu_runs_one_worker_whatever_devices_are_listed(tiny_qwen: Path, generation: GenerationSettings) -> None:  # noqa: F811
    backend = QwenTransformersBackend(str(tiny_qwen), generation, devices="0,1")
    assert backend.devices == ["cpu"] and backend.parallel_batches == 1


def test_factory(tiny_qwen: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    with pytest.raises(VlmNotConfiguredError, match="MEDEVAL_VLM_MODEL"):
        for_role("vlm", load_settings(), interface="vision")
    monkeypatch.setenv("MEDEVAL_VLM_BACKEND", "transformers")
    monkeypatch.setenv("MEDEVAL_VLM_MODEL", str(tiny_qwen))
    backend = for_role("vlm", load_settings(), interface="vision")
    assert isinstance(backend, QwenTransformersBackend) and backend.model == str(tiny_qwen)
    described = backend.describe()
    assert described["workers"][0]["device"] == "cpu"
    assert described["generation_config"]["top_k"] == 0


def test_missing_checkpoint_gives_a_clear_error(tmp_path: Path, generation: GenerationSettings) -> None:
    from medeval_core.models.vlm import VlmBackendError

    (tmp_path / "empty").mkdir()
    with pytest.raises(VlmBackendError, match=r"config\.json"):
        cached_worker(str(tmp_path / "empty"), "cpu", generation)


def test_listed_gpus_become_one_worker_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert qwen_transformers.resolve_devices("0,1") == ["cuda:0", "cuda:1"]
    assert qwen_transformers.resolve_devices(None) == ["cuda:0"]
    from medeval_core.models.vlm import VlmBackendError

    with pytest.raises(VlmBackendError, match="GPU ids 2 are not available"):
        qwen_transformers.resolve_devices("0,2")


class FakeGpuWorker:
    """Stands in for a model on a GPU (none exists here): records which batches it ran, and when."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.busy = False
        self.batches: list[list[str]] = []

    def generate(self, images, prompts, settings):
        import time

        self.batches.append([p.user for p in prompts])
        time.sleep(0.2)
        return [f"{self.name}:{p.user}" for p in prompts]


def test_batches_are_spread_over_the_gpu_workers(monkeypatch: pytest.MonkeyPatch,
                                                 generation: GenerationSettings) -> None:
    import time

    workers = [FakeGpuWorker("gpu0"), FakeGpuWorker("gpu1")]
    backend = QwenTransformersBackend("checkpoint", generation)
    monkeypatch.setattr(backend, "workers", lambda: workers)
    prompts = [VlmPrompt(user=str(i)) for i in range(8)]
    started = time.monotonic()
    texts = backend.generate([noise_image(20, 20, i) for i in range(8)], prompts, generation)
    elapsed = time.monotonic() - started
    assert [t.split(":")[1] for t in texts] == [str(i) for i in range(8)]  # order kept
    assert [len(w.batches) for w in workers] == [2, 2]  # four batches of two, two per worker
    assert all(len(batch) == 2 for w in workers for batch in w.batches)
    assert elapsed < 0.6  # the two workers ran at the same time (sequentially: 0.8 s)
    assert not any(w.busy for w in workers)
