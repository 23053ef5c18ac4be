"""SDBench walkthrough: ask questions and order tests of the gatekeeper, commit a diagnosis, see score and cost."""

from pathlib import Path

import pandas as pd
import streamlit as st

from medeval_core.benchmarks.sdbench import walkthrough as wt
from medeval_core.session_controls import session_controls, start_button, walkthrough_in_link

MODES = {"questions": "Ask questions", "tests": "Order tests", "diagnosis": "Commit a diagnosis"}

st.title("SDBench walkthrough")
st.caption("Work up a case as the sequential-diagnosis agent would: you start from a short summary, ask the "
           "gatekeeper questions and order tests (one per line), and commit one diagnosis. Questions in a row are "
           "one physician visit ($300), charged when its first question is asked, the very first included; "
           "ordering a test ends the visit, so the next question starts another. Each test is priced by its "
           "CPT/HCPCS code, or estimated when no code matches.")

settings = wt.current_settings()
store = wt.current_store()


def send_step(walk: wt.Walkthrough, mode: wt.Mode) -> None:
    """Send the box's text; once it is recorded the box is emptied for the next step (a refused step keeps it)."""
    try:
        wt.act(walk, mode, st.session_state.get("sd_box", ""))
    except (wt.WalkthroughError, wt.EpisodeError) as exc:
        st.session_state["sd_error"] = str(exc)
    else:
        st.session_state["sd_box"] = ""

walk = walkthrough_in_link(lambda run_id: wt.load(store, settings, run_id))

if walk is None:
    st.subheader("Pick a case")
    sources = wt.case_sources(settings)
    labels = [*sources, "Another case file"]
    chosen = st.selectbox("Cases", labels, key="sd_source")
    if chosen == "Another case file":
        typed = st.text_input("Path of an SDBench case file (JSON Lines) on the server", key="sd_source_path")
        path = Path(typed.strip()) if typed.strip() else None
    else:
        path = sources[chosen]
    if path is None:
        st.info("Give the path of a case file made with `python -m medeval_core cases import`, or fetch the "
                "AgentClinic cases with `python -m medeval_core data fetch agentclinic`.")
        st.stop()
    try:
        res = wt.load_source(settings, path)
    except wt.WalkthroughError as exc:
        st.error(str(exc))
        st.stop()
    splits = sorted({case.split for case in res.all_cases})
    split = st.selectbox("Split", ["all", *splits], key="sd_split")
    query = st.text_input("Search the summaries", key="sd_search", placeholder="e.g. fever, knee, 35-year-old")
    matches = wt.search(res.all_cases, None if split == "all" else split, query)
    st.caption(f"{len(matches)} of {len(res.all_cases)} cases match.")
    if not matches:
        st.stop()
    by_id = {case.case_id: case for case in matches}
    case_id = st.selectbox("Case", list(by_id), key="sd_case",
                           format_func=lambda cid: f"{cid} ({by_id[cid].split})")
    st.text(by_id[case_id].case_summary)
    start_button("sd_start", lambda: wt.start(store, settings, path, case_id))
    st.stop()

st.subheader("Case summary")
st.text(walk.case.case_summary)
st.caption(f"Walkthrough {walk.id} on case {walk.case.case_id}; the link in the address bar brings it back. "
           f"Gatekeeper: {walk.params.gatekeeper}; judge: {walk.params.judge}.")
session_controls(store, walk.id, "walkthrough", walk.finished)

visits, visit_cost, test_cost = wt.running_cost(walk)
columns = st.columns(4)
columns[0].metric("Visits", visits)
columns[1].metric("Visit cost", f"${visit_cost:,.0f}")
columns[2].metric("Test cost", f"${test_cost:,.2f}")
columns[3].metric("Total cost", f"${visit_cost + test_cost:,.2f}")

st.subheader("Timeline")
rows = wt.timeline(walk, reveal=walk.finished)
if not rows:
    st.caption("Nothing asked or ordered yet.")
else:
    frame = pd.DataFrame([row.model_dump() for row in rows])
    if not walk.finished:
        frame = frame.drop(columns=["source"])
    frame["estimated"] = frame["estimated"].map({True: "yes", False: "no"}).fillna("")
    st.dataframe(frame, hide_index=True, key="sd_timeline",
                 column_config={"cost": st.column_config.NumberColumn("cost ($)", format="%.2f")})

if not walk.finished:
    st.subheader("Your next step")
    mode = st.radio("Step", list(MODES), format_func=MODES.get, key="sd_mode", horizontal=True)
    placeholder = {"questions": "Does the patient smoke?\nAny past medical history?",
                   "tests": "Complete blood count\nChest X-ray", "diagnosis": "Your final diagnosis"}[mode]
    st.text_area("One question or test per line" if mode != "diagnosis" else "Diagnosis", key="sd_box",
                 placeholder=placeholder)
    st.button("Commit diagnosis" if mode == "diagnosis" else "Send", type="primary", key="sd_send",
              on_click=send_step, args=(walk, mode))
    if error := st.session_state.pop("sd_error", None):
        st.error(error)
    st.stop()

output = walk.output
result = walk.result
st.subheader("Result")
prefix = "llm_judge" if walk.params.judge == "llm" else "offline_judge"
score = result.scores.get(f"{prefix}_score", {})
left, middle, right = st.columns(3)
left.metric("Judge score", f"{score['value']:.0f} / 5" if score.get("value") is not None else "n/a")
middle.metric("Correct (4-5)", "yes" if result.metrics.get(f"{prefix}_correct") else "no")
right.metric("Case cost", f"${result.metrics.get('cost', 0):,.2f}")
st.markdown("**Your diagnosis**")
st.text(output.diagnosis if output is not None else "")
st.markdown("**Reference diagnosis**")
st.text(walk.case.final_diagnosis)
st.markdown("**Judge's reasoning**")
st.text(score.get("explanation") or "")

found = wt.findings(walk)
missed = [row for row in found if not row.asked]
st.subheader("Findings you never asked for")
if not missed:
    st.caption("You asked for every finding of the case.")
else:
    with st.container(border=True):
        for row in missed:
            st.text(f"[{row.section}] {row.name}: {row.text}")
with st.expander("The full case"):
    st.text(walk.case.full_text)
if found:
    table = pd.DataFrame([row.model_dump() for row in found])
    st.dataframe(table.style.apply(lambda r: ["background-color: #fff3cd" if not r["asked"] else ""] * len(r),
                                   axis=1), hide_index=True, key="sd_findings")

st.subheader("Your grade as a clinician")
grades = wt.clinician_grades(store, walk)
for grade in grades:
    st.text(f"{grade.verdict.get('graded_by')}: {grade.verdict.get('score')}/5 - {grade.verdict.get('reasoning')}")
with st.form("sd_grade_form"):
    my_score = st.slider("Score (5 same or more specific ... 1 wrong)", 1, 5, 3, key="sd_grade_score")
    reasoning = st.text_area("Why", key="sd_grade_reason")
    graded_by = st.text_input("Your name", key="sd_grade_name")
    if st.form_submit_button("Save my grade"):
        try:
            wt.clinician_grade(store, walk, my_score, reasoning, graded_by)
        except wt.WalkthroughError as exc:
            st.error(str(exc))
        else:
            st.rerun()

st.caption(f"Saved as run {walk.id}.")
if st.button("Start another walkthrough", key="sd_again"):
    del st.query_params["walkthrough"]
    st.rerun()
