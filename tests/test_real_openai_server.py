"""Every model role end to end against a real OpenAI-compatible server that no one here wrote: ``transformers
serve`` (through ``tests/support/serve_tiny.py``) serving the tiny random Qwen2.5-VL on a free loopback port.

Its replies are random text, so nothing here checks a score: each run must end with every case either scored or
failed with a stored reason, and never with a traceback. One server serves every role (module scope) to keep the
module to about a minute on a laptop.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from medeval_core.settings import role_env_key
from tests.conftest import REPO_ROOT, free_port, stop_process
from tests.ddi_fixtures import make_ddi_folder
from tests.sdbench_fixtures import agentclinic_file, replay_line, write_jsonl
from tests.tiny_qwen import build_tiny_qwen

pytestmark = pytest.mark.slow


class Server:
    def __init__(self, url: str, model: str, log: Path) -> None:
        self.url = url
        self.model = model
        self.log = log


def wait_for_models(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"transformers serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"transformers serve did not answer within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("transformers-serve")
    model = build_tiny_qwen(root / "tiny-qwen")
    port = free_port()
    log = root / "serve.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.serve_tiny", str(model), "--host", "127.0.0.1", "--port", str(port),
             "--device", "cpu", "--default-seed", "0", "--log-level", "warning"],
            cwd=REPO_ROOT, stdout=handle, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for_models(url, process, log)
        yield Server(url, str(model), log)
    finally:
        stop_process(process)


def role_env(server: Server, *roles: str) -> dict[str, str]:
    env = {"MEDEVAL_VLM_API_KEY": "unused", "DASHSCOPE_API_KEY": "unused"}
    for role in roles:
        key = role_env_key(role)
        env[f"MEDEVAL_{key}_BASE_URL"] = server.url
        env[f"MEDEVAL_{key}_MODEL"] = server.model
        # Random weights rarely end a reply: a short cap keeps each chat call's length (and the test's time) fixed.
        env[f"MEDEVAL_{key}_MAX_TOKENS"] = "96"
    return env


def run_cli(db_url: str, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = subprocess.run([sys.executable, "-m", "medeval_core", *args, "--json"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=280,
                          env={**os.environ, "MEDEVAL_DB_URL": db_url, **env})
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), done.stderr
    return done, json.loads(done.stdout)


def assert_every_case_settled(db_url: str, run_id: str, expected: int) -> list[tuple[str, str | None]]:
    """Every case is stored as ok (scored), or failed with a one-line reason; none is left pending."""
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as connection:
        rows = connection.execute("SELECT status, error FROM case_results WHERE run_id = ?", (run_id,)).fetchall()
    assert len(rows) == expected, rows
    for status, error in rows:
        assert status in ("ok", "failed"), rows
        if status == "failed":
            assert error and "\n" not in error.strip() and "Traceback" not in error, error
    return rows


def test_ddi_vision_stage_and_judge(server: Server, tmp_path: Path, isolated_store: str) -> None:
    make_ddi_folder(tmp_path / "ddi")
    done, summary = run_cli(
        isolated_store, role_env(server), "run", "ddi", "--images", str(tmp_path / "ddi"), "--limit", "2",
        "--model-backend", "openai", "--model", server.model, "--base-url", server.url, "--max-new-tokens", "8",
        "--judge", "openai", "--judge-base-url", server.url, "--judge-model", server.model,
    )
    generation_rows = assert_every_case_settled(isolated_store, summary["model_run"]["run_id"], 2)
    # The vision stage answers every image: random text is still a response to judge.
    assert [status for status, _ in generation_rows] == ["ok", "ok"], generation_rows
    judge_rows = assert_every_case_settled(isolated_store, summary["judge_run"]["run_id"], 2)
    # transformers serve refuses DashScope's enable_thinking (the protocol's extra_body) with HTTP 422; the stored
    # reason names the server's words and where the field comes from.
    for status, error in judge_rows:
        assert status == "failed" and error is not None
        assert "422" in error and "enable_thinking" in error and "extra_body" in error, error
    assert "enable_thinking" in done.stderr


def test_mediq_llm_expert_and_llm_patient(server: Server, isolated_store: str, data_dir: Path) -> None:
    _, summary = run_cli(
        isolated_store, role_env(server, "chat", "expert", "patient"), "run", "mediq",
        "--cases", str(data_dir / "mediq" / "imedqa_sample200.jsonl"), "--expert", "llm", "--patient", "llm",
        "--limit", "1", "--max-turns", "1", "--no-baseline",
    )
    assert_every_case_settled(isolated_store, summary["run_id"], 1)


def test_sdbench_llm_gatekeeper_with_replayed_agent(server: Server, tmp_path: Path, isolated_store: str,
                                                    data_dir: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    subprocess.run([sys.executable, "-m", "medeval_core", "cases", "import", "agentclinic",
                    str(agentclinic_file(data_dir)), "--out", str(cases)], cwd=REPO_ROOT, check=True,
                   capture_output=True, timeout=120)
    case_ids = [json.loads(line)["id"] for line in cases.read_text().splitlines()[:2]]
    actions = write_jsonl(tmp_path / "actions.jsonl", [
        replay_line(case_id, ("question", "Any fever?"), ("test", "Complete blood count"),
                    ("diagnosis", "Myasthenia gravis")) for case_id in case_ids
    ])
    run_cli(
        isolated_store, role_env(server, "gatekeeper"), "run", "sdbench", "--cases", str(cases),
        "--agent", "replay", "--actions", str(actions), "--gatekeeper", "llm", "--judge", "offline",
        "--case-ids", *case_ids,
    )
    with sqlite3.connect(isolated_store.removeprefix("sqlite:///")) as connection:
        (run_id,), = connection.execute("SELECT id FROM runs").fetchall()
    assert_every_case_settled(isolated_store, run_id, 2)
