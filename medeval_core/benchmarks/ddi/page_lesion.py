"""Lesion diagnosis: one image through the tested model and the DDI judge, or another system's answer judged."""

import pandas as pd
import streamlit as st

from medeval_core.benchmarks.ddi.interactive import (
    EVALUATION_ERRORS,
    EXACT_LABEL_RULE,
    STAGE_TEXT,
    UPLOAD_TYPES,
    ImageRejected,
    Stage,
    candidate_labels,
    canonical_label,
    current_settings,
    current_store,
    evaluate_upload,
    model_setup,
    new_session_id,
    session_evaluations,
    validate_image,
)
from medeval_core.plaintext import literal

MODES = {"open": "Open-ended diagnosis (DDI prompts)", "classification": "Classification (23 candidate labels)"}

st.title("Lesion diagnosis")
st.caption("The SkinGPT-R1 protocol: the model sees the image and the task prompt only; the reference diagnosis "
           "goes to the judge afterwards. Every evaluation is saved with its settings.")

settings = current_settings()
store = current_store()
session_id = st.session_state.setdefault("lesion_session", new_session_id())
setup = model_setup(settings)
if setup.configured:
    st.caption(f"Tested model: {literal(setup.message)}. Judge: {literal(setup.judge)}.")
else:
    st.info("Register a vision-language model on the **Models** page (sidebar, medeval section: an "
            "OpenAI-compatible endpoint or a local checkpoint folder) and make it the default, or set the "
            f"environment variables: {literal(setup.message)} Until then you can paste a response from any system "
            "below and have it judged.")

upload = st.file_uploader("Lesion image (JPEG, PNG or WebP)", type=UPLOAD_TYPES, key="lesion_upload")
image = None
if upload is not None:
    try:
        image = validate_image(upload.getvalue(), name=upload.name)
    except ImageRejected as exc:
        st.error(literal(exc))
    else:
        st.image(image.image, caption=literal(f"{image.name}: {image.width}x{image.height} {image.format}"),
                 width=360)

labels = candidate_labels(settings)


def keep_reference() -> None:
    """Switching task keeps the reference: as the label it names in classification, as its text when open."""
    kept = st.session_state.get("lesion_reference_kept", "")
    if st.session_state["lesion_mode"] == "classification":
        st.session_state["lesion_reference_label"] = canonical_label(kept, labels) or ""
    else:
        st.session_state["lesion_reference"] = kept


def remember_reference(key: str) -> None:
    st.session_state["lesion_reference_kept"] = st.session_state[key]


mode = st.radio("Task", list(MODES), format_func=MODES.get, key="lesion_mode", horizontal=True,
                on_change=keep_reference)
if mode == "classification":
    reference = st.selectbox("Reference diagnosis (optional)", ["", *labels], key="lesion_reference_label",
                             format_func=lambda label: label or "(none)", on_change=remember_reference,
                             args=("lesion_reference_label",),
                             help="The task's label space: the reference is one of its 23 labels.")
    kept = st.session_state.get("lesion_reference_kept", "")
    if kept and not reference:
        st.caption(literal(f"The reference you entered, {kept!r}, is not one of the candidate labels: choose the "
                           "label it corresponds to."))
    st.caption(f"The {len(labels)} candidate labels have no nevus (mole) class: a benign naevus can only be "
               "answered with one of these labels or with none.")
    st.caption(literal(EXACT_LABEL_RULE))
else:
    reference = st.text_input("Reference diagnosis (optional, given only to the judge)", key="lesion_reference",
                              placeholder="e.g. melanoma-in-situ", on_change=remember_reference,
                              args=("lesion_reference",))
with st.expander("Judge a response from another system", expanded=not setup.configured):
    pasted = st.text_area("Model response", key="lesion_pasted", height=160,
                          help="When filled, this text is judged instead of running the configured model.")
greedy = st.toggle("Greedy decoding", key="lesion_greedy", help="Off: the protocol's sampling (temperature 0.7, "
                   "top-p 0.9, seed 42).")

if st.session_state.get("lesion_cancel"):
    st.warning("The evaluation was cancelled; it is saved as a failed session run.")
if st.button("Run", type="primary", key="lesion_run"):
    progress = st.status("Starting...", expanded=True)
    # Clicking Cancel asks Streamlit for a rerun, which interrupts the script at the next progress update.
    progress.button("Cancel", key="lesion_cancel")
    elapsed = progress.empty()

    def show_progress(stage: Stage, seconds: float) -> None:
        progress.update(label=f"{STAGE_TEXT[stage]}...", state="running", expanded=True)
        elapsed.caption(f"{STAGE_TEXT[stage]}: {seconds:.0f} s")

    try:
        evaluation = evaluate_upload(settings, store, session_id, mode, image, reference=reference,
                                     pasted_response=pasted, greedy=greedy, on_progress=show_progress)
    except EVALUATION_ERRORS as exc:
        progress.update(label="Stopped", state="error")
        st.error(literal(exc))
    else:
        progress.update(label="Done", state="complete", expanded=False)
        st.session_state.setdefault("lesion_runs", []).append(evaluation.run_id)
        st.session_state["lesion_latest"] = evaluation.run_id

latest = st.session_state.get("lesion_latest")
evaluations = session_evaluations(store, st.session_state.get("lesion_runs", []))
current = next((e for e in evaluations if e.run_id == latest), None)
if current is not None:
    st.subheader("Result")
    for warning in current.model_warnings:
        st.warning(literal(warning))
    answer, reading, verdict = st.columns(3)
    answer.markdown("**The model's final answer**")
    answer.text(current.model_answer or "(no final answer found)")
    reading.markdown("**The judge read it as**")
    reading.text(current.final_diagnosis or "(none identified)")
    verdict.markdown("**Judge verdict**")
    if current.verdict is not None:
        verdict.text(("Correct" if current.verdict["correct"] else "Incorrect") + f" against {current.reference!r}")
        verdict.caption(literal(f"{current.verdict['reason']} ({current.judge})"))
    elif current.judge_error:
        verdict.error(literal(f"The judge gave no verdict: {current.judge_error}"))
    else:
        verdict.text("Not judged: no reference diagnosis was given.")
    st.markdown("**Rationale (model response)**")
    st.text(current.response)
    st.caption(literal(f"Saved as run {current.run_id} ({current.response_source} response)."))

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
