"""The walkthrough pages' Close and Delete buttons (Streamlit): whoever holds a walkthrough's link owns it, so its
page is where it is closed (kept, listed as *closed*) or deleted (gone with everything it recorded)."""

from __future__ import annotations

import streamlit as st

from medeval_core.sessions import SessionError, close_session, delete_session
from medeval_core.store import Store


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
