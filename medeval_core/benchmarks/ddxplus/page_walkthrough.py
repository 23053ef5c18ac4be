"""DDXPlus walkthrough: question a simulated patient (30 questions at most), give a differential, see the metrics."""

import pandas as pd
import streamlit as st

from medeval_core.benchmarks.ddxplus import walkthrough as wt
from medeval_core.plaintext import literal
from medeval_core.session_controls import session_controls

PICK_MODES = {"random": "At random", "pathology": "At random, with a given pathology", "index": "By row"}
SEXES = {"M": "male", "F": "female"}

st.title("DDXPlus walkthrough")
st.caption("Question a simulated DDXPlus patient as an agent would: each question reveals the patient's whole "
           "answer for that evidence, 30 questions at most. Then give your differential and compare it with the "
           "ground truth (DDR, DDP, DDF1, GTPA, GTPA@1, PER, IL as in the DDXPlus evaluation).")

settings = wt.current_settings()
store = wt.current_store()


def ask_question(walk: wt.Walkthrough, code: str) -> None:
    """Ask; once asked the search is emptied for the next question (a refused question keeps it)."""
    try:
        wt.ask(store, walk, code)
    except (wt.WalkthroughError, wt.EpisodeError) as exc:
        st.session_state["ddx_error"] = str(exc)
    else:
        st.session_state["ddx_search"] = ""


try:
    res = wt.resources(settings)
except wt.WalkthroughError as exc:
    st.info(literal(exc))
    st.stop()

walk = None
walk_id = st.query_params.get("walkthrough")
if walk_id:
    try:
        walk = wt.load(store, res, walk_id, settings)
    except wt.WalkthroughError as exc:
        st.warning(literal(exc))

if walk is None:
    st.subheader("Pick a patient")
    mode = st.radio("Patient", list(PICK_MODES), format_func=PICK_MODES.get, key="ddx_pick_mode", horizontal=True)
    pathology = index = None
    if mode == "pathology":
        pathology = st.selectbox("Pathology", res.kb.pathology_names, key="ddx_pick_pathology")
    elif mode == "index":
        index = int(st.number_input("Row of the patients file (0-based)", min_value=0,
                                    max_value=int(res.patients.rows.max()), step=1, key="ddx_pick_index"))
    st.caption(literal(f"{len(res.patients)} patients from {res.patients_file.name}."))
    if st.button("Start walkthrough", type="primary", key="ddx_start"):
        try:
            new_id = wt.start(store, settings, res, wt.pick_patient(res, mode, pathology=pathology, index=index))
        except wt.WalkthroughError as exc:
            st.error(literal(exc))
        else:
            st.query_params["walkthrough"] = new_id
            st.rerun()
    st.stop()

patient = walk.patient
intake = walk.intake()
left, middle, right = st.columns(3)
left.metric("Age", patient.age)
middle.metric("Sex", SEXES.get(patient.sex, patient.sex))
right.metric("Questions asked", f"{len(walk.asked)} / {walk.max_turns}")
st.markdown(f"**Reason for consulting** ({literal(intake.initial_evidence)}): {literal(intake.initial_question)} "
            "— **yes**")
st.caption(f"Walkthrough {walk.id} on row {patient.row}; the link in the address bar brings it back.")
session_controls(store, walk.id, "walkthrough", walk.finished)

st.subheader("Dialogue")
turns = wt.dialogue(walk)
if not turns:
    st.caption("No question yet.")
for number, turn in enumerate(turns, start=1):
    with st.chat_message("user", avatar=":material/stethoscope:"):
        st.markdown(f"**{number}.** {literal(turn.payload['question'])} ({literal(turn.payload['root'])})")
    with st.chat_message("assistant", avatar=":material/person:"):
        st.text(turn.payload["answer"])

if not walk.finished:
    st.subheader("Ask a question")
    query = st.text_input("Search the questions", key="ddx_search", placeholder="e.g. fever, pain, cough, travel")
    matches = wt.questions_to_ask(res, walk, query)
    if not matches:
        st.caption("No question left to ask matches; try another word.")
    else:
        code = st.selectbox(f"Question ({len(matches)} matching)", matches, key="ddx_question",
                            format_func=lambda c: f"{c}: {res.kb.question_text(c)}")
        ask_col, hint_col = st.columns([1, 2])
        ask_col.button("Ask", key="ddx_ask", disabled=walk.questions_left <= 0, on_click=ask_question,
                       args=(walk, code))
        if error := st.session_state.pop("ddx_error", None):
            st.error(literal(error))
        if hint_col.button("What would KB-Bayes ask next?", key="ddx_hint"):
            hint = wt.suggest(res, walk)
            leading = literal(", ".join(f"{name} {mass:.0%}" for name, mass in hint.leading[:3]))
            if hint.root is None:
                st.info(f"KB-Bayes would stop here and diagnose ({hint.phase}). Its leading pathologies: {leading}.")
            else:
                reason = ("it best separates the pathologies still likely" if hint.phase == "pathology"
                          else "it best separates the differentials of patients with the leading pathology")
                st.info(f"KB-Bayes would ask **{literal(hint.root)}: {literal(hint.question)}**, because {reason} "
                        f"(gain {hint.information_gain:.3f}). Its leading pathologies: {leading}.")
            st.caption("The KB-Bayes teacher reads the KB and learnt from the sample patients (this one included).")

    st.subheader("Your differential")
    chosen = st.multiselect("Pathologies, most likely first", res.kb.pathology_names, key="ddx_differential")
    weights = st.radio("Weights", ["ranks", "masses"], key="ddx_weights", horizontal=True,
                       format_func={"ranks": "From the order (rank r of n weighs 2n+1-r)",
                                    "masses": "Masses I enter"}.get)
    masses: dict[str, float] = {}
    if weights == "masses":
        for name in chosen:
            masses[name] = st.number_input(f"Mass of {name}", min_value=0.0, max_value=1.0,
                                           value=round(1 / len(chosen), 3), step=0.01, key=f"ddx_mass_{name}")
        st.caption("Pathologies at 0.01 or below do not count as part of your differential.")
    if st.button("Submit differential", type="primary", key="ddx_submit", disabled=not chosen):
        try:
            differential = masses if weights == "masses" else wt.ranks_to_masses(chosen)
            wt.submit(store, walk, differential)
        except (wt.WalkthroughError, wt.EpisodeError) as exc:
            st.error(literal(exc))
        else:
            st.rerun()
else:
    st.subheader("Result")
    metrics = walk.result.metrics
    columns = st.columns(len(wt.METRIC_KEYS))
    for column, key in zip(columns, wt.METRIC_KEYS, strict=True):
        column.metric(key, f"{metrics[key]:.0f}" if key == "IL" else f"{metrics[key]:.1f}")
    st.markdown(f"**True pathology:** {literal(patient.pathology)}")
    rows = wt.comparison_rows(res, walk)
    st.plotly_chart(wt.comparison_figure(rows), key="ddx_comparison")
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="ddx_comparison_table")
    missed = wt.missed_questions(res, walk)
    st.markdown("**Evidences you did not ask about**" if missed else "**You asked about every positive evidence.**")
    for code, question in missed:
        st.markdown(f"- {literal(code)} {literal(question)}")
    st.caption(f"Saved as run {walk.id}.")
    if st.button("Start another walkthrough", key="ddx_again"):
        del st.query_params["walkthrough"]
        st.rerun()
