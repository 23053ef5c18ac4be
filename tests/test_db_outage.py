"""Workers ride out a database outage (issue 19, item 2), on a PostgreSQL cluster of the test's own that it stops
and starts under a running worker: a short outage ends with the run completed, without a resume, each case
exactly once; an outage longer than ``MEDEVAL_DB_OUTAGE_SECONDS`` stops the worker with one line naming the
database (its password masked) and leaves the run interrupted, and a resume finishes it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from medeval_core.records import CaseStatus
from medeval_core.runs import service, workers
from medeval_core.settings import load_settings
from medeval_core.store import Store
from tests import pg_cluster
from tests.conftest import REPO_ROOT
from tests.pg_cluster import PostgresCluster
from tests.test_leases import COUNTING, wait_for

PASSWORD = "Outage-Pw-9"
# How long the restart keeps the database down: 6 s here; MEDEVAL_TEST_OUTAGE_SECONDS=65 probes the 60 s promise.
OUTAGE_S = float(os.environ.get("MEDEVAL_TEST_OUTAGE_SECONDS", "6"))
own_postgres = pg_cluster.own_postgres


def start_worker(url: str, run_id: str, outage_s: float, *extra: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "MEDEVAL_DB_URL": url, "MEDEVAL_BENCHMARKS": COUNTING,
                   "PYTHONPATH": str(REPO_ROOT), "MEDEVAL_DB_OUTAGE_SECONDS": str(outage_s)}
    return subprocess.Popen([sys.executable, "-m", "medeval_core", "worker", run_id, "--json", *extra],
                            cwd=REPO_ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_under_way(own_postgres: PostgresCluster, monkeypatch: pytest.MonkeyPatch, n_cases: int, outage_s: float,
                  *worker_args: str) -> tuple[Store, str, subprocess.Popen[str]]:
    """A counting run on the test's own cluster with a worker (riding out outages up to ``outage_s``) that has
    stored its first 20 results."""
    url = own_postgres.url(PASSWORD)
    monkeypatch.setenv("MEDEVAL_DB_URL", url)
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", COUNTING)
    store = Store(url)
    run_id = workers.create_run(load_settings(), "counting", {"n_cases": n_cases, "sleep_s": 0.05, "concurrency": 2})
    worker = start_worker(url, run_id, outage_s, *worker_args)
    wait_for(lambda: store.result_counts(run_id).get("ok", 0) >= 20, timeout_s=120)
    return store, run_id, worker


def each_case_once(store: Store, run_id: str, n_cases: int) -> None:
    results = store.results(run_id)
    assert len(results) == n_cases and all(r.status == CaseStatus.OK for r in results)
    assert len({r.case_id for r in results}) == n_cases
    # One turn per case run: a case redone after a failed commit would have left a second one.
    assert sum(len(store.turns(run_id, r.case_id)) for r in results) == n_cases


def test_a_restart_under_a_running_worker_ends_completed_without_a_resume(
        own_postgres: PostgresCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    n_cases = 300
    # Leases of 3 s: the outage outlasts them, so they must be renewed when the database is back.
    store, run_id, worker = run_under_way(own_postgres, monkeypatch, n_cases, max(60, OUTAGE_S + 30),
                                          "--lease-seconds", "3")
    assert store.result_counts(run_id).get("ok", 0) < n_cases
    store.engine.dispose()
    own_postgres.stop()
    time.sleep(OUTAGE_S)
    own_postgres.start()
    assert worker.poll() is None  # it waited for the database
    _, err = worker.communicate(timeout=180)
    assert worker.returncode == 0, err
    assert "Traceback" not in err and PASSWORD not in err
    assert service.run_overview(store, run_id).state == "completed"
    each_case_once(store, run_id, n_cases)
    store.engine.dispose()


def test_an_outage_past_the_limit_stops_with_one_line_and_the_run_resumes(
        own_postgres: PostgresCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    n_cases = 150
    store, run_id, worker = run_under_way(own_postgres, monkeypatch, n_cases, 3)
    store.engine.dispose()
    own_postgres.stop()
    stopped = time.monotonic()
    _, err = worker.communicate(timeout=120)
    gave_up_after = time.monotonic() - stopped
    assert worker.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: The database postgresql+psycopg://medeval:***@127.0.0.1:")
    assert f":{own_postgres.port}/postgres was unreachable" in lines[0] and PASSWORD not in err
    assert 3 <= gave_up_after < 30
    own_postgres.start()
    done_before = store.result_counts(run_id).get("ok", 0)
    assert 20 <= done_before < n_cases
    assert service.run_overview(store, run_id).state == "interrupted"
    resumed = start_worker(store.url, run_id, 60)
    _, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err
    assert service.run_overview(store, run_id).state == "completed"
    each_case_once(store, run_id, n_cases)
    store.engine.dispose()
