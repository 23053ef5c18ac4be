"""Lesion diagnosis: one image through the tested model and the DDI judge, or another system's answer judged."""

import pandas as pd
import streamlit as st

from medeval_core.backends.vlm import VlmBackendError
from medeval_core.benchmarks.ddi.images import UPLOAD_TYPES, ImageRejected, validate_image
from medeval_core.benchmarks.ddi.interactive import (
    evaluate_upload,
    model_setup,
    new_session_id,
    session_evaluations,
)
from medeval_core.context import current_settings, current_store
from medeval_core.prompts import PromptError, load_labels
from medeval_core.settings import SettingsError

MODES = {"open": "Open-ended diagnosis (DDI prompts)", "classification": "Classification (23 candidate labels)"}

st.title("Lesion diagnosis")
st.caption("The SkinGPT-R1 protocol: the model sees the image and the task prompt only; the reference diagnosis "
           "goes to the judge afterwards. Every evaluation is saved with its settings.")

settings = current_settings()
store = current_store()
session_id = st.session_state.setdefault("lesion_session", new_session_id())
setup = model_setup(settings)
if setup.configured:
    st.caption(f"Tested model: {setup.message}. Judge: {setup.judge}.")
else:
    st.info(f"{setup.message} Until then you can paste a response from any system below and have it judged.")

upload = st.file_uploader("Lesion image (JPEG, PNG or WebP)", type=UPLOAD_TYPES, key="lesion_upload")
image = None
if upload is not None:
    try:
        image = validate_image(upload.getvalue(), name=upload.name)
    except ImageRejected as exc:
        st.error(str(exc))
    else:
        st.image(image.image, caption=f"{image.name}: {image.width}x{image.height} {image.format}", width=360)

mode = st.radio("Task", list(MODES), format_func=MODES.get, key="lesion_mode", horizontal=True)
if mode == "classification":
    labels = load_labels(prompts_dir=settings.prompts_dir)
    reference = st.selectbox("Reference diagnosis (optional)", ["", *labels], key="lesion_reference_label",
                             format_func=lambda label: label or "(none)")
else:
    reference = st.text_input("Reference diagnosis (optional, given only to the judge)", key="lesion_reference",
                              placeholder="e.g. melanoma-in-situ")
with st.expander("Judge a response from another system", expanded=not setup.configured):
    pasted = st.text_area("Model response", key="lesion_pasted", height=160,
                          help="When filled, this text is judged instead of running the configured model.")
greedy = st.toggle("Greedy decoding", key="lesion_greedy", help="Off: the protocol's sampling (temperature 0.7, "
                   "top-p 0.9, seed 42).")

if st.button("Run", type="primary", key="lesion_run"):
    with st.spinner("Running the model and the judge..."):
        try:
            evaluation = evaluate_upload(settings, store, session_id, mode, image, reference=reference,
                                         pasted_response=pasted, greedy=greedy)
        except (ValueError, VlmBackendError, SettingsError, PromptError) as exc:
            st.error(str(exc))
        else:
            st.session_state.setdefault("lesion_runs", []).append(evaluation.run_id)
            st.session_state["lesion_latest"] = evaluation.run_id

latest = st.session_state.get("lesion_latest")
evaluations = session_evaluations(store, st.session_state.get("lesion_runs", []))
current = next((e for e in evaluations if e.run_id == latest), None)
if current is not None:
    st.subheader("Result")
    for warning in current.model_warnings:
        st.warning(warning)
    left, right = st.columns(2)
    left.markdown("**Final diagnosis**")
    left.write(current.final_diagnosis or "(none identified)")
    right.markdown("**Judge verdict**")
    if current.verdict is not None:
        right.write(("Correct" if current.verdict["correct"] else "Incorrect") + f" against {current.reference!r}")
        right.caption(f"{current.verdict['reason']} ({current.judge})")
    elif current.judge_error:
        right.error(f"The judge gave no verdict: {current.judge_error}")
    else:
        right.write("Not judged: no reference diagnosis was given.")
    st.markdown("**Rationale (model response)**")
    st.text(current.response)
    st.caption(f"Saved as run {current.run_id} ({current.response_source} response).")

if evaluations:
    st.subheader("This session's evaluations")
    st.dataframe(
        pd.DataFrame([{
            "time": e.created_at, "task": e.mode, "image": (e.image or {}).get("name", ""),
            "final diagnosis": e.final_diagnosis, "reference": e.reference or "",
            "verdict": "" if e.verdict is None else ("correct" if e.verdict["correct"] else "incorrect"),
            "judge": e.judge or "", "run": e.run_id,
        } for e in evaluations]),
        hide_index=True, width="stretch",
    )
