"""Batch runs and their results: every run with its status and headline metric; one run's progress, summary,
per-case table and drill-down into one case; plots across runs; comparison of two runs; past interactive
sessions; HTML report and exports. Everything that depends on the selected run is drawn by one fragment, so it
refreshes together while the run is live and switching runs redraws only it. The page opens on stored rows: a
finished run's summary and metric intervals are read from its stored summary, the per-case table a page at a time
from the store, and the plots across runs and the comparison (which read every result of the runs they show) are
drawn on demand."""

import json

import pandas as pd
import streamlit as st

from medeval_core.controllers import runs
from medeval_core.controllers.runs import MetricSummary, RunComparison, RunKind, RunSummary
from medeval_core.plaintext import literal

STATUS_FILTERS = {"all": None, "finished": "ok", "failed": "failed"}


def show_summary(summary: RunSummary) -> None:
    """Any benchmark's RunSummary, one code path: counts, headline metrics, groups as tables, reference rows."""
    counts = summary.counts
    st.caption(literal(f"{summary.title or summary.benchmark}: expected {counts.expected}, done "
                              f"{counts.done}, failed {counts.failed}, pending {counts.pending}"))
    if not counts.done:
        st.warning("No case finished, so no metric is shown.")
    elif summary.headline:
        st.table(pd.DataFrame([
            {"metric": m.name, "value": m.format(m.value), "95% interval": m.formatted_interval(),
             "n": m.n, "denominator": m.denominator}
            for m in summary.headline
        ]).set_index("metric"))
    if summary.spread:
        st.markdown(f"**Across {len(summary.repetitions)} repetitions** (mean ± SD of the per-repetition values)")
        st.table(pd.DataFrame([{"metric": s.name, "mean ± SD (range)": s.formatted()} for s in summary.spread])
                 .set_index("metric"))
        with st.expander(f"Each repetition ({len(summary.repetitions)})"):
            st.dataframe(pd.DataFrame([{"repetition": r.repetition, "done": r.counts.done, "failed": r.counts.failed,
                                        **{m.name: m.format(m.value) for m in r.metrics}}
                                       for r in summary.repetitions]), hide_index=True, width="stretch")
    for dimension in runs.group_dimensions(summary) if counts.done else []:
        groups = [g for g in summary.groups if g.dimension == dimension]
        with st.expander(f"By {dimension} ({len(groups)} groups)"):
            st.dataframe(pd.DataFrame([{dimension: g.label, "n": g.metrics[0].n if g.metrics else 0,
                                        **{m.name: m.format(m.value) for m in g.metrics}} for g in groups]),
                         hide_index=True, width="stretch")
    if summary.reference:
        st.markdown("**Published reference rows**")
        reference = pd.DataFrame([{"row": r.label, **r.values, "source": r.source} for r in summary.reference])
        st.dataframe(reference.astype(object).where(reference.notna(), ""), hide_index=True, width="stretch")
    for note in summary.notes:
        st.info(literal(note))


