"""An LLM judge over any OpenAI-compatible endpoint (a hosted API, vLLM, Ollama), generic over its verdict.

Every request value comes from the judge's ``JudgeRequestSettings`` (``configs/<name>_judge.json``). The SDK's own
retries are off (``sdk_max_retries`` 0): retries happen here, so that each attempt passes the endpoint's rate budget
(shared through the store by every process that judges with it), is validated the same way and is reported to
``on_attempt`` (and so stored). A verdict that breaks its schema counts as a failed attempt, like an HTTP error:
strict validation is what keeps a malformed answer from becoming a score. The judging benchmark brings the
messages and the verdict model; ``models.for_role`` builds the client for a judge role.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import openai
from openai import OpenAI
from pydantic import BaseModel, ValidationError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from medeval_core.benchmark import messages_sha256
from medeval_core.data.files import json_value
from medeval_core.judges.base import AttemptCallback, CallCallback, JudgeAttempt, JudgeError
from medeval_core.judges.ratelimit import shared_limiter
from medeval_core.models.openai_client import status_error_text
from medeval_core.records import ModelCall
from medeval_core.redaction import redact, register_secret
from medeval_core.settings import JudgeRequestSettings
from medeval_core.store import Store

RETRYABLE_STATUS = frozenset({408, 409, 429})
V = TypeVar("V", bound=BaseModel)


class InvalidVerdictError(ValueError):
    """The endpoint answered, but not with a valid verdict (not JSON, wrong keys or types)."""


def strict_verdict(content: str | None, verdict: type[V]) -> V:
    """Validate the judge's message strictly: a JSON object with exactly ``verdict``'s keys and their types."""
    if content is None:
        raise InvalidVerdictError("the response has no message content")
    try:
        data = json_value(content)
    except ValueError as exc:
        raise InvalidVerdictError(f"the response is {exc}") from None
    if not isinstance(data, dict):
        raise InvalidVerdictError(f"the response is JSON but a {type(data).__name__}, not an object")
    keys = frozenset(verdict.model_fields)
    missing, extra = keys - data.keys(), data.keys() - keys
    if missing or extra:
        problems = [f"missing {sorted(missing)}"] if missing else []
        problems += [f"unexpected {sorted(extra)}"] if extra else []
        raise InvalidVerdictError(f"the verdict has the wrong keys: {'; '.join(problems)}")
    try:
        return verdict.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "verdict"
        raise InvalidVerdictError(f"invalid verdict: {where}: {first['msg']}") from None


def estimate_tokens(messages: list[dict[str, str]], max_output_tokens: int) -> int:
    """Budget tokens for one request: one per input character plus the whole output allowance.

    One token per character over-counts English (about four characters per token) but never under-counts any
    script, so the token budget cannot be exceeded whatever the responses contain.
    """
    return sum(len(message["content"]) for message in messages) + max_output_tokens


def message_content(raw: Any) -> str | None:
    """The assistant message of a raw SDK response; a body that is not a chat completion is an invalid answer."""
    try:
        completion = raw.parse()
        return completion.choices[0].message.content if completion.choices else None
    except (ValueError, AttributeError, TypeError, IndexError, KeyError) as exc:
        # The SDK builds the completion without validation, so a malformed body surfaces as one of these.
        raise InvalidVerdictError(f"the HTTP body is not a chat completion ({type(exc).__name__})") from None


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500
    # Timeouts are a subclass of connection errors; a 2xx body that is not JSON is an invalid response.
    return isinstance(exc, (openai.APIConnectionError, openai.APIResponseValidationError, InvalidVerdictError))


def describe(exc: BaseException, limit: int = 500) -> str:
    """One line for the stored attempt and the error raised: a provider's body can echo the key, so redacted."""
    reason = status_error_text(exc) if isinstance(exc, openai.APIStatusError) else redact(str(exc))
    text = f"{type(exc).__name__}: {reason}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OpenAIJudgeClient:
    """Judging requests to one endpoint and model, under the judge settings' retries, timeouts and rate budget."""

    def __init__(
        self,
        *,
        request: JudgeRequestSettings,
        base_url: str,
        model: str,
        api_key: str,
        store: Store,
        role: str = "judge",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        batch = request.batch_evaluator_defaults
        self.name = f"openai:{model}"
        self.model = model
        self.base_url = base_url
        self.role = role
        self.concurrency = batch.concurrency
        self.progress_every = batch.progress_every
        self.request = request
        self.limiter = shared_limiter(store, base_url, model, batch.requests_per_minute, batch.tokens_per_minute,
                                      batch.rate_window_seconds)
        self._sleep = sleep
        register_secret(api_key)
        self._client = OpenAI(base_url=base_url, api_key=api_key, timeout=request.timeout_seconds,
                              max_retries=request.sdk_max_retries)

    def request_body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The chat.completions arguments for ``messages``; ``extra_body`` is merged into the JSON body by the SDK."""
        return {
            "model": self.model,
            "messages": messages,
            "temperature": self.request.temperature,
            "max_tokens": self.request.max_tokens,
            "response_format": self.request.response_format,
            "extra_body": self.request.extra_body,
        }

    def judge(self, case_id: str, messages: list[dict[str, str]], parse: Callable[[str | None], V],
              on_attempt: AttemptCallback | None = None, on_call: CallCallback | None = None) -> V:
        """The verdict ``parse`` makes of the answer to ``messages`` (it raises ``InvalidVerdictError`` for an
        invalid one), or ``JudgeError`` once the retries are spent; ``on_attempt`` sees every attempt, ``on_call``
        every request sent."""
        body = self.request_body(messages)
        tokens = estimate_tokens(body["messages"], self.request.max_tokens)
        if tokens > self.limiter.max_tokens:
            raise JudgeError(f"The request for case {case_id} is estimated at {tokens} tokens, more than the "
                             f"token budget of {self.limiter.max_tokens} per window.")
        batch = self.request.batch_evaluator_defaults
        low, high = batch.retry_jitter_seconds
        retrying = Retrying(
            stop=stop_after_attempt(batch.max_retries_after_first_attempt + 1),
            wait=wait_exponential(multiplier=batch.retry_initial_seconds, min=batch.retry_initial_seconds,
                                  max=batch.retry_max_seconds) + wait_random(low, high),
            retry=retry_if_exception(is_retryable),
            sleep=self._sleep,
            reraise=True,
        )
        attempts = 0
        try:
            for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    verdict = self._attempt(body, tokens, attempts, parse, on_attempt, on_call)
        except (openai.OpenAIError, InvalidVerdictError) as exc:
            kind = "after" if is_retryable(exc) else "(not retryable) after"
            raise JudgeError(f"No valid verdict {kind} {attempts} attempt(s): {describe(exc)}"
                             f"{self._extra_body_hint(exc)}") from exc
        return verdict

    def _extra_body_hint(self, exc: Exception) -> str:
        """A refused request that carries the protocol's provider-specific ``extra_body`` fields (such as
        ``enable_thinking``) says where they come from, since servers that validate the body (``transformers
        serve``) refuse unknown fields with HTTP 400/422; the protocol's fields are never dropped silently."""
        if not self.request.extra_body or getattr(exc, "status_code", None) not in (400, 422):
            return ""
        return (f"; the request carried the judge settings' extra_body fields {sorted(self.request.extra_body)}, "
                "which this server may not accept; use an endpoint that accepts them or a judge settings file "
                "without them.")

    def _attempt(self, body: dict[str, Any], tokens: int, number: int, parse: Callable[[str | None], V],
                 on_attempt: AttemptCallback | None, on_call: CallCallback | None) -> V:
        status: int | None = None
        usage: Any = None
        try:
            with self.limiter.slot(tokens):
                started = time.monotonic()
                raw = self._client.chat.completions.with_raw_response.create(**body)
            status = raw.status_code
            content = message_content(raw)
            usage = _usage(raw)
            verdict = parse(content)
        except (openai.OpenAIError, InvalidVerdictError) as exc:
            latency = time.monotonic() - started
            if on_call is not None:
                on_call(self._call(body, number, latency, usage, error=describe(exc, 200)))
            if on_attempt is not None:
                on_attempt(JudgeAttempt(attempt=number, ok=False, latency_s=latency,
                                        http_status=getattr(exc, "status_code", status), error=describe(exc)))
            raise
        if on_call is not None:
            on_call(self._call(body, number, time.monotonic() - started, usage))
        if on_attempt is not None:
            on_attempt(JudgeAttempt(attempt=number, ok=True, verdict=verdict, latency_s=time.monotonic() - started,
                                    http_status=status))
        return verdict

    def _call(self, body: dict[str, Any], number: int, latency_s: float, usage: Any,
              error: str | None = None) -> ModelCall:
        """One request as a ``ModelCall`` of the judge's role: the exact messages' sha256, latency, tokens."""
        return ModelCall(role=self.role, model=self.model, messages_sha256=messages_sha256(body["messages"]),
                         latency_s=latency_s, attempt=number, ok=error is None, error=error,
                         prompt_tokens=getattr(usage, "prompt_tokens", None),
                         completion_tokens=getattr(usage, "completion_tokens", None))


def _usage(raw: Any) -> Any:
    try:
        return getattr(raw.parse(), "usage", None)
    except (ValueError, AttributeError, TypeError):
        return None
