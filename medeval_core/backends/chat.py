"""The chat model role (text -> text) behind a small protocol, and its OpenAI-compatible implementation.

Any OpenAI-compatible endpoint works (vLLM, Ollama, a hosted API). Transient failures (429, 5xx, connection
errors, timeouts) are retried with exponential backoff through tenacity; anything else becomes a
``ChatBackendError`` whose message says what to fix. The API key is read from the environment variable named in
``settings.backends.chat.api_key_env`` at the moment the backend is built, and never stored or logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import openai
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from medeval_core.settings import BackendChoice, api_key

RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)
"""429, 5xx, and connection failures (``APITimeoutError`` is a connection error subclass)."""

Message = dict[str, str]


class ChatBackendError(RuntimeError):
    """The chat endpoint could not answer; the message says what to check."""


class ChatBackend(Protocol):
    model: str

    def complete(self, messages: Sequence[Message]) -> str:
        """The assistant's reply to ``messages`` (OpenAI chat format: role + content)."""

    def describe(self) -> dict[str, Any]:
        """What a run records about the backend (never the key)."""


class OpenAIChatBackend:
    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        seed: int | None = 0,
        timeout_s: float = 120.0,
        max_attempts: int = 5,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 30.0,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.max_attempts = max_attempts
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        # Local servers accept any key, but the SDK insists on a non-empty string.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key(api_key_env) or "unused",
                                     timeout=timeout_s, max_retries=0)

    def complete(self, messages: Sequence[Message]) -> str:
        retrying = Retrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=wait_exponential_jitter(multiplier=self.retry_initial_s, max=self.retry_max_s,
                                         jitter=self.retry_initial_s),
            retry=retry_if_exception_type(RETRYABLE),
            reraise=True,
        )
        extra: dict[str, Any] = {} if self.seed is None else {"seed": self.seed}
        try:
            response = retrying(
                self._client.chat.completions.create,
                model=self.model, messages=list(messages), temperature=self.temperature,  # type: ignore[arg-type]
                max_tokens=self.max_tokens, **extra,
            )
        except openai.AuthenticationError as exc:
            raise ChatBackendError(
                f"The endpoint {self.base_url} refused the API key; set {self.api_key_env} to a valid key."
            ) from exc
        except openai.APIConnectionError as exc:
            raise ChatBackendError(
                f"Could not reach {self.base_url} after {self.max_attempts} attempts ({exc}); check that the "
                "server is running and the URL ends with /v1."
            ) from exc
        except openai.APIStatusError as exc:
            raise ChatBackendError(
                f"The endpoint {self.base_url} answered HTTP {exc.status_code} for model {self.model!r}: "
                f"{exc.message}"
            ) from exc
        if not response.choices or response.choices[0].message.content is None:
            raise ChatBackendError(f"The endpoint {self.base_url} returned no text for model {self.model!r}.")
        return response.choices[0].message.content

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "base_url": self.base_url,
                "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed}


def make_chat_backend(choice: BackendChoice, **options: Any) -> ChatBackend:
    """The configured chat backend, or a ChatBackendError saying how to configure one."""
    if choice.backend != "openai" or not choice.base_url or not choice.model:
        raise ChatBackendError(
            "No chat model is configured: set MEDEVAL_CHAT_BASE_URL (an OpenAI-compatible endpoint ending in /v1) "
            f"and MEDEVAL_CHAT_MODEL, and the key in {choice.api_key_env} if the endpoint needs one."
        )
    return OpenAIChatBackend(base_url=choice.base_url, model=choice.model, api_key_env=choice.api_key_env, **options)
