"""Local Qwen2.5-VL inference through transformers, with the generation settings of ``configs/evaluation.json``.

What this module guarantees (design.md §3.1):
- the checkpoint is loaded with the plain ``Qwen2_5_VLForConditionalGeneration`` class, in bf16 with TF32 on CUDA
  and float32 on CPU, in evaluation mode; missing or unexpected weight keys are reported loudly, because a
  checkpoint saved from a subclass (a released checkpoint may name one with an adapter) would silently lose weights;
- the attention implementation is chosen before loading (flash_attention_2 only when CUDA and flash-attn are
  both present, else sdpa) and recorded;
- image pixels are bounded by ``min_pixels``/``max_pixels``; batches are left-padded and only new tokens decoded;
- generation uses a fresh ``GenerationConfig`` built from the settings, never the checkpoint's
  ``generation_config.json`` (Qwen's ships top_k=1 and top_p=0.001, which would silently turn sampling greedy);
- one full-model worker per listed GPU, and loaded workers are cached per process (so Streamlit reruns reuse them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import torch
from PIL import Image
from pydantic import BaseModel
from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor

from medeval_core.benchmark import messages_sha256
from medeval_core.data.files import sha256_of
from medeval_core.models.vlm import CallRecorder, VlmBackendError, VlmPrompt, chat_messages, check_pairs
from medeval_core.records import ModelCall
from medeval_core.settings import GenerationSettings

logger = logging.getLogger(__name__)


class ImageOnlyQwenProcessor(Qwen2_5_VLProcessor):
    """Qwen2.5-VL's processor with only the image processor and the tokenizer.

    The stock processor also builds a video processor, which needs torchvision; torchvision cannot be installed
    next to the CPU torch build this project pins, and lesion images never need it. Declaring only two
    sub-processors in ``__init__`` is how transformers decides which ones to load.
    """

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kwargs: Any):
        super().__init__(image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template, **kwargs)


class ShardChecksum(BaseModel):
    name: str
    size_bytes: int
    sha256: str


class LoadReport(BaseModel):
    """What was loaded, where and how: stored with every run so that a score names the exact weights."""

    model: str
    device: str
    dtype: str
    attention: str
    attention_note: str
    tf32: bool
    parameters: int
    architectures: list[str]
    missing_keys: list[str]
    unexpected_keys: list[str]
    mismatched_keys: list[str]
    shards: list[ShardChecksum]
    chat_template_sha256: str
    min_pixels: int
    max_pixels: int
    load_seconds: float

    @property
    def warnings(self) -> list[str]:
        notes = []
        if self.missing_keys:
            notes.append(
                f"{len(self.missing_keys)} weights expected by Qwen2_5_VLForConditionalGeneration were not in the "
                f"checkpoint and are randomly initialised (e.g. {', '.join(self.missing_keys[:3])})."
            )
        if self.unexpected_keys:
            notes.append(
                f"{len(self.unexpected_keys)} checkpoint weights are not used by Qwen2_5_VLForConditionalGeneration "
                f"and were dropped (e.g. {', '.join(self.unexpected_keys[:3])}); results do not include them."
            )
        if self.mismatched_keys:
            notes.append(f"{len(self.mismatched_keys)} weights had mismatched shapes and were re-initialised.")
        return notes


def choose_attention(requested: str, device: str) -> tuple[str, str]:
    """The attention implementation to load with, and why. Decided before loading: asking transformers for
    flash_attention_2 without the flash-attn package raises ImportError mid-load."""
    if requested != "flash_attention_2":
        return requested, f"{requested} as configured"
    if not device.startswith("cuda"):
        return "sdpa", "flash_attention_2 configured, but it needs CUDA; using sdpa on CPU"
    if importlib.util.find_spec("flash_attn") is None:
        return "sdpa", "flash_attention_2 configured, but the flash-attn package is not installed; using sdpa"
    return "flash_attention_2", "flash_attention_2 as configured (CUDA and flash-attn present)"


def resolve_devices(devices: str | None) -> list[str]:
    """``"0,1"`` -> two CUDA workers; without CUDA a single CPU worker whatever is listed."""
    if not torch.cuda.is_available():
        return ["cpu"]
    ids = [part.strip() for part in (devices or "0").split(",") if part.strip()]
    available = torch.cuda.device_count()
    bad = [i for i in ids if not i.isdigit() or int(i) >= available]
    if bad:
        raise VlmBackendError(
            f"GPU ids {', '.join(bad)} are not available ({available} visible); set MEDEVAL_VLM_DEVICES to ids "
            f"between 0 and {available - 1}, e.g. '0' or '0,1'."
        )
    return [f"cuda:{i}" for i in dict.fromkeys(ids)]


def generation_config(
    settings: GenerationSettings, eos_token_id: int | list[int] | None, pad_token_id: int | None
) -> GenerationConfig:
    """A fresh config from the settings: one beam, one sequence, sampling parameters only when sampling.

    top_k is set to 0 (off) so that only temperature and top-p shape sampling, as the protocol lists; left unset
    it would take transformers' default of 50."""
    sampling = {"temperature": settings.temperature, "top_p": settings.top_p, "top_k": 0} if settings.do_sample else {}
    return GenerationConfig(
        do_sample=settings.do_sample,
        num_beams=1,
        num_return_sequences=1,
        max_new_tokens=settings.max_new_tokens,
        repetition_penalty=settings.repetition_penalty,
        use_cache=settings.use_cache,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        **sampling,
    )


