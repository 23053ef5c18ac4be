"""``python -m medeval_core serve`` keeps a cold deep link inside the app shell even beside a ``pages/`` folder.

The app, whose page scripts live in a top-level ``pages/`` folder as the card names it, is copied to a temporary
folder with one more script in ``pages/`` that no navigation lists. Under a plain ``streamlit run`` that folder
switches the first request of the process to Streamlit's legacy multipage mode; ``serve`` turns that off before the
server starts. Both servers get a deep link as their very first request, in headless Chromium.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, free_port, stop_process, wait_until_healthy

pytestmark = pytest.mark.browser

STREAMLIT_OPTIONS = ["--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats",
                     "false"]


@pytest.fixture
def app_with_pages_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    folder.mkdir()
    shutil.copy(REPO_ROOT / "app.py", folder / "app.py")
    for name in ("pages", ".streamlit", "assets"):
        shutil.copytree(REPO_ROOT / name, folder / name)
    (folder / "pages" / "legacy_page.py").write_text('import streamlit as st\n\nst.title("Legacy pages folder")\n')
    return folder


def started(command: list[str], folder: Path, port: int) -> Iterator[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MEDEVAL_DB_URL": f"sqlite:///{folder / 'medeval.db'}"}
    log = (folder / f"server-{port}.log").open("wb")
    process = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process)
        yield url
    finally:
        stop_process(process)


def test_a_cold_deep_link_opens_inside_the_app_shell_with_serve_despite_a_pages_folder(
        app_with_pages_folder: Path, page, artifacts_dir: Path) -> None:
    folder = app_with_pages_folder
    port = free_port()
    command = [sys.executable, "-m", "medeval_core", "serve", "--app", str(folder / "app.py"),
               "--server.port", str(port), *STREAMLIT_OPTIONS]
    for url in started(command, folder, port):
        page.goto(f"{url}/runs")  # the server's first request
        page.get_by_role("heading", name="Batch runs").first.wait_for()
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_role("heading", name="Store").wait_for()  # app.py's shell ran around the page
        assert sidebar.get_by_text("Legacy pages folder").count() == 0
        assert sidebar.get_by_role("link", name="legacy page").count() == 0, "no legacy pages-folder navigation"
        page.screenshot(path=str(artifacts_dir / "serve-deep-link.png"), full_page=True)


def test_a_plain_streamlit_run_beside_a_pages_folder_loses_the_shell(app_with_pages_folder: Path,
                                                                    page) -> None:
    """What ``serve`` prevents: the same copy under ``streamlit run`` serves the legacy pages-folder app."""
    folder = app_with_pages_folder
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", str(folder / "app.py"), "--server.port", str(port),
               *STREAMLIT_OPTIONS]
    for url in started(command, folder, port):
        page.goto(f"{url}/runs")
        sidebar = page.get_by_test_id("stSidebarNav")
        sidebar.get_by_text("legacy page").first.wait_for()  # Streamlit's own list of the pages/ folder
