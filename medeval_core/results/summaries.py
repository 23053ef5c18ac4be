"""What the results page and the HTML report show, as typed records read from the store: the list of runs with
their headline metric, one run's per-case table, one case's drill-down, past interactive sessions, and the
per-case differences of two runs on their shared cases.

Everything here is read-only and generic over benchmarks: a run's summary is its stored ``RunSummary``, a case's
record is what the runner stored with it (turns, judge attempts, model calls).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from medeval_core import registry
from medeval_core.benchmark import Metric, RunSummary
from medeval_core.context import current_settings
from medeval_core.records import CaseResult, CaseStatus, Judgement, ModelCall, RunConfig, RunKind
from medeval_core.registry import PageInfo
from medeval_core.results.compare import per_case_means_of_rows
from medeval_core.runs import service
from medeval_core.store import RunRow, Store, open_store
from medeval_core.transcript import TranscriptEntry, transcript


class RunListing(BaseModel):
    """One row of the runs table."""

    id: str
    label: str
    benchmark: str
    kind: str
    status: str
    agent: str
    judge: str
    headline: str
    """The summary's first headline metric with its interval (``GTPA@1 97.10 (95.2 - 98.3), n=40``)."""
    expected_cases: int | None
    created_at: datetime
    source_run_id: str | None

    @property
    def display_name(self) -> str:
        return self.label or self.id


def run_label(row: RunRow) -> str:
    """What plots and tables call a run: its label, else its id."""
    return row.label or row.id


def headline_text(metric: Metric | None) -> str:
    if metric is None or metric.value is None:
        return ""
    interval = f" ({metric.formatted_interval()})" if metric.interval else ""
    return f"{metric.name} {metric.format(metric.value)}{interval}, n={metric.n}"


def headline_metric(summary: RunSummary | None) -> Metric | None:
    """The metric a run is listed by: its accuracy (``Metric.role``) where it has one, else its first."""
    if summary is None or not summary.headline:
        return None
    return summary.with_role("accuracy") or summary.headline[0]


def run_listings(rows: Sequence[RunRow], states: Mapping[str, str]) -> list[RunListing]:
    """``rows`` (runs, newest first) with the status people should see (``states``: the workers' liveness, a run
    whose workers died is *interrupted*; the stored status for a run missing from it), from the rows alone."""
    listings = []
    for row in rows:
        summary = service.parsed_summary(row.summary)
        listings.append(RunListing(
            id=row.id, label=row.label, benchmark=row.benchmark, kind=row.kind, status=states.get(row.id, row.status),
            agent=summary.agent if summary else "", judge=summary.judge if summary else "",
            headline=headline_text(headline_metric(summary)),
            expected_cases=row.expected_cases, created_at=row.created_at, source_run_id=row.source_run_id,
        ))
    return listings


# Per-case table -----------------------------------------------------------------------------------------------------

def _case_row(case_id: str, repetition: int, status: str, error: str | None,
              metrics: dict[str, Any]) -> dict[str, Any]:
    scalars = {name: value for name, value in metrics.items()
               if isinstance(value, bool | int | float | str) or value is None}
    return {"case": case_id, "repetition": repetition, "status": status, "error": error or "", **scalars}


