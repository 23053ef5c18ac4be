"""Annotation tasks (administrators): build a pairwise, patient-answer or judge-review task from stored runs and
assign its items to annotators, with overlap for agreement. Annotators never see this page."""

import pandas as pd
import streamlit as st

from medeval_core.controllers.annotation_tasks import DEFAULT_PAIRWISE_CRITERIA, TaskBuilder

KINDS = {"pairwise": "Pairwise preference", "patient-answers": "Patient-answer ratings",
         "judge-review": "Judge review"}

builder = TaskBuilder()
st.title("Annotation tasks")

labels = builder.run_labels()
accounts = builder.annotators()
if not labels:
    st.info("No finished runs yet. Tasks are built from stored runs: finish a batch run first.")
    st.stop()

kind = st.radio("Kind", list(KINDS), format_func=KINDS.__getitem__, horizontal=True, key="task-kind")
with st.form("create-task"):
    if kind == "pairwise":
        first, second = st.columns(2)
        run_a = first.selectbox("Run A", list(labels), format_func=labels.__getitem__, key="task-run-a")
        run_b = second.selectbox("Run B", list(labels), index=min(1, len(labels) - 1),
                                 format_func=labels.__getitem__, key="task-run-b")
        criteria_text = st.text_area("Criteria (one per line)", "\n".join(DEFAULT_PAIRWISE_CRITERIA))
        chosen_runs = [run_a, run_b]
    elif kind == "patient-answers":
        chosen_runs = st.multiselect("Dialogue runs", list(labels), format_func=labels.__getitem__)
    else:
        chosen_runs = [st.selectbox("Run with judge verdicts (a judge's score run)", list(labels),
                                    format_func=labels.__getitem__)]
    annotators = st.multiselect("Annotators", accounts, default=accounts[: min(2, len(accounts))])
    left, middle, right = st.columns(3)
    per_item = left.number_input("Annotators per item (overlap)", min_value=1, value=max(1, len(annotators)))
    max_items = middle.number_input("Items at most (0: all)", min_value=0, value=0)
    seed_text = right.text_input("Seed (empty: drawn and recorded)")
    title = st.text_input("Title shown to annotators (no run or model names)")
    submitted = st.form_submit_button("Create task", type="primary")

if submitted:
    with st.spinner("Building the items..."):
        created = builder.create(kind, runs=chosen_runs, annotators=annotators, per_item=int(per_item),
                                 max_items=int(max_items), seed_text=seed_text, title=title,
                                 criteria_text=criteria_text if kind == "pairwise" else "")
    if created.error:
        st.error(created.error)
    else:
        st.success(created.notice or "")

tasks = builder.tasks()
if tasks:
    st.subheader("Tasks")
    st.dataframe(pd.DataFrame([
        {"task": t.id, "kind": KINDS[t.kind], "title": t.title, "criteria": ", ".join(t.criteria),
         "annotators": ", ".join(t.config.get("annotators", [])), "per item": t.config.get("per_item"),
         "seed": t.config.get("seed"), "created": t.created_at} for t in tasks
    ]), hide_index=True, width="stretch")

    st.subheader("Progress per annotator")
    st.dataframe(pd.DataFrame([
        {"task": t.title, "annotator": p.annotator, "done": p.done, "skipped": p.skipped, "flagged": p.flagged,
         "remaining": p.remaining, "assigned": p.assigned}
        for t in tasks for p in builder.progress(t.id)
    ]), hide_index=True, width="stretch")
    flags = [flag for t in tasks for flag in builder.flags(t.id)]
    if flags:
        st.subheader("Flagged items")
        st.dataframe(pd.DataFrame([f.model_dump() for f in flags]), hide_index=True, width="stretch")
