"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks, scripted per request.

The openai SDK talks to it over a socket exactly as it would to a provider, so retries, timeouts, status codes and
malformed bodies are exercised end to end (mocking libraries cannot patch the SDK's httpx2 transport).

    with FakeOpenAI(Script({"case-1": [Reply(status=429)]}, default=Reply(content="..."))) as server:
        client = OpenAI(base_url=server.url, api_key="test")
        ...
        server.requests  # every request: body, headers, arrival and answer times, the reply sent
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response


@dataclass(frozen=True)
class Reply:
    """What the server answers to one request.

    ``content`` becomes the assistant message of a chat completion; ``raw_body`` replaces the whole HTTP body
    (for example text that is not JSON); ``delay_s`` waits before answering (a hang is a delay longer than the
    client's timeout; the server's shutdown cuts it short).
    """

    status: int = 200
    content: str | None = ""
    raw_body: str | None = None
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    arrived_at: float
    """``time.monotonic()`` at arrival (the server runs in the caller's process, so clocks compare)."""
    answered_at: float | None = None
    reply: Reply | None = None

    def text(self) -> str:
        """All text of the request's messages, for matching a script key."""
        if not isinstance(self.body, dict):
            return ""
        parts: list[str] = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(part.get("text", "") for part in content if isinstance(part, dict))
        return "\n".join(parts)


Responder = Callable[[RecordedRequest], Reply]


def verdict_reply(predicted: str, correct: bool, reason: str = "scripted verdict", **extra: Any) -> Reply:
    """A judge answer in the DDI verdict schema (``extra`` adds keys, to script schema violations)."""
    return Reply(content=json.dumps({"predicted_diagnosis": predicted, "correct": correct, "reason": reason,
                                     **extra}))


class Script:
    """Replies by marker: a request whose messages contain ``marker`` gets that marker's next scripted reply;
    when a marker's list is used up, or no marker matches, it gets ``default`` (a Reply or a responder)."""

    def __init__(self, by_marker: Mapping[str, Iterable[Reply]] | None = None,
                 default: Reply | Responder = Reply(content="ok")) -> None:
        self._queues = {marker: deque(replies) for marker, replies in (by_marker or {}).items()}
        self._default = default
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        text = request.text()
        with self._lock:
            for marker, queue in self._queues.items():
                if marker in text and queue:
                    return queue.popleft()
        return self._default(request) if callable(self._default) else self._default


def chat_completion(content: str | None, model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


class FakeOpenAI:
    def __init__(self, responder: Responder | Reply = Reply(content="ok"), latency_s: float = 0.0) -> None:
        self.responder: Responder = responder if callable(responder) else (lambda _request: responder)
        self.latency_s = latency_s
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app = self._build_app()

    @property
    def url(self) -> str:
        """The base URL to give the SDK (``.../v1``)."""
        if self._socket is None:
            raise RuntimeError("Start the fake server first.")
        host, port = self._socket.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "tests"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            raw = await request.body()
            try:
                body: Any = json.loads(raw)
            except json.JSONDecodeError:
                body = raw.decode("utf-8", "replace")
            record = RecordedRequest(method="POST", path=request.url.path, headers=dict(request.headers),
                                     body=body, arrived_at=time.monotonic())
            with self._lock:
                self.requests.append(record)
            reply = self.responder(record)
            await self._wait(self.latency_s + reply.delay_s)
            record.reply = reply
            record.answered_at = time.monotonic()
            if reply.raw_body is not None:
                return Response(reply.raw_body, status_code=reply.status, headers=dict(reply.headers),
                                media_type="application/json")
            if reply.status >= 400:
                error = {"error": {"message": f"scripted status {reply.status}", "type": "scripted",
                                   "code": reply.status}}
                return JSONResponse(error, status_code=reply.status, headers=dict(reply.headers))
            model = body.get("model", "fake-model") if isinstance(body, dict) else "fake-model"
            return JSONResponse(chat_completion(reply.content, model), status_code=reply.status,
                                headers=dict(reply.headers))

        return app

    async def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set() and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.05))

    def start(self) -> FakeOpenAI:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit this: without it, Nagle plus delayed ACKs add 40 ms to every response
        # on a kept-alive connection, which would swamp latency and throughput measurements.
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind(("127.0.0.1", 0))
        config = uvicorn.Config(self.app, log_config=None, log_level="warning", access_log=False,
                                timeout_graceful_shutdown=0.5, backlog=2048)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        # Importing Streamlit (settings.api_key does) attaches handlers to uvicorn's loggers; keep tests quiet.
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).setLevel(logging.WARNING)
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("The fake OpenAI server did not start within 10 s.")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
