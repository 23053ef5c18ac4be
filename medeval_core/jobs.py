"""Launch, resume, summarise and export runs by benchmark name: the one entry point for the CLI and the pages."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from medeval_core.benchmarks import BenchmarkPlan, plan_for
from medeval_core.records import CaseResult, CaseStatus, RunConfig, RunStatus
from medeval_core.runs import BatchRunner, ProgressCallback, RunReport
from medeval_core.settings import Settings, runtime_versions
from medeval_core.store import Store, StoreError


def new_run_config(benchmark: str, settings: Settings, params: dict, label: str = "", repetitions: int = 1) -> RunConfig:
    """A run config that records the effective settings, their hash and the library versions."""
    return RunConfig(
        benchmark=benchmark,
        label=label,
        params=params,
        settings=settings.effective(),
        settings_hash=settings.settings_hash(),
        versions=runtime_versions(),
        repetitions=repetitions,
    )


def launch(
    config: RunConfig,
    settings: Settings,
    store: Store,
    workers: int | None = None,
    run_id: str | None = None,
    on_progress: ProgressCallback | None = None,
) -> RunReport:
    """Start a run, or continue it when ``run_id`` names an existing run of the same benchmark.

    ``workers`` defaults to the plan's own concurrency.
    """
    return _run_plan(config, plan_for(config, settings), store, workers, run_id, on_progress)


def _run_plan(
    config: RunConfig,
    plan: BenchmarkPlan,
    store: Store,
    workers: int | None,
    run_id: str | None,
    on_progress: ProgressCallback | None,
) -> RunReport:
    runner = BatchRunner(store, workers=workers or plan.workers, on_progress=on_progress)
    existing = store.find_run(run_id) if run_id else None
    if existing is not None:
        if existing.benchmark != config.benchmark:
            raise StoreError(f"Run {run_id!r} is a {existing.benchmark} run; choose another id for {config.benchmark}.")
        report = runner.resume(existing.id, plan.cases, plan.run_case)
    else:
        report = runner.start(config, plan.cases, plan.run_case, run_id=run_id)
    store.update_run(report.run_id, summary=plan.summarize(store.results(report.run_id)))
    return report


def resume(
    run_id: str,
    settings: Settings,
    store: Store,
    workers: int | None = None,
    on_progress: ProgressCallback | None = None,
) -> RunReport:
    """Continue a stored run with the configuration it was started with."""
    config = RunConfig.model_validate(store.get_run(run_id).config)
    return launch(config, settings, store, workers=workers, run_id=run_id, on_progress=on_progress)


def results_frame(results: list[CaseResult]) -> pd.DataFrame:
    """One row per case result, outputs and metrics flattened into columns."""
    rows = [
        {
            "run_id": r.run_id, "case_id": r.case_id, "repetition": r.repetition, "status": r.status.value,
            "error": r.error, "started_at": r.started_at, "finished_at": r.finished_at,
            **{f"metric.{k}": v for k, v in r.metrics.items()},
            **{f"output.{k}": v for k, v in r.output.items()},
        }
        for r in results
    ]
    return pd.DataFrame(rows)


def export_results(store: Store, run_id: str, path: Path) -> Path:
    """Write a run's case results as CSV or JSON Lines, chosen by the file's suffix."""
    frame = results_frame(store.results(run_id))
    writers = {".csv": lambda: frame.to_csv(path, index=False),
               ".jsonl": lambda: frame.to_json(path, orient="records", lines=True, date_format="iso")}
    try:
        writer = writers[path.suffix.lower()]
    except KeyError:
        raise StoreError(f"Cannot export to {path.name}: use a .csv or .jsonl file name.") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    writer()
    return path


class RunOverview(BaseModel):
    """One run as the runs page and ``runs show`` present it."""

    id: str
    benchmark: str
    label: str
    status: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expected_cases: int | None
    done: int
    failed: int
    pending: int | None
    settings_hash: str
    versions: dict[str, Any]
    params: dict[str, Any]
    summary: dict[str, Any]
    error: str | None

    @property
    def active(self) -> bool:
        return self.status in (RunStatus.RUNNING, RunStatus.CANCELLING)

    @property
    def resumable(self) -> bool:
        return not self.active and (self.status != RunStatus.COMPLETED or self.failed > 0)


def run_overview(store: Store, run_id: str) -> RunOverview:
    row = store.get_run(run_id)
    counts = store.result_counts(run_id)
    done, failed = counts.get(CaseStatus.OK, 0), counts.get(CaseStatus.FAILED, 0)
    return RunOverview(
        id=row.id, benchmark=row.benchmark, label=row.label, status=row.status, created_at=row.created_at,
        started_at=row.started_at, finished_at=row.finished_at, expected_cases=row.expected_cases, done=done,
        failed=failed, pending=None if row.expected_cases is None else row.expected_cases - done - failed,
        settings_hash=row.settings_hash, versions=row.versions, params=row.config.get("params", {}),
        summary=row.summary, error=row.error,
    )


def resume_in_background(
    run_id: str, settings: Settings, store: Store, workers: int | None = None
) -> threading.Thread:
    """Resume a run on a daemon thread (the app keeps serving); progress is read back from the store."""
    config = RunConfig.model_validate(store.get_run(run_id).config)
    # Built here so that a run that cannot be resumed fails in the caller, with a readable message; the thread
    # reuses it (building a plan can mean loading data and training an agent).
    plan = plan_for(config, settings)
    thread = threading.Thread(
        target=_run_plan, args=(config, plan, store, workers, run_id, None), name=f"resume-{run_id}", daemon=True,
    )
    thread.start()
    return thread
