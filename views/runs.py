"""Batch runs: watch progress, resume or cancel, read summaries with intervals, export, compare two runs."""

import pandas as pd
import streamlit as st

from medeval_core import service
from medeval_core.benchmark import BenchmarkError, RunSummary
from medeval_core.compare import run_comparison, run_summaries
from medeval_core.context import current_settings, current_store
from medeval_core.errors import StoreError
from medeval_core.plots import metric_intervals
from medeval_core.records import CaseStatus


def show_summary(summary: RunSummary) -> None:
    """Any benchmark's RunSummary, one code path: counts, headline metrics, groups, reference rows, notes."""
    counts = summary.counts
    st.caption(f"{summary.title or summary.benchmark}: expected {counts.expected}, done {counts.done}, "
               f"failed {counts.failed}, pending {counts.pending}")
    if summary.headline:
        st.table(pd.DataFrame([
            {"metric": m.name, "value": m.format(m.value), "95% interval": m.formatted_interval(),
             "n": m.n, "denominator": m.denominator}
            for m in summary.headline
        ]).set_index("metric"))
    if summary.groups:
        with st.expander(f"By subgroup ({len(summary.groups)})"):
            st.dataframe(pd.DataFrame([
                {"dimension": g.dimension, "group": g.label, "metric": m.name, "value": m.value, "n": m.n,
                 "interval": f"{m.interval[0]:.4f} - {m.interval[1]:.4f}" if m.interval else ""}
                for g in summary.groups for m in g.metrics
            ]), hide_index=True, width="stretch")
    if summary.reference:
        st.markdown("**Published reference rows**")
        st.dataframe(pd.DataFrame([{"row": r.label, **r.values, "source": r.source} for r in summary.reference]),
                     hide_index=True, width="stretch")
    for note in summary.notes:
        st.info(note)


st.title("Batch runs")
st.caption("Runs started here or with `python -m medeval_core run ...` appear below. Finished cases are saved as "
           "they finish, so a run stopped for any reason can be resumed.")

store = current_store()
runs = store.list_runs()
if not runs:
    st.info("No runs yet. Start one from a benchmark page or the command line, e.g. "
            "`python -m medeval_core run ddxplus --patients PATIENTS.csv --agent kb-bayes`.")
    st.stop()

st.dataframe(
    pd.DataFrame([{"run": r.id, "benchmark": r.benchmark, "kind": r.kind, "label": r.label, "status": r.status,
                   "cases": r.expected_cases, "scores run": r.source_run_id or "", "created": r.created_at}
                  for r in runs]),
    hide_index=True, width="stretch",
)

run_ids = [r.id for r in runs]
selected = st.selectbox("Run", run_ids, key="run_selected")


@st.fragment(run_every="2s")
def run_panel(run_id: str) -> None:
    overview = service.run_overview(store, run_id)
    finished = overview.done + overview.failed
    if overview.expected_cases:
        st.progress(min(finished / overview.expected_cases, 1.0),
                    text=f"{overview.status}: {overview.done} done, {overview.failed} failed, "
                         f"{overview.pending} pending of {overview.expected_cases}")
    else:
        st.write(f"{overview.status}: {overview.done} done, {overview.failed} failed")
    if overview.kind == "session":
        st.caption("An interactive session from a benchmark page: continue it there.")
    if overview.source_run_id:
        st.caption(f"Scores the outputs of run `{overview.source_run_id}`.")
    if overview.error:
        st.error(f"The run stopped with an error: {overview.error}. Fix the cause, then resume it.")
    left, right = st.columns(2)
    if overview.resumable and left.button("Resume", key=f"resume-{run_id}",
                                          help="Finished cases are kept; failed and pending ones run again."):
        try:
            service.resume_in_background(run_id, current_settings(), store)
            st.toast(f"Resuming {run_id}.")
        except (StoreError, BenchmarkError) as exc:
            st.error(f"This run cannot be resumed here: {exc}")
    if overview.cancellable and right.button("Cancel", key=f"cancel-{run_id}",
                                             help="Stops after the cases in flight; they are saved."):
        try:
            store.request_cancel(run_id)
        except StoreError as exc:
            st.error(str(exc))


run_panel(selected)

overview = service.run_overview(store, selected)
summary = service.stored_summary(store, selected)
if summary is not None:
    st.subheader("Summary")
    show_summary(summary)
elif overview.summary:
    with st.expander("Summary (stored by an earlier version)"):
        st.json(overview.summary)

# A rerun reads no full results: the summaries come from the metrics alone, cached per result stamp (one COUNT
# query when nothing changed), the failed cases are queried by status, the downloads are built on click.
summaries = run_summaries(store, selected)
if summaries:
    st.subheader("Per-case metrics (95% intervals)")
    st.table(pd.DataFrame([s.model_dump() for s in summaries]).set_index("metric"))
    st.plotly_chart(metric_intervals({selected: summaries}), width="stretch")
failed = store.results(selected, status=CaseStatus.FAILED) if overview.failed else []
if failed:
    st.subheader(f"Failed cases ({len(failed)})")
    st.dataframe(pd.DataFrame([{"case": r.case_id, "repetition": r.repetition, "error": r.error} for r in failed]),
                 hide_index=True, width="stretch")
with st.expander("Configuration and provenance"):
    st.write(f"Settings hash `{overview.settings_hash}`")
    st.json({"params": overview.params, "inputs": overview.inputs, "versions": overview.versions})


def results_csv() -> str:
    return service.results_frame(store.results(selected)).to_csv(index=False)


def results_jsonl() -> str:
    return service.results_frame(store.results(selected)).to_json(orient="records", lines=True, date_format="iso")


# The files are built only when a button is clicked: rebuilding both on every rerun cost seconds per 10k results.
has_results = bool(overview.done or overview.failed)
left, right = st.columns(2)
left.download_button("Download results (CSV)", results_csv, file_name=f"{selected}.csv", mime="text/csv",
                     disabled=not has_results, on_click="ignore")
right.download_button("Download results (JSON Lines)", results_jsonl, file_name=f"{selected}.jsonl",
                      mime="application/jsonl", disabled=not has_results, on_click="ignore")

st.header("Compare two runs")
if len(run_ids) < 2:
    st.info("Comparing needs two runs.")
else:
    col_a, col_b = st.columns(2)
    run_a = col_a.selectbox("Run A", run_ids, index=0, key="compare_a")
    run_b = col_b.selectbox("Run B", run_ids, index=1, key="compare_b")
    if run_a == run_b:
        st.warning("Choose two different runs.")
    else:
        comparison = run_comparison(store, run_a, run_b)  # cached per result stamp of both runs
        if comparison.paired:
            st.table(pd.DataFrame([p.model_dump() for p in comparison.paired]).set_index("metric"))
        else:
            st.info("These runs share no scored cases with the same metrics; they cannot be compared pairwise.")
        st.plotly_chart(metric_intervals({run_a: comparison.summaries_a, run_b: comparison.summaries_b}),
                        width="stretch")
