"""Runs outside the page: create a run, start a detached worker process for it, and tell whether it is alive.

A page (or any caller) stores a run with ``create_run`` and starts ``python -m medeval_core worker RUN_ID`` with
``start_worker``: the worker is its own session and process group, so it survives page reloads, other users'
sessions and a restart of the Streamlit server. Workers hold case leases in the store (``medeval_core.runs.runner``),
so several of them, on one host or on many pointed at one database, share one run; a run whose workers stopped
heart-beating shows as *interrupted* (``run_liveness``) and can be resumed by starting a worker again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy.engine import make_url

from medeval_core.records import RunKind
from medeval_core.redaction import redact
from medeval_core.runs import service
from medeval_core.settings import DEFAULT_VAR_DIR, PROJECT_ROOT, Settings
from medeval_core.store import RunRow, Store, open_store

RunLiveness = service.RunLiveness


def create_run(settings: Settings, benchmark: str, params: Mapping[str, Any] | BaseModel, *,
               label: str | None = None, run_id: str | None = None) -> str:
    """Validate ``params`` with the benchmark's ``Params`` (``BenchmarkError``, one clear sentence, on bad
    input), hash the input files, load the cases and store the run as *pending*; no case runs. Returns the run
    id. An existing ``run_id`` with other parameters is refused (``service.create_run``)."""
    return service.create_run(benchmark, params, settings, open_store(settings.db_url), run_id=run_id,
                              label=label or "")


def worker_log_path(settings: Settings, run_id: str) -> Path:
    """Where a worker started by ``start_worker`` writes its output: beside a SQLite store, else under var/."""
    url = make_url(settings.db_url)
    folder = (Path(url.database).resolve().parent if url.get_backend_name() == "sqlite" and url.database
              and url.database != ":memory:" else DEFAULT_VAR_DIR)
    return folder / "workers" / f"{run_id}.log"


def worker_log_tail(settings: Settings, run_id: str, max_lines: int = 40, max_bytes: int = 64_000) -> str | None:
    """The end of the run's worker log (where a worker's traceback lands), or None when no worker of this host
    wrote one. Only the last ``max_bytes`` are read: a long run's log can be large."""
    path = worker_log_path(settings, run_id)
    try:
        with path.open("rb") as log:
            log.seek(max(path.stat().st_size - max_bytes, 0))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = redact(text).replace("\r", "\n").splitlines()
    return "\n".join(lines[-max_lines:]) or None


def worker_command(run_id: str, concurrency: int | None = None) -> list[str]:
    command = [sys.executable, "-m", "medeval_core", "worker", run_id]
    return [*command, "--concurrency", str(concurrency)] if concurrency else command


def start_worker(settings: Settings, run_id: str, concurrency: int | None = None) -> int:
    """Start ``python -m medeval_core worker RUN_ID`` detached (its own session and process group, output
    appended to ``worker_log_path``) and return its pid. The worker reads the same store, data and configuration
    folders as ``settings`` (passed through the environment; API keys stay in the environment it inherits)."""
    service.startable(open_store(settings.db_url), run_id)
    log_path = worker_log_path(settings, run_id)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "MEDEVAL_DB_URL": settings.db_url, "MEDEVAL_DATA_DIR": str(settings.data_dir),
                   "MEDEVAL_CONFIG_DIR": str(settings.config_dir)}
    with open(log_path, "ab") as log:
        process = subprocess.Popen(worker_command(run_id, concurrency), cwd=PROJECT_ROOT, env=environment,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    # Reap it when it ends, so a long-lived server collects no zombies; the thread does not keep this process up.
    threading.Thread(target=process.wait, name=f"reap-worker-{process.pid}", daemon=True).start()
    return process.pid


def run_liveness(store: Store, run_id: str) -> RunLiveness:
    """The run's status as people should see it: *interrupted* when it is stored as running or cancelling but no
    worker is alive (no heartbeat within its lease), *running* when a worker works on a pending run, else the
    stored status. Two small queries; ``run_states`` does a whole run list in two."""
    row = store.get_run(run_id)
    return service.liveness(row.status, len(store.live_workers(run_id)), row.kind, service.last_activity(store, row))


def run_states(store: Store, rows: Iterable[RunRow]) -> dict[str, RunLiveness]:
    """``run_liveness`` of every listed run (rows from ``Store.list_runs``), with one query for all workers."""
    rows = list(rows)
    live = store.live_worker_counts()
    steps = store.last_turn_times([row.id for row in rows if row.kind == RunKind.SESSION])
    return {row.id: service.liveness(row.status, live.get(row.id, 0), row.kind,
                                     steps.get(row.id) or row.started_at or row.created_at) for row in rows}
