"""The walkthrough pages' Streamlit helpers: opening the walkthrough the page's link names, the dialogue with a
simulated patient, and the Close and Delete buttons. Whoever holds a walkthrough's link owns it, so its page is
where it is closed (kept, listed as *closed*) or deleted (gone with everything it recorded)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import streamlit as st

from medeval_core.dialogue import Reply
from medeval_core.sessions import SessionError, WalkthroughError, close_session, delete_session
from medeval_core.store import Store

W = TypeVar("W")


def walkthrough_in_link(load: Callable[[str], W], query_key: str = "walkthrough") -> W | None:
    """The walkthrough whose run id the page's link holds (``?walkthrough=RUN_ID``), or None; a link that no longer
    opens one says why, above the picker the page then shows."""
    run_id = st.query_params.get(query_key)
    if not run_id:
        return None
    try:
        return load(run_id)
    except WalkthroughError as exc:
        st.warning(str(exc))
        return None



def start_button(key: str, start: Callable[[], str], query_key: str = "walkthrough") -> None:
    """The picker's Start button: ``start`` stores a new walkthrough and returns its run id, which goes into the
    page's link (so a reload or the link brings it back); a refusal is shown as an error."""
    if not st.button("Start walkthrough", type="primary", key=key):
        return
    try:
        run_id = start()
    except WalkthroughError as exc:
        st.error(str(exc))
        return
    st.query_params[query_key] = run_id
    st.rerun()

def session_controls(store: Store, run_id: str, query_key: str, finished: bool) -> None:
    with st.expander("Close or delete this walkthrough"):
        close_col, delete_col = st.columns(2)
        try:
            if not finished and close_col.button("Close it", key=f"{query_key}_close",
                                                  help="Keep what it recorded; it is listed as closed."):
                close_session(store, run_id)
                del st.query_params[query_key]
                st.rerun()
            sure = delete_col.checkbox("Yes, delete everything it recorded", key=f"{query_key}_delete_sure")
            if delete_col.button("Delete it", key=f"{query_key}_delete", disabled=not sure):
                delete_session(store, run_id)
                del st.query_params[query_key]
                st.rerun()
        except SessionError as exc:
            st.error(str(exc))


def show_dialogue(replies: Sequence[Reply], facts_used: bool = False) -> None:
    """A walkthrough's questions and the simulated patient's answers as a chat; with ``facts_used``, the numbers of
    the record's facts each answer drew on (as the page numbers them)."""
    st.subheader("Dialogue")
    if not replies:
        st.caption("No question yet.")
    for reply in replies:
        with st.chat_message("user", avatar=":material/stethoscope:"):
            st.text(reply.question)
        with st.chat_message("assistant", avatar=":material/person:"):
            st.text(reply.answer)
            if facts_used and reply.facts:
                st.caption("Facts used: " + ", ".join(str(i + 1) for i in reply.facts))