def show_case(run_id: str, case_id: str, repetition: int) -> None:
    """One case: image, dialogue turn by turn, model output, judge attempts with raw replies, model calls."""
    detail = controller.case_detail(run_id, case_id, repetition)
    if detail is None:
        st.info("This case has no stored result yet.")
        return
    result = detail.result
    st.caption(literal(f"Case {case_id}, repetition {repetition}: {result.status.value}"
                              + (f"; error: {result.error}" if result.error else "")))
    if detail.image_path:
        st.image(detail.image_path, caption=literal(detail.image_path), width=320)
    if detail.turns:
        st.markdown(f"**Dialogue** ({len(detail.turns)} turns, total cost {detail.total_cost:,.2f})")
        for turn in detail.turns:
            with st.chat_message("user" if turn.speaker == "agent" else "assistant",
                                 avatar=":material/stethoscope:" if turn.speaker == "agent" else ":material/person:"):
                st.caption(literal(" · ".join([f"{turn.index}. {turn.who}", turn.action,
                                               *([f"cost {turn.cost:,.2f}"] if turn.cost else []), *turn.tags])))
                if turn.said:
                    st.text(turn.said)
                if turn.answer:
                    st.text(turn.answer)
                for line in turn.details:
                    st.text(line)
    st.markdown("**Model output**")
    differential = result.output.get("differential")
    if isinstance(differential, dict) and differential:
        rows = runs.differential_rows(differential)
        st.caption(f"Differential: {len(rows)} pathologies above {runs.DIFFERENTIAL_FLOOR}, most likely first")
        st.dataframe(pd.DataFrame([row.model_dump() for row in rows]), hide_index=True,
                     column_config={"probability": st.column_config.NumberColumn(format="%.3f")})
    text_fields = {k: v for k, v in result.output.items() if isinstance(v, str) and len(v) > 80}
    for name, text in text_fields.items():
        st.caption(literal(name))
        parts = runs.reasoned(text)
        if parts is None:
            st.text(text)
        else:
            with st.expander("Reasoning (<think>)"):
                st.text(parts.reasoning)
            st.markdown("Answer (<answer>)")
            st.text(parts.answer)
    st.json({k: v for k, v in result.output.items() if k not in text_fields and k != "differential"},
            expanded=False)
    if result.metrics:
        st.dataframe(pd.DataFrame([{"metric": k, "value": str(v)} for k, v in result.metrics.items()]),
                     hide_index=True)
    st.markdown(f"**Judge attempts** ({len(detail.judgements)})")
    if detail.judgements:
        st.dataframe(pd.DataFrame([{"attempt": j.attempt, "judge": j.judge_name, "model": j.judge_model, "ok": j.ok,
                                    "http": j.http_status, "latency s": j.latency_s, "error": j.error or "",
                                    "raw reply": json.dumps(j.verdict, ensure_ascii=False)}
                                   for j in detail.judgements]),
                     hide_index=True, width="stretch")
    st.markdown(f"**Model calls** ({len(detail.model_calls)})")
    if detail.model_calls:
        st.dataframe(pd.DataFrame([{"role": c.role, "model": c.model, "attempt": c.attempt, "ok": c.ok,
                                    "latency s": round(c.latency_s, 3), "prompt tokens": c.prompt_tokens,
                                    "completion tokens": c.completion_tokens, "error": c.error or "",
                                    "messages sha256": c.messages_sha256[:12]} for c in detail.model_calls]),
                     hide_index=True, width="stretch")


st.title("Batch runs")
st.caption("Runs launched on the New run page or with `python -m medeval_core run ...` appear below. Each runs in "
           "its own worker process and saves every case as it finishes: a run whose workers stopped shows as "
           "interrupted and can be resumed.")

controller = runs.Runs()
runs_at_open = controller.runs()  # for the parts outside the live fragment, which reads its own
if not runs_at_open:
    st.info("No runs yet. Launch one on the New run page, or from the command line, e.g. "
            "`python -m medeval_core run ddxplus --patients PATIENTS.csv --agent kb-bayes`.")
    if st.button("New run", icon=":material/play_circle:"):
        st.switch_page(runs.NEW_RUN_PAGE)
    st.stop()

any_active = controller.any_active(runs_at_open)
CASES_PER_PAGE = 50


@st.fragment(run_every="2s" if any_active else None)
def live_section() -> None:
    """The run list and everything about the selected run, read and drawn together."""
    listings = controller.batch_listings()
    if not listings:
        st.info("No batch runs yet; past interactive sessions are listed below.")
        return
    st.dataframe(pd.DataFrame([{"run": r.display_name, "status": r.status, "benchmark": r.benchmark,
                                "agent / model": r.agent, "judge": r.judge, "headline (95% interval)": r.headline,
                                "cases": r.expected_cases, "id": r.id, "created": r.created_at}
                               for r in listings]), hide_index=True, width="stretch")
    names = {r.id: r.display_name for r in listings}
    if st.session_state.get("run_selected") not in names:
        st.session_state["run_selected"] = listings[0].id
    selected = st.selectbox("Run", list(names), format_func=lambda i: f"{names[i]} ({i})", key="run_selected")
    snapshot = controller.snapshot(selected)  # overview, summary and metrics read at one moment
    overview = snapshot.overview
    # When the run stops, the whole page (run list, plots across runs, comparison, sidebar) is drawn again, so
    # nothing on it stays at the counts it had while the run was live.
    was_active = st.session_state.get("run_was_active", {}).get(selected, False)
    st.session_state.setdefault("run_was_active", {})[selected] = overview.active or overview.state == "pending"
    if was_active and not (overview.active or overview.state == "pending"):
        st.rerun(scope="app")
    finished = overview.done + overview.failed
    eta = f", about {overview.eta_s:,.0f} s left" if overview.eta_s is not None else ""
    rate = f" at {overview.rate_per_s:.2f} cases/s" if overview.rate_per_s else ""
    line = (f"{overview.state}: {overview.done} done, {overview.failed} failed, {overview.pending} pending of "
            f"{overview.expected_cases}{rate}{eta}")
    if overview.expected_cases:
        st.progress(min(finished / overview.expected_cases, 1.0), text=line)  # numbers and a state only
    else:
        st.write(f"{overview.state}: {overview.done} done, {overview.failed} failed")
    if overview.source_run_id:
        st.caption(literal(f"Scores the outputs of run {overview.source_run_id}."))
    if overview.error:
        st.error(literal(f"The run stopped with an error: {overview.error}"))
    if not overview.active and (overview.error or overview.state in ("failed", "interrupted")):
        log = controller.worker_log(selected)
        if log:
            with st.expander("The worker's log (last lines)", expanded=bool(overview.error)):
                st.code(log, language=None)
    left, right = st.columns(2)
    if overview.resumable and left.button("Resume", key=f"resume-{selected}",
                                          help="Starts a worker: finished cases are kept; failed and pending ones "
                                               "run again."):
        resumed = controller.resume(selected)
        if resumed.error:
            st.error(literal(resumed.error))
        else:
            st.toast(literal(resumed.notice or ""))
    if (overview.cancellable and right.button("Cancel", key=f"cancel-{selected}",
                                              help="Stops after the cases in flight; they are saved.")
            and (refused := controller.cancel(selected).error)):
        st.error(literal(refused))

    summary = snapshot.summary
    if summary is not None:
        st.subheader("Summary")
        show_summary(summary)  # a cancelled run's summary says its metrics cover only the finished cases
    summaries = snapshot.metrics
    if summaries:
        st.subheader("Per-case metrics (95% intervals)")
        st.table(pd.DataFrame([s.model_dump() for s in summaries]).set_index("metric"))
    if (summaries or (summary is not None and summary.groups)) and st.toggle("Plots of this run",
                                                                            key="run_plots"):
        run_plots(names[selected], summaries, summary)
    if overview.done or overview.failed:
        # On demand, like the plots: the per-case table with its filters and drill-down was a third of what the
        # page drew before it was usable (bench/runs_page_bench.py); the choice stays as the user switches runs.
        if st.toggle("Cases", key="cases_shown", help="the per-case table, a page at a time, with a search, a "
                                                      "status filter and the drill-down into one case"):
            case_section(selected)
        downloads(selected, names[selected])


