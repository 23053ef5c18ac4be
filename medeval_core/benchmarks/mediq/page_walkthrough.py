"""MEDIQ walkthrough: ask a patient built from the case's facts, choose an option, then see the answer."""

import streamlit as st

from medeval_core.benchmarks.mediq import walkthrough as wt
from medeval_core.session_controls import session_controls, show_dialogue, start_button, walkthrough_in_link

st.title("MEDIQ walkthrough")
st.caption("You see what the expert sees first: the initial information, the question and the options. Ask the "
           "patient one question at a time (the patient answers only with the case's own facts, or says it cannot "
           "answer), then choose an option. 10 questions at most.")

settings = wt.current_settings()
store = wt.current_store()

walk = walkthrough_in_link(lambda run_id: wt.load(store, settings, run_id))

if walk is None:
    st.subheader("Pick a case")
    name = st.radio("Dataset", list(wt.DATASETS), format_func=wt.DATASETS.get, key="mediq_dataset", horizontal=True)
    try:
        cases = wt.dataset(settings, name)
    except wt.WalkthroughError as exc:
        st.info(str(exc))
        st.stop()
    by_id = cases.by_id()
    case_id = st.selectbox("Case", list(by_id), key="mediq_case",
                           format_func=lambda i: f"{i}: {by_id[i].question[:90]}")
    st.caption(cases.summary() + ".")
    start_button("mediq_start", lambda: wt.start(store, settings, name, case_id))
    st.stop()

case = walk.case
left, right = st.columns(2)
left.metric("Questions asked", f"{len(walk.replies)} / {walk.consultation.max_turns}")
right.metric("Case", case.case_id)
st.markdown("**Initial information**")
st.text(case.initial_info or "(none: this is a knowledge question without a vignette)")
st.markdown("**Question**")
st.text(case.question)
st.markdown("**Options**")
for letter, text in case.options.items():
    st.text(f"{letter}: {text}")
st.caption(f"Walkthrough {walk.id}; the link in the address bar brings it back.")
session_controls(store, walk.id, "walkthrough", walk.finished)

show_dialogue(walk.replies, facts_used=True)

if not walk.finished:
    st.subheader("Ask the patient")
    with st.form("mediq_ask_form", clear_on_submit=True):
        question = st.text_input("Your question", key="mediq_question", placeholder="e.g. Do you have a fever?")
        asked = st.form_submit_button("Ask", disabled=walk.questions_left <= 0)
    if asked:
        try:
            wt.ask(walk, question)
        except (wt.WalkthroughError, wt.EpisodeError) as exc:
            st.error(str(exc))
        else:
            st.rerun()
    if walk.questions_left <= 0:
        st.info("The question budget is used: choose an option.")
    st.subheader("Your choice")
    option = st.selectbox("Option", list(case.options), key="mediq_option",
                          format_func=lambda letter: f"{letter}: {case.options[letter]}")
    if st.button("Choose", type="primary", key="mediq_choose"):
        try:
            wt.choose(walk, option)
        except (wt.WalkthroughError, wt.EpisodeError) as exc:
            st.error(str(exc))
        else:
            st.rerun()
else:
    output = walk.output
    st.subheader("Result")
    if output.correct:
        st.success(f"Correct: you chose {output.choice}.")
    else:
        st.error(f"Not correct: you chose {output.choice}; the answer is {output.answer_idx}.")
    st.markdown("**Answer**")
    st.text(f"{case.answer_idx}: {case.correct_option}")
    if case.answer_mismatch:
        st.warning("This row's answer text differs from the text of its answer option; the score uses the option "
                   "letter (answer_idx). The row's answer text:")
        st.text(repr(case.answer))
    missed = wt.uncovered_facts(walk)
    st.markdown(f"**Facts you never uncovered** ({len(missed)} of {len(case.facts)})")
    for fact in missed:
        st.text(f"- {fact}")
    if st.button("What would the LLM expert have asked?", key="mediq_expert"):
        try:
            expert = wt.expert_consultation(settings, walk)
        except wt.WalkthroughError as exc:
            st.info(str(exc))
        else:
            st.markdown(f"**The LLM expert** asked {expert.num_questions} questions and chose {expert.choice} "
                        f"({'correct' if expert.correct else 'not correct'}).")
            for question, answer in zip(expert.questions, expert.answers, strict=True):
                st.text(f"Q: {question}\nA: {answer}")
    st.caption(f"Saved as run {walk.id}.")
    if st.button("Start another walkthrough", key="mediq_again"):
        del st.query_params["walkthrough"]
        st.rerun()
