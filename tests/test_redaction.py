"""API keys echoed by a provider never reach the store, the logs or an export (issue 8, item 2)."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from medeval_core import context
from medeval_core.cli import main
from medeval_core.models.openai_client import CompletionClient
from medeval_core.redaction import REDACTED, redact, register_secret
from tests.fake_openai import FakeOpenAI, Reply

# Not shaped like an sk- key or a bearer token: only knowing the configured key can remove it.
KEY = "dashscope-9f8e7d6c5b4a3210fedcba"


def echoing_401(key: str) -> Reply:
    body = {"error": {"message": f"Incorrect API key provided: Bearer {key}. You can find your API key at "
                                 f"https://example.invalid (key {key}).", "type": "invalid_request_error",
                      "code": "invalid_api_key"}}
    return Reply(status=401, raw_body=json.dumps(body), headers={"content-type": "application/json"})


def every_byte_written(tmp_path: Path) -> bytes:
    return b"".join(path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())


def test_a_401_echoing_the_key_leaves_no_trace_in_the_database_logs_or_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DASHSCOPE_API_KEY", KEY)
    context.reset()
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"image_id": f"c{i}", "reference": "melanoma",
                                             "response": "Final diagnosis: melanoma"}) + "\n" for i in range(3)),
                         encoding="utf-8")
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with FakeOpenAI(echoing_401(KEY)) as server:
            code = main(["judge", "ddi", "--responses", str(responses), "--judge-base-url", server.url,
                         "--run-id", "leaky", "--json"])
            sent = [r.headers.get("authorization", "") for r in server.chat_requests()]
        assert main(["runs", "export", "leaky", "--out", str(tmp_path / "out.csv")]) == 0
        assert main(["runs", "export", "leaky", "--out", str(tmp_path / "out.jsonl")]) == 0
        assert main(["runs", "show", "leaky", "--json"]) == 0
    finally:
        root.removeHandler(handler)
        root.setLevel(previous_level)
    output = capsys.readouterr()
    # Every judgement failed on the 401, so the run is failed and the command says so with exit status 1.
    assert code == 1 and sent and all(KEY in header for header in sent)  # the key was really used
    store = context.current_store()
    errors = [r.error for r in store.results("leaky")] + [j.error for j in store.judgements(run_id="leaky")]
    assert errors and all(error and "401" in error and REDACTED in error for error in errors)
    context.reset()  # close the store so that its WAL is folded into the file
    written = every_byte_written(tmp_path)
    assert b"Incorrect API key provided" in written  # the errors are there, without the key
    assert KEY.encode() not in written
    assert KEY not in log.getvalue() + output.out + output.err


def test_the_chat_backend_error_is_redacted_before_it_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDEVAL_CHAT_API_KEY", KEY)
    forbidden = Reply(status=403, raw_body=json.dumps({"error": {"message": f"key {KEY} may not use this model"}}),
                      headers={"content-type": "application/json"})
    with FakeOpenAI(forbidden) as server:
        client = CompletionClient(server.url, "m", "MEDEVAL_CHAT_API_KEY", RuntimeError, timeout_s=5,
                                  max_attempts=1, retry_initial_s=0.01, retry_max_s=0.01)
        with pytest.raises(RuntimeError) as raised:
            client.complete([{"role": "user", "content": "hi"}])
    assert "HTTP 403" in str(raised.value) and KEY not in str(raised.value) and REDACTED in str(raised.value)


def test_redact_removes_registered_keys_token_shapes_and_log_arguments() -> None:
    register_secret("a-registered-secret-value")
    text = redact("got a-registered-secret-value, Authorization: Bearer abc.DEF-123_xyz and sk-proj-AbC123dEf456")
    assert text == f"got {REDACTED}, Authorization: Bearer {REDACTED} and {REDACTED}"
    assert redact("plain text stays") == "plain text stays"
    log = io.StringIO()
    logger = logging.getLogger("medeval.test.redaction")
    handler = logging.StreamHandler(log)
    logger.addHandler(handler)
    try:
        logger.warning("retrying with %s", "Bearer sk-live-0123456789")
        try:
            raise ValueError("the provider said a-registered-secret-value is wrong")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert "0123456789" not in log.getvalue() and "a-registered-secret-value" not in log.getvalue()
    assert "retrying with Bearer" in log.getvalue() and "ValueError" in log.getvalue()
