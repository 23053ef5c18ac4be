"""Images per second of the transformers Qwen2.5-VL backend on a GPU, with a Qwen2.5-VL-7B-shaped random model.

Run through ``bench/gpu_check.sh`` on a CUDA machine. The model has the released 7B architecture (28 text layers,
hidden 3584, GQA 28/4 heads, 32-layer vision tower with window attention) and random bf16 weights built directly
on the GPU, so nothing is downloaded. Each measurement goes through the backend's own path
(``QwenWorker.generate``: chat template, image processor with the protocol's pixel bounds, left padding, the
fresh generation config with the protocol's sampling, decoding of the new tokens only) on dermoscopy-sized
images (1022x767, the ISIC size), at batch 2 (the original evaluator's default) and 16 (the revision's), with sdpa
and, when the flash-attn package imports, flash_attention_2.

Random weights rarely emit an end-of-sequence token, so every image gets close to ``--max-new-tokens`` tokens;
the protocol's 4096 would take minutes per batch, so a shorter generation is timed and the generated tokens/s
(steps counted with a forward hook) is reported alongside images/s. ``--shape tiny --device cpu`` runs the same
code on a tiny model (the CPU smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessor

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from medeval_core.models.qwen_transformers import (  # noqa: E402
    ImageOnlyQwenProcessor,
    LoadReport,
    QwenWorker,
    choose_attention,
)
from medeval_core.models.vlm import VlmPrompt  # noqa: E402
from medeval_core.prompts import load_prompt  # noqa: E402
from medeval_core.settings import load_settings  # noqa: E402
from tests.tiny_qwen import CHAT_TEMPLATE, build_tokenizer  # noqa: E402

# Qwen2.5-VL-7B-Instruct's config.json, sizes only.
SHAPE_7B = {
    "text": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
             "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}},
    "vision": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 3584,
               "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]},
}
SHAPE_TINY = {
    "text": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 4096,
             "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}},
    "vision": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
               "window_size": 56, "fullatt_block_indexes": [1]},
}


def build_model(
    shape: dict[str, Any], tokenizer: Any, device: str, attention: str
) -> Qwen2_5_VLForConditionalGeneration:
    token_id = tokenizer.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        text_config={**shape["text"], "bos_token_id": token_id("<|endoftext|>"), "eos_token_id": token_id("<|im_end|>"),
                     "pad_token_id": token_id("<|endoftext|>")},
        vision_config={**shape["vision"], "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=token_id("<|image_pad|>"), video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"), vision_end_token_id=token_id("<|vision_end|>"),
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype, attn_implementation=attention)
    return model.eval()


def dermoscopy_images(count: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, size=(767, 1022, 3), dtype=np.uint8)) for _ in range(count)]


def measure(worker: QwenWorker, prompt: VlmPrompt, settings: Any, batch: int, repeats: int) -> dict[str, Any]:
    images = dermoscopy_images(batch)
    prompts = [prompt] * batch
    batch_settings = settings.model_copy(update={"batch_size": batch})
    worker.generate(images[:1], prompts[:1], batch_settings.model_copy(update={"max_new_tokens": 2}))  # warm-up
    # Each forward call of the language model is one generation step (the first one is the prefill).
    steps = []
    hook = worker.model.model.language_model.register_forward_hook(lambda *_: steps.append(1))
    timings, step_counts = [], []
    try:
        for _ in range(repeats):
            steps.clear()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            started = time.perf_counter()
            worker.generate(images, prompts, batch_settings)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            timings.append(time.perf_counter() - started)
            step_counts.append(len(steps))
    finally:
        hook.remove()
    seconds = float(np.median(timings))
    inputs = worker.prepare(images[:1], prompts[:1], batch_settings)
    return {
        "batch": batch,
        "images_per_s": round(batch / seconds, 3),
        "seconds_per_batch_median": round(seconds, 3),
        "repeats": repeats,
        "generated_tokens_per_image": max(step_counts),
        "generated_tokens_per_s": round(batch * sum(step_counts) / sum(timings), 1),
        "prompt_tokens_per_image": int(inputs["input_ids"].shape[1]),
        "image_grid_thw": inputs["image_grid_thw"][0].tolist(),
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available()
        else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=("7b", "tiny"), default="7b")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 16])
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "bench" / "out")))
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible, so nothing was measured. Run it on a GPU machine "
              "(bash bench/gpu_check.sh), or try the code path on a CPU with --shape tiny --device cpu.")
        return 2

    settings = load_settings().generation.model_copy(update={"max_new_tokens": args.max_new_tokens})
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = settings.allow_tf32
        torch.backends.cudnn.allow_tf32 = settings.allow_tf32
    shape = SHAPE_7B if args.shape == "7b" else SHAPE_TINY
    tokenizer = build_tokenizer()
    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": settings.min_pixels, "longest_edge": settings.max_pixels})
    processor = ImageOnlyQwenProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                       chat_template=CHAT_TEMPLATE)
    # The DDI prompts, read like medeval_core.benchmarks.ddi.tasks does (that package needs the store's SQL
    # libraries, which the GPU image lacks and this check does not use).
    prompt = VlmPrompt(system=load_prompt("ddi_system"), user=load_prompt("ddi_user"))
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else platform.processor(),
        "shape": args.shape,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sampling": {"do_sample": settings.do_sample, "temperature": settings.temperature, "top_p": settings.top_p,
                     "max_new_tokens": settings.max_new_tokens, "seed": settings.seed},
        "pixel_bounds": [settings.min_pixels, settings.max_pixels],
        "results": {},
    }
    for attention in ("sdpa", "flash_attention_2"):
        chosen, note = choose_attention(attention, args.device)
        if chosen != attention:
            report["results"][attention] = f"not measured: {note}"
            continue
        started = time.perf_counter()
        model = build_model(shape, tokenizer, args.device, attention)
        parameters = sum(p.numel() for p in model.parameters())
        load = LoadReport(
            model=f"random Qwen2.5-VL ({args.shape})", device=args.device,
            dtype=str(model.dtype).removeprefix("torch."),
            attention=model.config._attn_implementation, attention_note=note, tf32=settings.allow_tf32,
            parameters=parameters, architectures=["Qwen2_5_VLForConditionalGeneration"], missing_keys=[],
            unexpected_keys=[], mismatched_keys=[], shards=[], chat_template_sha256="", min_pixels=settings.min_pixels,
            max_pixels=settings.max_pixels, load_seconds=round(time.perf_counter() - started, 2),
        )
        worker = QwenWorker(model, processor, load)
        runs = [measure(worker, prompt, settings, batch, args.repeats) for batch in args.batches]
        report["results"][attention] = {"parameters": parameters, "build_seconds": load.load_seconds, "runs": runs}
        for run in runs:
            print(f"{attention:<18} batch {run['batch']:>2}: {run['images_per_s']:.2f} images/s "
                  f"({run['seconds_per_batch_median']:.1f} s per batch of {run['generated_tokens_per_image']} "
                  f"new tokens per image, {run['generated_tokens_per_s']:.0f} tokens/s)", flush=True)
        del worker, model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    for attention, result in report["results"].items():
        if isinstance(result, str):
            print(f"{attention:<18} {result}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
