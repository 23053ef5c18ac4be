"""The chat model role (text -> text) behind a small protocol, and its OpenAI-compatible implementation.

Any OpenAI-compatible endpoint works (vLLM, Ollama, a hosted API); retries and errors are those of
``CompletionClient``, with failures raised as ``ChatBackendError``. ``models.for_role`` builds one for a role; the
key comes from the variable named in that role's ``api_key_env``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from medeval_core.data.files import json_value
from medeval_core.models.openai_client import CallRecorder, CompletionClient

Message = dict[str, str]


class ChatBackendError(RuntimeError):
    """The chat endpoint could not answer; the message says what to check."""


class ChatBackend(Protocol):
    model: str

    def complete(self, messages: Sequence[Message], on_call: CallRecorder | None = None,
                 role: str = "chat") -> str:
        """The assistant's reply to ``messages`` (OpenAI chat format: role + content); ``on_call`` receives
        a ``ModelCall`` per attempt."""

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
        request_options: dict[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.request_options = dict(request_options or {})
        """Merged into every request (a run's ``--model-args``: reasoning effort, top_p...)."""
        self._client = CompletionClient(base_url, model, api_key_env, ChatBackendError, timeout_s=timeout_s,
                                        max_attempts=max_attempts, retry_initial_s=retry_initial_s,
                                        retry_max_s=retry_max_s)

    def complete(self, messages: Sequence[Message], on_call: CallRecorder | None = None,
                 role: str = "chat") -> str:
        extra: dict[str, Any] = {} if self.seed is None else {"seed": self.seed}
        request = {"temperature": self.temperature, "max_tokens": self.max_tokens, **extra, **self.request_options}
        return self._client.complete(list(messages), role=role, on_call=on_call, **request)

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "base_url": self.base_url,
                "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed,
                **({"request_options": self.request_options} if self.request_options else {})}


class ReplyFormatError(RuntimeError):
    """A model gave no valid reply in the allowed corrections; the message says what was wrong last."""


def json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model's reply, tolerating code fences and text around it; ValueError otherwise."""
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.DOTALL)
    candidate = fenced.group(1) if fenced else text[text.find("{"): text.rfind("}") + 1]
    if not candidate:
        raise ValueError("the reply holds no JSON object")
    try:
        value = json_value(candidate)
    except ValueError as exc:
        raise ValueError(f"the reply is {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("the reply is not a JSON object")
    return value


T = TypeVar("T")


def ask_until_valid(backend: ChatBackend, messages: list[Message], parse: Callable[[str], T], *, role: str,
                    on_call: CallRecorder | None = None, max_invalid: int = 2) -> T:
    """Send ``messages`` and parse the reply; an invalid reply (``parse`` raises ValueError) is answered with what
    was wrong and asked again, ``max_invalid`` times. The exchange is appended to ``messages``."""
    problem = ""
    for _ in range(max_invalid + 1):
        reply = backend.complete(messages, on_call=on_call, role=role)
        messages.append({"role": "assistant", "content": reply})
        try:
            return parse(reply)
        except ValueError as exc:
            problem = str(exc)
            messages.append({"role": "user", "content": f"That reply was not valid: {problem}. Answer again "
                                                        "exactly in the format asked."})
    raise ReplyFormatError(f"The {role} model gave no valid reply in {max_invalid + 1} tries; last problem: "
                           f"{problem}.")
