"""Open-diagnosis walkthrough: question a patient simulated from a record, rank diagnoses, check their ICD-9 codes."""

import pandas as pd
import streamlit as st

from medeval_core.benchmarks.dynamicare import walkthrough as wt
from medeval_core.session_controls import session_controls, show_dialogue, start_button, walkthrough_in_link

st.title("Open diagnosis walkthrough")
st.caption("DynamiCare style: you see the chief complaint, question the patient (simulated from an AgentClinic "
           "record; it answers from what the patient knows or says it does not know) or request a test with "
           "\"REQUEST TEST: name\" (answered from the examination findings and test results, as AgentClinic's "
           "measurement agent), then rank up to 10 diagnoses. Each maps to an ICD-9 code you can correct; Hit@K and "
           "Rec@K match on the ICD-9 category.")

settings = wt.current_settings()
store = wt.current_store()

walk = walkthrough_in_link(lambda run_id: wt.load(store, settings, run_id))

if walk is None:
    st.subheader("Pick a patient")
    try:
        listed = wt.choices(settings)
    except wt.WalkthroughError as exc:
        st.info(str(exc))
        st.stop()
    line = st.selectbox("Patient (chief complaint)", list(listed), key="od_case",
                        format_func=lambda number: f"{number}: {listed[number]}")
    start_button("od_start", lambda: wt.start(store, settings, line))
    st.stop()

record = walk.record
st.metric("Questions asked", f"{len(walk.replies)} / {walk.consultation.max_turns}")
st.markdown("**Chief complaint**")
st.text(record.chief_complaint)
if record.objective:
    st.markdown("**Objective**")
    st.text(record.objective)
st.caption(f"Walkthrough {walk.id}; the link in the address bar brings it back.")
session_controls(store, walk.id, "walkthrough", walk.finished)

show_dialogue(walk.replies)

if not walk.finished:
    st.subheader("Ask the patient")
    with st.form("od_ask_form", clear_on_submit=True):
        question = st.text_input("Your question", key="od_question",
                                 placeholder="e.g. When did it start?  or  REQUEST TEST: Chest X-ray")
        asked = st.form_submit_button("Ask", disabled=walk.questions_left <= 0)
    if asked:
        try:
            wt.ask(walk, question)
        except (wt.WalkthroughError, wt.EpisodeError) as exc:
            st.error(str(exc))
        else:
            st.rerun()

    st.subheader("Your diagnoses")
    ranked = wt.parse_ranked(st.text_area("One diagnosis a line, most likely first (up to 10)", key="od_ranked"))
    if len(ranked) > 10:
        st.error(f"You listed {len(ranked)} diagnoses; keep the 10 most likely.")
    elif ranked:
        st.caption("The ICD-9 code each maps to, how the mapper made it and its score. Correct a code by typing "
                   "another one.")
        corrections: dict[str, str] = {}
        for row in wt.preview(ranked):
            shown = wt.display_code(row.code) if row.code else ""
            left, right = st.columns([2, 3])
            typed = left.text_input(f"{row.rank}. ICD-9 code", value=shown, key=f"od_code_{row.rank}_{row.text}")
            right.text(f"{row.text}\n-> {row.description or 'no code found'} (how mapped: {row.method}, "
                       f"score {row.confidence:.2f})")
            if typed.strip() and typed.strip() != shown:
                corrections[row.text] = typed.strip()
        if st.button("Submit diagnoses", type="primary", key="od_submit"):
            try:
                wt.submit(walk, ranked, corrections)
            except (wt.WalkthroughError, wt.EpisodeError) as exc:
                st.error(str(exc))
            else:
                st.rerun()
else:
    output = walk.output
    st.subheader("Result")
    columns = st.columns(5)
    for column, name in zip(columns, ("Hit@5", "Hit@10", "Rec@5", "Rec@10"), strict=False):
        column.metric(name, f"{output.metrics[name]:.2f}")
    columns[4].metric("Questions", output.num_questions)
    st.markdown("**Ground truth**")
    for code in record.icd9:
        st.text(f"{wt.display_code(code.code)} {code.name}".strip())
    if record.diagnosis:
        st.text(f"Recorded diagnosis: {record.diagnosis}")
    st.markdown("**Your diagnoses and their codes**")
    st.dataframe(pd.DataFrame([{"rank": row.rank, "diagnosis": row.text,
                                "code": wt.display_code(row.code) if row.code else "",
                                "category": row.category or "", "how mapped": row.method,
                                "score": round(row.confidence, 2),
                                "matched": bool(row.category and row.category in output.truth_categories)}
                               for row in output.diagnoses]), hide_index=True, key="od_result_table")
    matched = output.matched["@10"]
    st.text("Categories matched in the top 10: " + (", ".join(matched) if matched else "none"))
    st.caption(f"Saved as run {walk.id}.")
    if st.button("Start another walkthrough", key="od_again"):
        del st.query_params["walkthrough"]
        st.rerun()
