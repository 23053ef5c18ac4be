"""Shared fixtures: an isolated SQLite store per test, the data folder, a real Streamlit server, headless Chromium."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from medeval_core import context
from medeval_core.settings import default_data_dir
from tests.db_support import db_url, postgres_url  # noqa: F401 - fixtures for every test module
from tests.sdbench_fixtures import catalog, shared_cases  # noqa: F401 - fixtures of the SDBench gatekeeper tests

REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS_DIR = REPO_ROOT / "tests" / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
# Flags that keep Debian's Chromium quiet on a machine with no network but loopback (design.md §7).
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]

# Modules whose tests load a real model (the all-MiniLM-L6-v2 encoder, a tiny random Qwen2.5-VL): marked `slow`, so
# `pytest -m "not slow"` gives a quick local loop; `make test` and CI run them all.
SLOW_MODULES = {"test_embeddings", "test_mediq", "test_dynamicare", "test_sdbench_gatekeeper", "test_icd9_hitk",
                "test_vlm_transformers", "test_ddi_runs", "test_lesion_page"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=2))  # why: requirements-dev.txt


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed browser test reports what the page showed (its URL and visible text, and a screenshot in the
    artifacts), so that a failure on CI, where nobody can look at the browser, says which step the page was at."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    page_ = getattr(item, "funcargs", {}).get("page")
    if report.when != "call" or not report.failed or page_ is None:
        return
    try:
        ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
        page_.screenshot(path=str(ARTIFACTS_DIR / f"failed-{item.name}.png"), full_page=True, timeout=15_000)
        lines = [line.strip() for line in page_.inner_text("body", timeout=15_000).splitlines() if line.strip()]
        shown = f"{page_.url}\n" + " | ".join(lines)[:4000]
    except Exception as exc:  # noqa: BLE001 - the report must keep the test's own failure whatever the page does
        shown = f"the page could not be read: {exc}"
    report.sections.append(("page at failure", shown))


if not os.environ.get("MEDEVAL_DATA_DIR"):
    # The rule the CLI and the app apply, so that helpers reading the variable see the same folder.
    os.environ["MEDEVAL_DATA_DIR"] = str(default_data_dir())


@pytest.fixture(autouse=True)
def isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test writes to its own SQLite file, never to the developer's var/medeval.db."""
    url = f"sqlite:///{tmp_path / 'medeval-test.db'}"
    monkeypatch.setenv("MEDEVAL_DB_URL", url)
    context.reset()
    yield url
    context.reset()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    value = os.environ.get("MEDEVAL_DATA_DIR")
    if not value or not Path(value).is_dir():
        pytest.fail("MEDEVAL_DATA_DIR must point at the shared data folder (CI exports ../shared/data).")
    return Path(value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Ask a server the test started to stop; kill it if it has not within 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


def wait_until_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Streamlit exited early with status {process.returncode}.")
        try:
            if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"Streamlit did not become healthy at {url} within {timeout_s:.0f} s.")


@pytest.fixture(scope="session")
def streamlit_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., str]]:
    """Start ``app.py`` in a real Streamlit server as ``make run`` does (``python -m medeval_core serve``);
    ``streamlit_app(**env)`` returns its URL (one server per env)."""
    servers: dict[tuple[tuple[str, str], ...], tuple[str, subprocess.Popen[bytes]]] = {}

    def start(**extra_env: str) -> str:
        key = tuple(sorted(extra_env.items()))
        if key in servers:
            return servers[key][0]
        port = free_port()
        workdir = tmp_path_factory.mktemp("streamlit")
        env = {
            **os.environ,
            "MEDEVAL_DB_URL": f"sqlite:///{workdir / 'medeval.db'}",
            **extra_env,
        }
        log = (workdir / "streamlit.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "medeval_core", "serve", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_healthy(url, process)
        except Exception:
            process.kill()
            raise
        servers[key] = (url, process)
        return url

    yield start
    for _, process in servers.values():
        stop_process(process)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Debian's headless Chromium driven by Playwright; skipped only where Chromium is absent (never in CI)."""
    chromium = shutil.which("chromium") or (str(CHROMIUM) if CHROMIUM.exists() else None)
    if chromium is None:
        reason = "Chromium is not installed (apt-get install chromium); browser tests need /usr/bin/chromium."
        if os.environ.get("MEDEVAL_REQUIRE_BROWSER"):
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    """A fresh tall browser page (Streamlit scrolls inside its own container, so height shows the whole page)."""
    context_ = browser.new_context(viewport={"width": 1400, "height": 2200})  # type: ignore[attr-defined]
    page_ = context_.new_page()
    page_.set_default_timeout(60_000)
    yield page_
    context_.close()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS_DIR
