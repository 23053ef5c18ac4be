"""The Batch runs page's controller: the stored runs and their states, one run's snapshot, resume and cancel, the
per-case table and one case's detail, exports, metrics across runs, comparisons and past sessions. It reads the
store exactly as the page did (one list of runs and one worker-state query per part; bench/runs_page_bench.py).
The figures and text helpers the page draws with are named here too, so the page has one module to call."""

from __future__ import annotations

from collections.abc import Sequence

from medeval_core.benchmark import BenchmarkError, RunSummary
from medeval_core.catalog import NEW_RUN
from medeval_core.context import current_settings
from medeval_core.controllers import Outcome
from medeval_core.errors import StoreError
from medeval_core.records import MetricSummary, RunKind
from medeval_core.results import exports
from medeval_core.results import summaries as results
from medeval_core.results.compare import RunComparison, run_comparison
from medeval_core.results.plots import (
    CostPoint,
    accuracy_vs_cost,
    cost_points,
    group_breakdown,
    group_dimensions,
    metric_intervals,
    paired_differences_plot,
)
from medeval_core.results.reports import run_report_html
from medeval_core.results.summaries import (
    CaseDetail,
    CasePage,
    PairedDifferences,
    RunListing,
    SessionListing,
    run_label,
)
from medeval_core.runs import service, workers
from medeval_core.runs.service import RunSnapshot
from medeval_core.store import RunRow, open_store
from medeval_core.transcript import DIFFERENTIAL_FLOOR, differential_rows, reasoned

__all__ = ["DIFFERENTIAL_FLOOR", "NEW_RUN_PAGE", "BenchmarkError", "MetricSummary", "RunComparison", "RunKind",
           "RunSummary", "Runs", "accuracy_vs_cost", "differential_rows", "group_breakdown", "group_dimensions",
           "metric_intervals", "paired_differences_plot", "reasoned", "run_label"]

NEW_RUN_PAGE = NEW_RUN.path


class Runs:
    """The page's view of the store, opened once per script run."""

    def __init__(self) -> None:
        self.settings = current_settings()
        self.store = open_store(self.settings.db_url)

    def runs(self) -> list[RunRow]:
        return self.store.list_runs()

    def any_active(self, rows: Sequence[RunRow]) -> bool:
        """Whether a batch run among ``rows`` is running, cancelling or waiting for its worker."""
        batch = [row for row in rows if row.kind == RunKind.BATCH]
        return any(state in ("running", "cancelling", "pending")
                   for state in workers.run_states(self.store, batch).values())

    def batch_listings(self) -> list[RunListing]:
        """Every run but the interactive sessions, newest first, with its live state (one query for all)."""
        rows = self.store.list_runs()
        states = workers.run_states(self.store, rows)
        return [r for r in results.run_listings(rows, states) if r.kind != RunKind.SESSION]

    def snapshot(self, run_id: str) -> RunSnapshot:
        """The run's overview, summary and metrics read at one moment."""
        return service.run_snapshot(self.store, run_id)

    def worker_log(self, run_id: str) -> str | None:
        return workers.worker_log_tail(self.settings, run_id)

    def resume(self, run_id: str) -> Outcome:
        """Start a worker on the run: finished cases are kept; failed and pending ones run again."""
        try:
            pid = workers.start_worker(self.settings, run_id)
        except (StoreError, BenchmarkError) as exc:
            return Outcome(error=f"This run cannot be resumed here: {exc}")
        return Outcome(notice=f"Resuming {run_id} (worker pid {pid}).")

    def cancel(self, run_id: str) -> Outcome:
        try:
            self.store.request_cancel(run_id)
        except StoreError as exc:
            return Outcome(error=str(exc))
        return Outcome()

    def case_page(self, run_id: str, status: str | None, search: str, page: int, per_page: int) -> CasePage:
        return results.case_page(self.store, run_id, status, search, page, per_page)

    def case_detail(self, run_id: str, case_id: str, repetition: int) -> CaseDetail | None:
        return results.case_detail(self.store, run_id, case_id, repetition)

    def results_csv(self, run_id: str) -> str:
        return exports.results_csv(self.store.results(run_id))

    def results_jsonl(self, run_id: str) -> str:
        return exports.results_jsonl(self.store.results(run_id))

    def report_html(self, run_id: str) -> str:
        return run_report_html(self.store, run_id)

    def metric_summaries(self, run_id: str) -> list[MetricSummary]:
        """Stored with a finished run's summary; computed (cached per result stamp) for a live one."""
        return service.metric_summaries(self.store, run_id)

    def cost_points(self, run_ids: Sequence[str]) -> list[CostPoint]:
        """Accuracy against mean cost of the runs whose metrics declare those roles."""
        return cost_points(results.stored_summaries(self.store, run_ids))

    def comparable(self, run_a: str, batch_runs: Sequence[RunRow]) -> list[str]:
        """The other runs of ``batch_runs`` of run A's benchmark."""
        benchmark = self.store.get_run(run_a).benchmark
        return [r.id for r in batch_runs if r.benchmark == benchmark and r.id != run_a]

    def comparison(self, run_a: str, run_b: str) -> RunComparison:
        """Paired tests on the cases both runs finished (cached per result stamp of both runs)."""
        return run_comparison(self.store, run_a, run_b)

    def paired_differences(self, run_a: str, run_b: str, metric: str) -> PairedDifferences:
        return results.paired_differences(self.store, run_a, run_b, metric)

    def sessions(self) -> list[SessionListing]:
        return results.session_listings(self.store)

    def first_step(self, run_id: str) -> tuple[str, int] | None:
        """A session's case id and repetition, once it recorded a step."""
        stored = self.store.results(run_id)
        return (stored[0].case_id, stored[0].repetition) if stored else None
