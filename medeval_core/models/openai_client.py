"""One chat-completions call to an OpenAI-compatible endpoint (vLLM, Ollama, a hosted API), shared by the vision
and chat backends: tenacity retries of transient failures, and readable errors for the rest.

Transient failures are 429, 5xx and connection errors (``APITimeoutError`` is a connection error). The API key is
read from the environment variable named ``api_key_env`` when the client is built, and never stored or logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import openai
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from medeval_core.benchmark import messages_sha256
from medeval_core.records import ModelCall
from medeval_core.redaction import redact
from medeval_core.settings import api_key

CallRecorder = Callable[[ModelCall], None]
"""Receives one ``ModelCall`` per attempt (``CaseContext.record_model_call``)."""

RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)


def status_error_text(exc: openai.APIStatusError) -> str:
    """The SDK's message plus the server's own reason: the SDK keeps only an ``{"error": ...}`` body, so the
    ``{"detail": ...}`` body of FastAPI servers (``transformers serve``, HTTP 422 "Unexpected fields in the
    request") would otherwise be lost, leaving a bare status code. Redacted: a body can echo the key."""
    detail = exc.body.get("detail") if isinstance(exc.body, dict) else None
    text = exc.message if detail is None or str(detail) in exc.message else f"{exc.message} - {detail}"
    return redact(text)


class CompletionClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str,
        error: type[Exception],
        timeout_s: float,
        max_attempts: int,
        retry_initial_s: float,
        retry_max_s: float,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.error = error
        self.max_attempts = max_attempts
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        # Local servers accept any key, but the SDK insists on a non-empty string.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key(api_key_env) or "unused",
                                     timeout=timeout_s, max_retries=0)

    def complete(self, messages: list[dict[str, Any]], *, role: str = "", on_call: CallRecorder | None = None,
                 **parameters: Any) -> str:
        """The first choice's text; raises ``self.error`` with what to fix when the endpoint cannot answer.

        With ``on_call``, every attempt (failed ones too) is reported as a ``ModelCall`` for ``role``: latency,
        token usage and the sha256 of the exact messages sent.
        """
        digest = messages_sha256(messages) if on_call is not None else ""
        attempts = 0

        def create(**request: Any) -> Any:
            nonlocal attempts
            attempts += 1
            started = time.monotonic()
            try:
                response = self._client.chat.completions.create(**request)
            except Exception as exc:
                if on_call is not None:
                    on_call(ModelCall(role=role, model=self.model, messages_sha256=digest, attempt=attempts,
                                      latency_s=time.monotonic() - started, ok=False,
                                      error=f"{type(exc).__name__}: {getattr(exc, 'status_code', '')}".strip()))
                raise
            if on_call is not None:
                usage = getattr(response, "usage", None)
                on_call(ModelCall(role=role, model=self.model, messages_sha256=digest, attempt=attempts,
                                  latency_s=time.monotonic() - started,
                                  prompt_tokens=getattr(usage, "prompt_tokens", None),
                                  completion_tokens=getattr(usage, "completion_tokens", None)))
            return response

        retrying = Retrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=wait_exponential_jitter(multiplier=self.retry_initial_s, max=self.retry_max_s,
                                         jitter=self.retry_initial_s),
            retry=retry_if_exception_type(RETRYABLE),
            reraise=True,
        )
        try:
            response = retrying(create, model=self.model, messages=messages, **parameters)
        except openai.AuthenticationError as exc:
            raise self.error(
                f"The endpoint {self.base_url} refused the API key; set {self.api_key_env} to a valid key."
            ) from exc
        except openai.APIConnectionError as exc:
            raise self.error(
                f"Could not reach {self.base_url} after {self.max_attempts} attempts ({redact(str(exc))}); check "
                "that the server is running and the URL ends with /v1."
            ) from exc
        except openai.APIStatusError as exc:
            raise self.error(
                f"The endpoint {self.base_url} answered HTTP {exc.status_code} for model {self.model!r}: "
                f"{status_error_text(exc)}"
            ) from exc
        if not response.choices or response.choices[0].message.content is None:
            raise self.error(f"The endpoint {self.base_url} returned no text for model {self.model!r}.")
        return response.choices[0].message.content
