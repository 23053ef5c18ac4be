"""The store under load and at its limits (issue 19, item 8), on SQLite:

- two 8-concurrency runs (worker processes), the Batch runs page (AppTest) and an export, all at once on one file:
  no "database is locked", nothing lost;
- a store of 100,000 results: the Batch runs page renders;
- the store's disk filling up mid-run (a small tmpfs): one clear error, every committed case intact, and a resume
  on a larger disk (the database copied there) finishes.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core.records import CaseStatus, RunConfig
from medeval_core.runs import service, workers
from medeval_core.settings import load_settings
from medeval_core.store import Store, open_store
from tests.conftest import REPO_ROOT
from tests.test_leases import COUNTING, wait_for

RUNS_PAGE = str(REPO_ROOT / "pages" / "runs.py")


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", COUNTING)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))


def worker(run_id: str, url: str | None = None) -> subprocess.Popen[str]:
    environment = {**os.environ, **({"MEDEVAL_DB_URL": url} if url else {})}
    return subprocess.Popen([sys.executable, "-m", "medeval_core", "worker", run_id, "--json"], cwd=REPO_ROOT,
                            env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stored_results(database: Path, run_id: str) -> int:
    """How many results a run has committed so far, read beside the writing worker (WAL readers never block it)."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        try:
            return int(connection.execute("SELECT COUNT(*) FROM case_results WHERE run_id = ?", (run_id,))
                       .fetchone()[0])
        except sqlite3.OperationalError:  # the worker is still creating its tables
            return 0


def each_case_once(store: Store, run_id: str, n_cases: int) -> None:
    results = store.results(run_id)
    assert len(results) == n_cases and all(r.status == CaseStatus.OK for r in results)
    assert len({r.case_id for r in results}) == n_cases


def test_two_runs_the_runs_page_and_an_export_at_once_on_one_sqlite_file(
        isolated_store: str, counting: None, tmp_path: Path) -> None:
    store = open_store(isolated_store)
    n_cases = 600
    runs = [workers.create_run(load_settings(), "counting", {"n_cases": n_cases, "sleep_s": 0.05, "concurrency": 8},
                               label=f"probe {i}") for i in range(2)]
    started = [worker(run_id) for run_id in runs]
    wait_for(lambda: all(store.result_counts(run_id).get("ok", 0) for run_id in runs), timeout_s=120)
    renders = exports = renders_beside_both = 0
    while any(process.poll() is None for process in started) or not renders:
        renders_beside_both += all(process.poll() is None for process in started)
        app = AppTest.from_file(RUNS_PAGE, default_timeout=120).run()
        assert not app.exception, app.exception
        assert not [e.value for e in app.error], [e.value for e in app.error]
        renders += 1
        for run_id in runs:
            service.export_results(store, run_id, tmp_path / f"{run_id}.csv")
            exports += 1
    for process in started:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0 and "locked" not in err, err
    assert renders_beside_both >= 1 and exports >= 2
    for run_id in runs:
        each_case_once(store, run_id, n_cases)
        assert service.run_overview(store, run_id).state == "completed"
        service.export_results(store, run_id, tmp_path / f"{run_id}.csv")
        with (tmp_path / f"{run_id}.csv").open(encoding="utf-8") as exported:
            assert len(list(csv.DictReader(exported))) == n_cases


def test_a_store_of_100000_results_renders_the_runs_page(isolated_store: str, counting: None) -> None:
    n_results = 100_000
    store = open_store(isolated_store)
    store.create_run(RunConfig(benchmark="counting", label="large"), run_id="large", expected_cases=n_results)
    # Written by the driver in one transaction: the setup, not the store's write path, is not what is tested.
    with sqlite3.connect(isolated_store.removeprefix("sqlite:///")) as connection:
        connection.executemany(
            "INSERT INTO case_results (run_id, case_id, repetition, status, output, metrics, scores, error, "
            "started_at, finished_at) VALUES ('large', ?, 0, 'ok', ?, ?, '{}', NULL, '2026-01-01 00:00:00', "
            "'2026-01-01 00:00:01')",
            ((f"case-{i:06d}", json.dumps({"echo": f"case-{i:06d}", "index": i}),
              json.dumps({"index": i, "even": i % 2 == 0})) for i in range(n_results)))
    app = AppTest.from_file(RUNS_PAGE, default_timeout=300).run()
    assert not app.exception, app.exception
    app.toggle(key="cases_shown").set_value(True).run()
    assert not app.exception, app.exception
    # The per-case table is paged through the store: the first page of the whole run, never every result.
    assert f"1-50 of {n_results} case results" in " ".join(c.value for c in app.caption)


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A tmpfs of 8 MB, mounted for the test (root only); skipped with the reason where mounting is refused,
    unless MEDEVAL_REQUIRE_TMPFS=1 (``.ci/run`` as root) makes that a failure."""
    folder = Path(tempfile.mkdtemp(prefix="medeval-small-disk-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        folder.rmdir()
        reason = (f"cannot mount a small tmpfs for the disk-full probe (needs root and CAP_SYS_ADMIN): "
                  f"{mounted.stderr.strip() or mounted.returncode}")
        if os.environ.get("MEDEVAL_REQUIRE_TMPFS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_full_disk_mid_run_is_one_clear_error_and_a_resume_on_a_larger_disk_finishes(
        small_disk: Path, counting: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{small_disk / 'medeval.db'}"
    monkeypatch.setenv("MEDEVAL_DB_URL", url)
    n_cases = 20_000
    store = Store(url)
    run_id = workers.create_run(load_settings(), "counting", {"n_cases": n_cases, "concurrency": 4})
    store.engine.dispose()
    process = worker(run_id, url)
    # Mid-run: once the worker has committed some results, fill the disk but for about 0.3 MB, which the rest of the
    # run does not fit in (filling it before the start left the first commit itself without room on a busy CI).
    deadline = time.monotonic() + 120
    while stored_results(small_disk / "medeval.db", run_id) < 50:
        assert process.poll() is None and time.monotonic() < deadline, "the worker committed no result"
        time.sleep(0.02)
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    (small_disk / "ballast").write_bytes(b"\0" * max(free - 300_000, 0))
    _, err = process.communicate(timeout=180)
    assert process.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "out of disk space" in lines[0] and "resume" in lines[0], err
    assert str(small_disk) in lines[0]
    # Every committed case is intact: the file is consistent and holds whole results.
    with sqlite3.connect(small_disk / "medeval.db") as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        committed = dict(connection.execute("SELECT case_id, output FROM case_results WHERE run_id = ?",
                                            (run_id,)).fetchall())
    assert 0 < len(committed) < n_cases
    assert all(json.loads(output)["echo"] == case_id for case_id, output in committed.items())
    # Resume on a larger disk: the database (file and write-ahead log) copied there.
    larger = tmp_path / "larger"
    larger.mkdir()
    for path in small_disk.glob("medeval.db*"):
        shutil.copy2(path, larger / path.name)
    copy_url = f"sqlite:///{larger / 'medeval.db'}"
    assert service.run_overview(Store(copy_url), run_id).state == "interrupted"
    resumed = worker(run_id, copy_url)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    copy = Store(copy_url)
    each_case_once(copy, run_id, n_cases)
    after = {r.case_id: r.output for r in copy.results(run_id)}
    assert all(after[case_id] == json.loads(output) for case_id, output in committed.items())
    assert service.run_overview(copy, run_id).state == "completed"
