"""Annotation tasks (administrators): build a pairwise, patient-answer or judge-review task from stored runs and
assign its items to annotators, with overlap for agreement. Annotators never see this page."""

import pandas as pd
import streamlit as st

from medeval_core.annotation.accounts import list_annotators
from medeval_core.annotation.gate import require_annotator
from medeval_core.annotation.items import ItemError, system_name
from medeval_core.annotation.report import annotator_progress, item_flags
from medeval_core.annotation.tasks import (
    DEFAULT_PAIRWISE_CRITERIA,
    Assignment,
    create_judge_review_task,
    create_pairwise_task,
    create_patient_answer_task,
    list_tasks,
    runs_for_tasks,
)
from medeval_core.context import current_settings, current_store
from medeval_core.errors import StoreError

KINDS = {"pairwise": "Pairwise preference", "patient-answers": "Patient-answer ratings",
         "judge-review": "Judge review"}

store = current_store()
admin = require_annotator(store, admin=True)
st.title("Annotation tasks")

runs = runs_for_tasks(store)
accounts = [a.name for a in list_annotators(store) if a.active]
if not runs:
    st.info("No finished runs yet. Tasks are built from stored runs: finish a batch run first.")
    st.stop()
labels = {run.id: f"{system_name(run)} · {run.benchmark} · {run.kind}" for run in runs}

kind = st.radio("Kind", list(KINDS), format_func=KINDS.__getitem__, horizontal=True, key="task-kind")
with st.form("create-task"):
    if kind == "pairwise":
        first, second = st.columns(2)
        run_a = first.selectbox("Run A", list(labels), format_func=labels.__getitem__, key="task-run-a")
        run_b = second.selectbox("Run B", list(labels), index=min(1, len(labels) - 1),
                                 format_func=labels.__getitem__, key="task-run-b")
        criteria_text = st.text_area("Criteria (one per line)", "\n".join(DEFAULT_PAIRWISE_CRITERIA))
    elif kind == "patient-answers":
        dialogue_runs = st.multiselect("Dialogue runs", list(labels), format_func=labels.__getitem__)
    else:
        judged_run = st.selectbox("Run with judge verdicts (a judge's score run)", list(labels),
                                  format_func=labels.__getitem__)
    annotators = st.multiselect("Annotators", accounts, default=accounts[: min(2, len(accounts))])
    left, middle, right = st.columns(3)
    per_item = left.number_input("Annotators per item (overlap)", min_value=1, value=max(1, len(annotators)))
    max_items = middle.number_input("Items at most (0: all)", min_value=0, value=0)
    seed_text = right.text_input("Seed (empty: drawn and recorded)")
    title = st.text_input("Title shown to annotators (no run or model names)")
    submitted = st.form_submit_button("Create task", type="primary")

if submitted:
    try:
        seed = int(seed_text) if seed_text.strip() else None
        assignment = Assignment(annotators=annotators, per_item=int(per_item))
        settings, limit = current_settings(), int(max_items) or None
        with st.spinner("Building the items..."):
            if kind == "pairwise":
                criteria = [line.strip() for line in criteria_text.splitlines() if line.strip()]
                task = create_pairwise_task(store, settings, run_a, run_b, assignment, admin.name,
                                            criteria=criteria, title=title, seed=seed, max_items=limit)
            elif kind == "patient-answers":
                task = create_patient_answer_task(store, settings, dialogue_runs, assignment, admin.name,
                                                  title=title, seed=seed, max_items=limit)
            else:
                task = create_judge_review_task(store, settings, judged_run, assignment, admin.name, title=title,
                                                seed=seed, max_items=limit)
    except ValueError:
        st.error("The seed must be a whole number; correct it or leave it empty.")
    except (ItemError, StoreError) as exc:
        st.error(str(exc))
    else:
        st.success(f"Created task {task.id} (seed {task.config['seed']}).")

tasks = list_tasks(store)
if tasks:
    st.subheader("Tasks")
    st.dataframe(pd.DataFrame([
        {"task": t.id, "kind": KINDS[t.kind], "title": t.title, "criteria": ", ".join(t.criteria),
         "annotators": ", ".join(t.config.get("annotators", [])), "per item": t.config.get("per_item"),
         "seed": t.config.get("seed"), "created": t.created_at} for t in reversed(tasks)
    ]), hide_index=True, width="stretch")

    st.subheader("Progress per annotator")
    st.dataframe(pd.DataFrame([
        {"task": t.title, "annotator": p.annotator, "done": p.done, "skipped": p.skipped, "flagged": p.flagged,
         "remaining": p.remaining, "assigned": p.assigned}
        for t in reversed(tasks) for p in annotator_progress(store, t.id)
    ]), hide_index=True, width="stretch")
    flags = [flag for t in reversed(tasks) for flag in item_flags(store, t.id)]
    if flags:
        st.subheader("Flagged items")
        st.dataframe(pd.DataFrame([f.model_dump() for f in flags]), hide_index=True, width="stretch")