def run_plots(label: str, summaries: list[MetricSummary], summary: RunSummary | None) -> None:
    """The selected run's metric intervals and its breakdown by group."""
    if summaries:
        st.plotly_chart(runs.metric_intervals({label: summaries}), width="stretch", key="intervals")
    if summary is not None and summary.groups and summary.counts.done:
        dimensions = runs.group_dimensions(summary)
        left, right = st.columns(2)
        dimension = left.selectbox("Breakdown by", dimensions, key="breakdown_dimension")
        metric_names = list(dict.fromkeys(m.name for g in summary.groups if g.dimension == dimension
                                          for m in g.metrics))
        metric = right.selectbox("Metric", metric_names, key="breakdown_metric")
        st.plotly_chart(runs.group_breakdown(summary, dimension, metric), width="stretch", key="breakdown")


def case_section(run_id: str) -> None:
    """The per-case table a page at a time (filtered and paged in the store), and the drill-down into one case
    of the page."""
    left, middle, right = st.columns([1, 2, 1])
    status = left.selectbox("Show", list(STATUS_FILTERS), key="case_filter")
    search = middle.text_input("Search case ids and errors", key="case_search")
    page_number = int(right.number_input("Page", min_value=1, value=1, step=1, key="case_page")) - 1
    found = controller.case_page(run_id, STATUS_FILTERS[status], search, page_number, CASES_PER_PAGE)
    shown = found.rows
    pages = max(1, -(-found.total // CASES_PER_PAGE))
    st.caption(f"{found.offset + 1 if shown else 0}-{found.offset + len(shown)} of {found.total} case results "
               f"(page {page_number + 1} of {pages}); click a column header to sort this page.")
    st.dataframe(pd.DataFrame(shown), hide_index=True, width="stretch", height=320)
    if not shown:
        return
    keys = [(row["case"], row["repetition"]) for row in shown]
    opened = st.selectbox("Open case", keys, index=None, format_func=lambda k: f"{k[0]} (repetition {k[1]})",
                          key=f"case_open_{run_id}", placeholder="choose a case to see everything recorded")
    if opened is not None:
        with st.container(border=True):
            show_case(run_id, *opened)


def downloads(run_id: str, label: str) -> None:
    # Built only when clicked: rebuilding the files on every rerun cost seconds per 10k results.
    left, middle, right = st.columns(3)
    left.download_button("Download results (CSV)", lambda: controller.results_csv(run_id),
                         file_name=f"{run_id}.csv", mime="text/csv", on_click="ignore")
    middle.download_button("Download results (JSON Lines)", lambda: controller.results_jsonl(run_id),
                           file_name=f"{run_id}.jsonl", mime="application/jsonl", on_click="ignore")
    right.download_button("Download HTML report", lambda: controller.report_html(run_id),
                          file_name=f"{run_id}.html", mime="text/html", on_click="ignore",
                          help=f"{label}: summary, settings and versions, plots, per-case table; opens offline")


live_section()

batch_runs = [r for r in runs_at_open if r.kind != RunKind.SESSION]
labels = {r.id: runs.run_label(r) for r in batch_runs}


@st.fragment
def across_section() -> None:
    """Metric intervals of several runs and accuracy against cost (runs whose metrics declare those roles)."""
    chosen = st.multiselect("Runs", list(labels), default=list(labels)[:4], format_func=labels.get,
                            key="across_runs")
    if not chosen:
        return
    across = {labels[run_id]: metrics for run_id in chosen if (metrics := controller.metric_summaries(run_id))}
    if across:
        st.plotly_chart(runs.metric_intervals(across), width="stretch", key="across")
    else:
        st.info("None of these runs has a finished case yet.")
    points = controller.cost_points(chosen)
    if points:
        st.plotly_chart(runs.accuracy_vs_cost(points), width="stretch", key="pareto")


st.header("Across runs")
if st.toggle("Show plots across runs", key="across_shown",
             help="metric intervals of several runs, and accuracy against mean cost with its Pareto front"):
    across_section()

def show_comparison(run_a: str, run_b: str, comparison: RunComparison) -> None:
    """The paired tests with their p-values, the per-case differences plot, each run's intervals."""
    if comparison.paired:
        st.table(pd.DataFrame([
            {"metric": p.metric, "shared cases": p.shared_cases, labels[run_a]: p.value_a,
             labels[run_b]: p.value_b, "difference": p.difference, "test": p.test, "p-value": p.p_value,
             "difference 95% CI": (f"{p.difference_ci_low:.4f} - {p.difference_ci_high:.4f}"
                                   if p.difference_ci_low is not None else ""),
             "only A right": p.only_a_correct, "only B right": p.only_b_correct}
            for p in comparison.paired]).set_index("metric"))
        metric = st.selectbox("Paired differences of", [p.metric for p in comparison.paired], key="compare_metric")
        differences = controller.paired_differences(run_a, run_b, metric)
        st.plotly_chart(runs.paired_differences_plot(metric, differences.differences, labels[run_a],
                                                      labels[run_b]), width="stretch", key="paired")
    else:
        st.info("These runs share no scored cases with the same metrics; they cannot be compared pairwise.")
    st.plotly_chart(runs.metric_intervals({labels[run_a]: comparison.summaries_a,
                                            labels[run_b]: comparison.summaries_b}),
                    width="stretch", key="compare_intervals")


@st.fragment
def compare_section() -> None:
    col_a, col_b = st.columns(2)
    run_a = col_a.selectbox("Run A", list(labels), index=0, format_func=labels.get, key="compare_a")
    same_benchmark = controller.comparable(run_a, batch_runs)
    if not same_benchmark:
        st.info("No other run of this benchmark to compare with.")
    else:
        run_b = col_b.selectbox("Run B", same_benchmark, format_func=labels.get, key="compare_b")
        try:
            comparison = controller.comparison(run_a, run_b)
        except runs.BenchmarkError as exc:
            st.info(literal(str(exc)))
        else:
            show_comparison(run_a, run_b, comparison)


st.header("Compare two runs")
if len(batch_runs) < 2:
    st.info("Comparing needs two batch runs of one benchmark.")
elif st.toggle("Compare two runs case by case", key="compare_shown",
               help="exact McNemar or paired bootstrap on the cases both runs finished"):
    compare_section()

st.header("Past walkthroughs and lesion evaluations")
sessions = controller.sessions()
if not sessions:
    st.info("No interactive session yet: the DDXPlus walkthrough and the lesion page save each one here.")
else:
    st.dataframe(pd.DataFrame([s.model_dump(exclude={"reopen_page", "reopen_query"}) for s in sessions]),
                 hide_index=True, width="stretch")
    reopened = st.selectbox("Reopen", [s.run_id for s in sessions], index=None, key="session_open",
                            placeholder="choose a session")
    if reopened is not None:
        row = next(s for s in sessions if s.run_id == reopened)
        if row.reopen_page and row.reopen_query and st.button("Continue it on its page", key="session_continue"):
            st.switch_page(row.reopen_page, query_params={row.reopen_query: row.run_id})
        step = controller.first_step(reopened)
        if step is not None:
            show_case(reopened, *step)
        else:
            st.info(literal(f"Session {row.run_id} has no finished step yet; continue it on its page."))