_checksums: dict[tuple[str, int, int], str] = {}


def shard_checksums(folder: Path) -> list[ShardChecksum]:
    """sha256 of each local safetensors shard (memoised by path, size and mtime: 16 GB take about a minute)."""
    result = []
    for shard in sorted(folder.glob("*.safetensors")):
        stat = shard.stat()
        key = (str(shard.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in _checksums:
            _checksums[key] = sha256_of(shard)[0]
        result.append(ShardChecksum(name=shard.name, size_bytes=stat.st_size, sha256=_checksums[key]))
    return result


class QwenWorker:
    """One full model on one device; it runs one batch at a time (see ``_claim``)."""

    def __init__(self, model: Qwen2_5_VLForConditionalGeneration, processor: ImageOnlyQwenProcessor,
                 report: LoadReport) -> None:
        self.model = model
        self.processor = processor
        self.report = report
        self.busy = False
        self._eos = model.generation_config.eos_token_id
        self._pad = processor.tokenizer.pad_token_id
        if self._pad is None:
            self._pad = model.generation_config.pad_token_id
        # Keep only the token ids of the checkpoint's generation config: any sampling value left there would fill
        # the fields our per-call config leaves unset (transformers merges them in for None values).
        model.generation_config = GenerationConfig(
            eos_token_id=self._eos, pad_token_id=self._pad, bos_token_id=model.generation_config.bos_token_id
        )

    def effective_generation_config(self, settings: GenerationSettings) -> GenerationConfig:
        return generation_config(settings, self._eos, self._pad)

    def render(self, prompts: Sequence[VlmPrompt]) -> list[str]:
        """The exact model input text per prompt (the chat template inserts its image placeholder tokens)."""
        return [
            self.processor.apply_chat_template(
                chat_messages(prompt, {"type": "image"}), tokenize=False, add_generation_prompt=True
            )
            for prompt in prompts
        ]

    def prepare(self, images: Sequence[Image.Image], prompts: Sequence[VlmPrompt],
                settings: GenerationSettings) -> Any:
        """Tokenised, padded batch with pixel values, on the worker's device."""
        self.processor.tokenizer.padding_side = settings.padding_side
        inputs = self.processor(
            text=self.render(prompts),
            images=[image.convert("RGB") for image in images],
            size={"shortest_edge": settings.min_pixels, "longest_edge": settings.max_pixels},
            padding=True,
            return_tensors="pt",
        )
        return inputs.to(self.report.device)

    def generate(self, images: Sequence[Image.Image], prompts: Sequence[VlmPrompt],
                 settings: GenerationSettings) -> list[str]:
        inputs = self.prepare(images, prompts, settings)
        config = self.effective_generation_config(settings)
        # Seed this device's generator before every batch, so a batch's output depends only on its contents.
        if self.report.device.startswith("cuda"):
            with torch.cuda.device(self.report.device):
                torch.cuda.manual_seed(settings.seed)
        else:
            torch.manual_seed(settings.seed)
        with torch.inference_mode():
            output = self.model.generate(**inputs, generation_config=config)
        new_tokens = output[:, inputs["input_ids"].shape[1]:]
        return self.processor.batch_decode(new_tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def _load_error(model: str, exc: Exception) -> VlmBackendError:
    if Path(model).exists():
        return VlmBackendError(
            f"Could not load the Qwen2.5-VL checkpoint in {model}: {exc}. The folder needs config.json, "
            "the safetensors shards, the tokenizer files and preprocessor_config.json."
        )
    return VlmBackendError(
        f"{model!r} is not a local folder and could not be fetched from the Hugging Face hub ({exc}). Download the "
        "checkpoint on a machine with internet and set MEDEVAL_VLM_MODEL to its folder."
    )


def load_worker(model: str, device: str, settings: GenerationSettings) -> QwenWorker:
    started = time.monotonic()
    on_cuda = device.startswith("cuda")
    dtype = getattr(torch, settings.dtype) if on_cuda else torch.float32
    attention, note = choose_attention(settings.attn_implementation, device)
    tf32 = bool(on_cuda and settings.allow_tf32)
    if on_cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    try:
        processor = ImageOnlyQwenProcessor.from_pretrained(
            model, size={"shortest_edge": settings.min_pixels, "longest_edge": settings.max_pixels}
        )
        options: dict[str, Any] = {"dtype": dtype, "attn_implementation": attention, "output_loading_info": True}
        if on_cuda:
            options["device_map"] = {"": device}
        # With output_loading_info=True transformers returns (model, loading info); its annotation names the model.
        loaded, info = cast(tuple[Any, dict[str, Any]],
                            Qwen2_5_VLForConditionalGeneration.from_pretrained(model, **options))
    except (OSError, ValueError, KeyError) as exc:
        raise _load_error(model, exc) from exc
    if not hasattr(processor, "image_processor") or processor.chat_template is None:
        raise VlmBackendError(
            f"The checkpoint in {model} has no image processor or no chat template; it is not a Qwen2.5-VL "
            "checkpoint (preprocessor_config.json and chat_template.jinja/json are required)."
        )
    loaded.eval()
    folder = Path(model)
    template = processor.chat_template if isinstance(processor.chat_template, str) else str(processor.chat_template)
    report = LoadReport(
        model=model,
        device=device,
        dtype=str(dtype).removeprefix("torch."),
        attention=loaded.config._attn_implementation,
        attention_note=note,
        tf32=tf32,
        parameters=sum(p.numel() for p in loaded.parameters()),
        architectures=list(loaded.config.architectures or []),
        missing_keys=sorted(info.get("missing_keys", [])),
        unexpected_keys=sorted(info.get("unexpected_keys", [])),
        mismatched_keys=sorted(str(k) for k in info.get("mismatched_keys", [])),
        shards=shard_checksums(folder) if folder.is_dir() else [],
        chat_template_sha256=hashlib.sha256(template.encode("utf-8")).hexdigest(),
        min_pixels=settings.min_pixels,
        max_pixels=settings.max_pixels,
        load_seconds=round(time.monotonic() - started, 3),
    )
    for warning in report.warnings:
        logger.warning("%s: %s", model, warning)
    return QwenWorker(loaded, processor, report)


# Loaded workers live for the whole process: reruns of a Streamlit page and consecutive runs reuse them. The key
# holds every setting that changes what is loaded; sampling settings are per call and not part of it.
_workers: dict[tuple[Any, ...], QwenWorker] = {}
_key_locks: dict[tuple[Any, ...], threading.Lock] = {}
_registry_lock = threading.Lock()


def _cache_key(model: str, device: str, settings: GenerationSettings) -> tuple[Any, ...]:
    return (model, device, settings.dtype, settings.attn_implementation, settings.allow_tf32,
            settings.min_pixels, settings.max_pixels)


def cached_worker(model: str, device: str, settings: GenerationSettings) -> QwenWorker:
    key = _cache_key(model, device, settings)
    with _registry_lock:
        key_lock = _key_locks.setdefault(key, threading.Lock())
    # One lock per key: two GPUs load in parallel, but the same model is never loaded twice on one device.
    with key_lock:
        if key not in _workers:
            _workers[key] = load_worker(model, device, settings)
        return _workers[key]


def clear_cache() -> None:
    """Drop every loaded model (the app's 'reload model' action and tests use it)."""
    with _registry_lock:
        _workers.clear()
        _key_locks.clear()


# Workers are shared by every backend object in the process (several page sessions, a batch run): claiming one
# under a single condition variable hands each batch to the first idle worker, whichever it is.
_idle = threading.Condition()


def _claim(workers: list[QwenWorker]) -> QwenWorker:
    with _idle:
        while True:
            for worker in workers:
                if not worker.busy:
                    worker.busy = True
                    return worker
            _idle.wait()


def _release(worker: QwenWorker) -> None:
    with _idle:
        worker.busy = False
        _idle.notify_all()


class QwenTransformersBackend:
    """The ``VlmBackend`` over one or more cached full-model workers."""

    name = "transformers"

    def __init__(self, model: str, settings: GenerationSettings, devices: str | None = None) -> None:
        self.model = model
        self.load_settings = settings
        self.devices = resolve_devices(devices)

    @property
    def parallel_batches(self) -> int:
        return len(self.devices)

    def workers(self) -> list[QwenWorker]:
        if len(self.devices) == 1:
            return [cached_worker(self.model, self.devices[0], self.load_settings)]
        with ThreadPoolExecutor(max_workers=len(self.devices)) as pool:
            return list(pool.map(lambda device: cached_worker(self.model, device, self.load_settings), self.devices))

    def load_reports(self) -> list[LoadReport]:
        return [worker.report for worker in self.workers()]

    def generate(self, images: Sequence[Image.Image], prompts: Sequence[VlmPrompt],
                 settings: GenerationSettings, recorders: Sequence[CallRecorder | None] | None = None) -> list[str]:
        """Batches of ``settings.batch_size``; each image's recorder gets one ``ModelCall`` (its batch's latency,
        its prompt's sha256; no tokens are counted for a local model)."""
        calls = check_pairs(images, prompts, recorders)
        started = time.monotonic()
        texts = self._generate(images, prompts, settings)
        latency = time.monotonic() - started
        for prompt, call in zip(prompts, calls, strict=True):
            if call is not None:
                call(ModelCall(role="vlm", model=self.model, messages_sha256=messages_sha256(prompt.model_dump()),
                               latency_s=latency))
        return texts

    def _generate(self, images: Sequence[Image.Image], prompts: Sequence[VlmPrompt],
                  settings: GenerationSettings) -> list[str]:
        workers = self.workers()
        size = settings.batch_size
        chunks = [(images[i:i + size], prompts[i:i + size]) for i in range(0, len(images), size)]
        if len(workers) == 1 or len(chunks) == 1:
            texts = [self._on_free_worker(workers, chunk, settings) for chunk in chunks]
        else:
            with ThreadPoolExecutor(max_workers=len(workers)) as pool:
                texts = list(pool.map(lambda chunk: self._on_free_worker(workers, chunk, settings), chunks))
        return [text for batch in texts for text in batch]

    @staticmethod
    def _on_free_worker(workers: list[QwenWorker], chunk: tuple[Sequence[Image.Image], Sequence[VlmPrompt]],
                        settings: GenerationSettings) -> list[str]:
        worker = _claim(workers)
        try:
            return worker.generate(chunk[0], chunk[1], settings)
        finally:
            _release(worker)

    def describe(self) -> dict[str, Any]:
        workers = self.workers()
        return {
            "backend": self.name,
            "model": self.model,
            "workers": [worker.report.model_dump() for worker in workers],
            "warnings": list(dict.fromkeys(w for worker in workers for w in worker.report.warnings)),
            "generation_config": workers[0].effective_generation_config(self.load_settings).to_diff_dict(),
        }