def case_rows(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """One row per case result: case, repetition, status, error, then every scalar metric."""
    return [_case_row(r.case_id, r.repetition, r.status.value, r.error, r.metrics) for r in results]


class CasePage(BaseModel):
    """One page of a run's per-case table and how many results match its filter."""

    rows: list[dict[str, Any]]
    total: int
    offset: int


def case_page(store: Store, run_id: str, status: str | None = None, search: str = "", page: int = 0,
              page_size: int = 50) -> CasePage:
    """``page`` (from 0) of the run's per-case rows of ``status`` (``ok``/``failed``; None for all) whose case id
    or error contains ``search``, read through the store a page at a time (``Store.case_page``)."""
    offset = max(page, 0) * page_size
    found, total = store.case_page(run_id, CaseStatus(status) if status else None, search, offset, page_size)
    return CasePage(rows=[_case_row(case_id, repetition, state, error, metrics)
                          for case_id, repetition, state, error, metrics in found], total=total, offset=offset)


# Drill-down ---------------------------------------------------------------------------------------------------------

class CaseDetail(BaseModel):
    run_id: str
    case_id: str
    repetition: int
    result: CaseResult
    image_path: str | None
    """The case's image file, when the benchmark's case has one on disk."""
    turns: list[TranscriptEntry]
    judgements: list[Judgement]
    model_calls: list[ModelCall]
    total_cost: float


def _image_path(store: Store, run_id: str, case_id: str) -> str | None:
    """The image of a case whose benchmark names one (``image_path``), read from the benchmark's own cases."""
    config = RunConfig.model_validate(store.get_run(run_id).config)
    if config.kind == RunKind.SESSION:
        return None
    if config.kind == RunKind.SCORE and config.source_run_id:
        config = RunConfig.model_validate(store.get_run(config.source_run_id).config)
    try:
        benchmark = registry.benchmark(config.benchmark)
        cases = benchmark.cases(benchmark.parse_params(config.params), current_settings())
    except Exception:  # noqa: BLE001 - inputs gone or the benchmark retired: the drill-down shows no image
        return None
    case = next((c for c in cases if c.case_id == case_id), None)
    path = getattr(case, "image_path", None)
    return str(path) if path and Path(path).is_file() else None


def case_detail(store: Store, run_id: str, case_id: str, repetition: int = 0,
                with_image: bool = True) -> CaseDetail | None:
    result = store.result(run_id, case_id, repetition)
    if result is None:
        return None
    turns = transcript(store.turns(run_id, case_id, repetition))
    judgements = [j for j in store.judgements(run_id=run_id, case_id=case_id) if j.repetition == repetition]
    calls = [c for c in store.model_calls(run_id, case_id) if c.repetition == repetition]
    return CaseDetail(run_id=run_id, case_id=case_id, repetition=repetition, result=result,
                      image_path=_image_path(store, run_id, case_id) if with_image else None, turns=turns,
                      judgements=judgements, model_calls=calls, total_cost=sum(t.cost for t in turns))


# Past interactive sessions ------------------------------------------------------------------------------------------

class SessionListing(BaseModel):
    """A past walkthrough or lesion evaluation, to reopen."""

    run_id: str
    benchmark: str
    created_at: datetime
    status: str
    image: str
    response: str
    verdict: str
    reopen_page: str | None = None
    """The page that continues this session (``PageInfo.path``) and the query parameter it reads the run id from."""
    reopen_query: str | None = None


def _verdict_text(result: CaseResult) -> str:
    verdict = result.output.get("verdict")
    if isinstance(verdict, dict) and "correct" in verdict:
        return "correct" if verdict["correct"] else "incorrect"
    for name in ("correct", "GTPA@1"):
        if name in result.metrics:
            return f"{name}: {result.metrics[name]}"
    return ""


def _reopening_page(benchmark: str) -> PageInfo | None:
    spec = registry.specs().get(benchmark)
    return next((page for page in spec.pages if page.reopen_query), None) if spec else None


def session_listings(store: Store) -> list[SessionListing]:
    """Past sessions with their own state (open, finished, abandoned, closed, failed; never *running*)."""
    listings = []
    rows = [row for row in store.list_runs() if row.kind == RunKind.SESSION]
    steps = store.last_turn_times([row.id for row in rows])
    for row in rows:
        results = store.results(row.id)
        result = results[0] if results else None
        output = result.output if result else {}
        image = output.get("image") if isinstance(output.get("image"), dict) else {}
        response = output.get("response") or output.get("final_diagnosis") or ""
        page = _reopening_page(row.benchmark)
        listings.append(SessionListing(
            run_id=row.id, benchmark=row.benchmark, created_at=row.created_at,
            status=service.session_state(row.status, steps.get(row.id) or row.started_at or row.created_at),
            reopen_page=page.path if page else None, reopen_query=page.reopen_query if page else None,
            image=str(image.get("name", "")) if image else "", response=str(response)[:200],
            verdict=_verdict_text(result) if result else "",
        ))
    return listings


# Paired differences -------------------------------------------------------------------------------------------------

class PairedDifferences(BaseModel):
    metric: str
    cases: list[str]
    differences: list[float]
    """Per shared case: run A's value minus run B's (each the mean over that case's repetitions)."""


def paired_differences(store: Store, run_a: str, run_b: str, metric: str) -> PairedDifferences:
    """The per-case differences behind a comparison's test (the same shared cases ``compare`` pairs), cached per
    both runs' result stamps."""
    return _paired_differences(store.url, run_a, store.results_stamp(run_a), run_b, store.results_stamp(run_b),
                               metric)


@lru_cache(maxsize=16)
def _paired_differences(url: str, run_a: str, stamp_a: tuple[int, int | None], run_b: str,
                        stamp_b: tuple[int, int | None], metric: str) -> PairedDifferences:
    store = open_store(url)
    means_a = per_case_means_of_rows((c, m) for c, _r, m in store.metric_rows(run_a)).get(metric)
    means_b = per_case_means_of_rows((c, m) for c, _r, m in store.metric_rows(run_b)).get(metric)
    if means_a is None or means_b is None:
        return PairedDifferences(metric=metric, cases=[], differences=[])
    shared, in_a, in_b = np.intersect1d(means_a.cases, means_b.cases, assume_unique=True, return_indices=True)
    return PairedDifferences(metric=metric, cases=[str(c) for c in shared],
                             differences=[float(v) for v in means_a.means[in_a] - means_b.means[in_b]])


def stored_summaries(store: Store, run_ids: Sequence[str]) -> dict[str, RunSummary]:
    """Run label -> stored summary, for the runs that have one (plots across runs)."""
    summaries = {}
    for run_id in run_ids:
        row = store.get_run(run_id)
        summary = service.parsed_summary(row.summary)
        if summary is not None:
            summaries[run_label(row)] = summary
    return summaries
