"""New run: a benchmark's form (built from its Params), the plan with settings hash and work estimate, the
endpoint checks, and the launch into a worker process that outlives this page."""

import json

import streamlit as st

from medeval_core.controllers.new_run import RUNS_PAGE, BenchmarkError, FieldSpec, NewRun, SettingsError
from medeval_core.plaintext import literal

st.title("New run")
st.caption("Choose a benchmark and its parameters. The run is checked and estimated before anything starts; it then "
           "runs in its own worker process, so closing or reloading this page does not stop it.")

try:
    controller = NewRun()
except SettingsError as exc:
    st.error(literal(f"Settings could not be loaded: {exc}"))
    st.stop()

SCORE_STORED = "Score a stored run"
kind = st.radio("What to launch", ["A new run", SCORE_STORED], horizontal=True, key="launch_kind",
                help="score a stored run: apply another scorer or a second judge to its outputs, as the command "
                     "line's `rescore` does")


def score_stored_run() -> None:
    """Choose a stored run and a scorer of its benchmark; the score run is stored and its worker started."""
    sources = controller.score_sources()
    if not sources:
        st.info("No stored batch run has finished cases to score yet.")
        return
    with st.form("score_form"):
        source_id = st.selectbox("Run whose outputs are scored", list(sources), key="score_source",
                                 format_func=lambda run_id: f"{sources[run_id].label} ({sources[run_id].benchmark}, "
                                                            f"{run_id})")
        scorers = sorted({name for source in sources.values() for name in source.scorers})
        scorer = st.selectbox("Scorer", scorers, key="score_scorer",
                              help="the scorers of the chosen run's benchmark (a judge, re-costing, ...)")
        options = st.text_area("Scorer options (JSON)", value="{}", key="score_options", height=80,
                               help='e.g. {"backend": "offline"} for the DDI judge')
        score_concurrency = st.number_input("Cases scored at once", min_value=1, max_value=512, value=1, step=1,
                                        key="score_concurrency")
        score_label = st.text_input("Run label", key="score_label")
        submitted = st.form_submit_button("Launch scoring", type="primary")
    if not submitted:
        return
    launched = controller.launch_score(sources[source_id], scorer, options, int(score_concurrency), score_label)
    if launched.error:
        st.error(literal(launched.error))
        return
    st.session_state["run_selected"] = launched.run_id
    st.session_state["launched_run"] = launched.run_id
    st.success(literal(launched.notice or ""))


if kind == SCORE_STORED:
    score_stored_run()
    if st.session_state.get("launched_run") and st.button("Watch it on the Batch runs page",
                                                         icon=":material/monitoring:"):
        st.switch_page(RUNS_PAGE)
    st.stop()

benchmarks = controller.benchmarks()
benchmark = st.selectbox("Benchmark", list(benchmarks), format_func=benchmarks.get, key="launch_benchmark")
variants = controller.variants(benchmark)
variant = st.radio("Kind of run", variants, horizontal=True, key=f"launch_variant_{benchmark}") if variants else None
try:
    specs = controller.form(benchmark, variant)
except BenchmarkError as exc:  # a benchmark whose spec cannot give a form (a data source no benchmark declares)
    st.error(literal(str(exc)))
    st.stop()


def widget(spec: FieldSpec, key: str) -> object:
    """The widget for one field; an optional field starts empty ("not set")."""
    label = spec.label + (" (optional)" if spec.optional else "")
    help_text = spec.help or None
    if spec.kind == "boolean":
        return st.checkbox(label, value=bool(spec.default), help=help_text, key=key)
    if spec.kind in ("integer", "number"):
        integer = spec.kind == "integer"
        cast = int if integer else float
        return st.number_input(
            label, help=help_text, key=key, step=1 if integer else None,
            min_value=cast(spec.minimum) if spec.minimum is not None else None,
            max_value=cast(spec.maximum) if spec.maximum is not None else None,
            value=cast(spec.default) if spec.default is not None else None,
        )
    if spec.kind == "choice":
        index = spec.choices.index(str(spec.default)) if spec.default in spec.choices else 0
        return st.selectbox(label, spec.choices, index=index, help=help_text, key=key)
    if spec.kind == "json":
        return st.text_area(label, value=json.dumps(spec.default) if spec.default is not None else "",
                            help=(help_text or "") + " (JSON)", key=key, height=80)
    if spec.suggestions:
        index = spec.suggestions.index(spec.default) if spec.default in spec.suggestions else None
        return st.selectbox(label, spec.suggestions, index=index, help=help_text, key=key, accept_new_options=True,
                            placeholder="not set" if spec.optional else "type a value")
    return st.text_input(label, value=str(spec.default or ""), help=help_text, key=key)


with st.form(f"launch_form_{benchmark}_{variant}"):
    values = {spec.name: widget(spec, f"field_{benchmark}_{variant}_{spec.name}") for spec in specs}
    roles = {}
    for offered in controller.role_choices(benchmark):
        picked = st.selectbox(
            f"Model for the {offered.role} role", offered.options, format_func=lambda option: option.label,
            key=f"role_{benchmark}_{offered.role}", disabled=bool(offered.fixed_by),
            help=(f"set on the server by {', '.join(offered.fixed_by)}, which wins" if offered.fixed_by else
                  "register more on the Models page; the run keeps its choice when resumed"))
        roles[offered.role] = picked.choice
    label = st.text_input("Run label", help="shown in run lists and plot legends", key=f"label_{benchmark}")
    checked = st.form_submit_button("Check parameters", type="secondary")

if checked:
    st.session_state.pop("launch_plan", None)
    with st.spinner("Validating the parameters and counting the cases..."):
        checked_plan = controller.plan(benchmark, values, variant, roles)
        if checked_plan.plan is not None:
            st.session_state["launch_plan"] = (checked_plan.plan, label)
        else:
            st.error(literal(checked_plan.error or ""))

planned = st.session_state.get("launch_plan")
if planned is not None and planned[0].benchmark == benchmark and planned[0].variant == variant:
    plan, plan_label = planned
    estimate = plan.estimate
    st.subheader("Plan")
    left, middle, right = st.columns(3)
    left.metric("Cases", estimate.cases)
    middle.metric("Case runs (cases x repetitions)", estimate.case_runs)
    right.metric("Model calls (at least)", estimate.min_model_calls,
                 help="one per case run and model role; a dialogue makes one per turn")
    st.caption(literal(f"Settings hash {plan.settings_hash}. Model roles checked before the launch: "
                              f"{', '.join(estimate.model_roles) or 'none (offline)'}."))
    if plan.score_stages:
        st.caption(literal("Stages: the cases, then " + ", then ".join(
            f"a score run ({stage.scorer}{', ' + stage.options['backend'] if stage.options.get('backend') else ''})"
            for stage in plan.score_stages) + ", all in the run's worker."))
    with st.expander("Parameters and effective settings"):
        st.json({"params": plan.params, "settings": plan.settings}, expanded=False)
    if st.button("Launch", type="primary", key="launch_button"):
        with st.spinner("Checking the endpoints and starting the worker..."):
            launched = controller.launch(plan, plan_label)
            if launched.error:
                st.error(literal(launched.error))
            else:
                st.session_state.pop("launch_plan", None)
                st.session_state["run_selected"] = launched.run_id
                st.session_state["launched_run"] = launched.run_id
                for check in launched.checks:
                    st.caption(literal(check))
                st.success(literal(launched.notice or ""))

if st.session_state.get("launched_run") and st.button("Watch it on the Batch runs page",
                                                     icon=":material/monitoring:"):
    st.switch_page(RUNS_PAGE)
