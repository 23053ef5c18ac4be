"""Any OpenAI-compatible vision endpoint (vLLM, Ollama, a hosted API) as a ``VlmBackend``.

The image travels as a base64 PNG data URL (lossless, so the server sees the pixels the local backend would).
Only the sampling settings the chat-completions API defines are sent: temperature, top_p, max_tokens and seed;
repetition penalty is not part of that API, so the backend records it as "not sent" rather than guessing a
server-specific extension. Transient failures (429, 5xx, connection errors, timeouts) are retried with
exponential backoff; the server does its own batching, so a batch is sent as concurrent single-image requests.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from PIL import Image

from medeval_core.models.openai_client import CompletionClient
from medeval_core.models.vlm import CallRecorder, VlmBackendError, VlmPrompt, chat_messages, check_pairs
from medeval_core.settings import GenerationSettings

"""429, 5xx, and connection failures (``APITimeoutError`` is a connection error subclass)."""


def image_data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def request_parameters(settings: GenerationSettings) -> dict[str, Any]:
    """The chat-completions sampling parameters for these settings (greedy = temperature 0, no top_p)."""
    parameters: dict[str, Any] = {"max_tokens": settings.max_new_tokens, "seed": settings.seed}
    if settings.do_sample:
        parameters.update(temperature=settings.temperature, top_p=settings.top_p)
    else:
        parameters["temperature"] = 0.0
    return parameters


class OpenAIVisionBackend:
    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str,
        timeout_s: float = 600.0,
        max_attempts: int = 6,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 60.0,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self._client = CompletionClient(base_url, model, api_key_env, VlmBackendError, timeout_s=timeout_s,
                                        max_attempts=max_attempts, retry_initial_s=retry_initial_s,
                                        retry_max_s=retry_max_s)

    @property
    def parallel_batches(self) -> int:
        return 1

    def messages(self, image: Image.Image, prompt: VlmPrompt) -> list[dict[str, Any]]:
        return chat_messages(prompt, {"type": "image_url", "image_url": {"url": image_data_url(image)}})

    def _complete(self, image: Image.Image, prompt: VlmPrompt, settings: GenerationSettings,
                  on_call: CallRecorder | None = None) -> str:
        return self._client.complete(self.messages(image, prompt), role="vlm", on_call=on_call,
                                     **request_parameters(settings))

    def generate(self, images: Sequence[Image.Image], prompts: Sequence[VlmPrompt],
                 settings: GenerationSettings, recorders: Sequence[CallRecorder | None] | None = None) -> list[str]:
        calls = check_pairs(images, prompts, recorders)
        triples = list(zip(images, prompts, calls, strict=True))
        if len(images) <= 1:
            return [self._complete(image, prompt, settings, call) for image, prompt, call in triples]
        with ThreadPoolExecutor(max_workers=min(len(images), settings.batch_size)) as pool:
            return list(pool.map(lambda triple: self._complete(triple[0], triple[1], settings, triple[2]), triples))

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "sent_parameters": ["max_tokens", "seed", "temperature", "top_p"],
            "not_sent": ["repetition_penalty", "min_pixels", "max_pixels"],
        }
