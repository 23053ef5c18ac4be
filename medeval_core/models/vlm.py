"""The vision-language model role: images plus typed prompts in, generated texts out.

Two implementations: a local Qwen2.5-VL checkpoint through transformers (``qwen_transformers``) and any
OpenAI-compatible vision endpoint such as vLLM or Ollama (``openai_vision``). Callers depend only on
``VlmBackend``; ``models.for_role(role, settings, interface="vision")`` picks the implementation. Importing this
module does not import torch, so the CLI and the app start quickly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from PIL import Image
from pydantic import BaseModel, ConfigDict

from medeval_core.records import ModelCall
from medeval_core.settings import GenerationSettings

CallRecorder = Callable[[ModelCall], None]
"""Receives the ``ModelCall`` records of one image's request (``CaseContext.record_model_call``)."""


class VlmPrompt(BaseModel):
    """One request's text: an optional system message and the user text that follows the image."""

    model_config = ConfigDict(frozen=True)

    system: str | None = None
    user: str


class VlmBackendError(RuntimeError):
    """The model cannot be loaded or called; the message says what to change."""


class VlmNotConfiguredError(VlmBackendError):
    """No backend serves the vision role (``models.not_configured`` says which variables to set)."""


@runtime_checkable
class VlmBackend(Protocol):
    name: str
    model: str

    def generate(
        self, images: Sequence[Image.Image], prompts: Sequence[VlmPrompt], settings: GenerationSettings,
        recorders: Sequence[CallRecorder | None] | None = None,
    ) -> list[str]:
        """One text per (image, prompt) pair, in order. The batch size and sampling come from ``settings``;
        ``recorders`` (one per image) receive every model call made for that image, as role ``vlm``."""
        ...

    @property
    def parallel_batches(self) -> int:
        """How many ``generate`` calls can usefully run at once (one per GPU worker, or endpoint concurrency)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Provenance recorded with every result: backend, model, and what was loaded or sent."""
        ...


def check_pairs(images: Sequence[Image.Image], prompts: Sequence[VlmPrompt],
                recorders: Sequence[CallRecorder | None] | None = None) -> list[CallRecorder | None]:
    """Checks one prompt (and one recorder, when given) per image; returns the recorders, one per image."""
    if len(images) != len(prompts):
        raise ValueError(f"Got {len(images)} images but {len(prompts)} prompts; pass one prompt per image.")
    if recorders is None:
        return [None] * len(images)
    if len(recorders) != len(images):
        raise ValueError(f"Got {len(images)} images but {len(recorders)} call recorders.")
    return list(recorders)


def chat_messages(prompt: VlmPrompt, image_part: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat conversation for one request: [system], then the user turn with the image before the text."""
    messages: list[dict[str, Any]] = []
    if prompt.system is not None:
        messages.append({"role": "system", "content": [{"type": "text", "text": prompt.system}]})
    messages.append({"role": "user", "content": [image_part, {"type": "text", "text": prompt.user}]})
    return messages


def greedy_settings(settings: GenerationSettings) -> GenerationSettings:
    """The ``--greedy`` switch: the same settings with sampling off (temperature and top-p then unused)."""
    return settings.model_copy(update={"do_sample": False})
