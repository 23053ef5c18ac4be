"""Batch runs: watch progress, resume or cancel, read summaries with intervals, export, compare two runs."""

import pandas as pd
import streamlit as st

from medeval_core import jobs
from medeval_core.compare import compare_runs, summarize_metrics
from medeval_core.context import current_settings, current_store
from medeval_core.plots import metric_intervals
from medeval_core.benchmarks import PlanError, UnknownBenchmarkError
from medeval_core.store import StoreError

st.title("Batch runs")
st.caption("Runs started here or with `python -m medeval_core run ...` appear below. Every finished case is saved "
           "at once, so a run stopped for any reason can be resumed.")

store = current_store()
runs = store.list_runs()
if not runs:
    st.info("No runs yet. Start one from a benchmark page or the command line, e.g. "
            "`python -m medeval_core run ddxplus --patients PATIENTS.csv --agent kb-bayes`.")
    st.stop()

st.dataframe(
    pd.DataFrame([{"run": r.id, "benchmark": r.benchmark, "label": r.label, "status": r.status,
                   "cases": r.expected_cases, "created": r.created_at} for r in runs]),
    hide_index=True, width="stretch",
)

run_ids = [r.id for r in runs]
selected = st.selectbox("Run", run_ids, key="run_selected")


@st.fragment(run_every="2s")
def run_panel(run_id: str) -> None:
    overview = jobs.run_overview(store, run_id)
    finished = overview.done + overview.failed
    if overview.expected_cases:
        st.progress(min(finished / overview.expected_cases, 1.0),
                    text=f"{overview.status}: {overview.done} done, {overview.failed} failed, "
                         f"{overview.pending} pending of {overview.expected_cases}")
    else:
        st.write(f"{overview.status}: {overview.done} done, {overview.failed} failed")
    if overview.error:
        st.error(f"The run stopped with an error: {overview.error}. Fix the cause, then resume it.")
    left, right = st.columns(2)
    if overview.resumable and left.button("Resume", key=f"resume-{run_id}",
                                          help="Finished cases are kept; failed and pending ones run again."):
        try:
            jobs.resume_in_background(run_id, current_settings(), store)
            st.toast(f"Resuming {run_id}.")
        except (StoreError, UnknownBenchmarkError, PlanError) as exc:
            st.error(f"This run cannot be resumed here: {exc}")
    if overview.active and right.button("Cancel", key=f"cancel-{run_id}",
                                        help="Stops after the cases in flight; they are saved."):
        try:
            store.request_cancel(run_id)
        except StoreError as exc:
            st.error(str(exc))


run_panel(selected)

overview = jobs.run_overview(store, selected)
results = store.results(selected)
summaries = summarize_metrics(results)
if summaries:
    st.subheader("Per-case metrics (95% intervals)")
    st.table(pd.DataFrame([s.model_dump() for s in summaries]).set_index("metric"))
    st.plotly_chart(metric_intervals({selected: summaries}), width="stretch")
if overview.summary:
    with st.expander("Benchmark summary", expanded=not summaries):
        st.json(overview.summary)
failed = [r for r in results if r.status == "failed"]
if failed:
    st.subheader(f"Failed cases ({len(failed)})")
    st.dataframe(pd.DataFrame([{"case": r.case_id, "repetition": r.repetition, "error": r.error} for r in failed]),
                 hide_index=True, width="stretch")
with st.expander("Configuration and provenance"):
    st.write(f"Settings hash `{overview.settings_hash}`")
    st.json({"params": overview.params, "versions": overview.versions})

frame = jobs.results_frame(results)
left, right = st.columns(2)
left.download_button("Download results (CSV)", frame.to_csv(index=False), file_name=f"{selected}.csv",
                     mime="text/csv", disabled=frame.empty)
right.download_button("Download results (JSON Lines)",
                      frame.to_json(orient="records", lines=True, date_format="iso") if not frame.empty else "",
                      file_name=f"{selected}.jsonl", mime="application/jsonl", disabled=frame.empty)

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
        comparison = compare_runs(run_a, store.results(run_a), run_b, store.results(run_b))
        if comparison.paired:
            st.table(pd.DataFrame([p.model_dump() for p in comparison.paired]).set_index("metric"))
        else:
            st.info("These runs share no scored cases with the same metrics; they cannot be compared pairwise.")
        st.plotly_chart(metric_intervals({run_a: comparison.summaries_a, run_b: comparison.summaries_b}),
                        width="stretch")
