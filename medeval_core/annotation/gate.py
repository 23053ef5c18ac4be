"""The sign-in every annotation page shows before anything else (Streamlit).

With OpenID Connect configured in Streamlit secrets (an ``[auth]`` section), ``st.login`` signs the annotator in
and the provider's e-mail address names the account; otherwise the account name and passcode are checked against
the store (argon2, rate-limited). The account is read again on every rerun, so disabling it takes effect at once.
"""

from __future__ import annotations

import streamlit as st

from medeval_core.annotation.accounts import (
    Annotator,
    SignInError,
    any_accounts,
    get_annotator,
    oidc_annotator,
    sign_in,
)
from medeval_core.store import Store

SESSION_KEY = "annotation_annotator"


def oidc_configured() -> bool:
    try:
        return "auth" in st.secrets
    except Exception:  # noqa: BLE001 - no secrets file at all: Streamlit raises its own not-found error
        return False


def _oidc_logged_in() -> bool:
    # st.user has no is_logged_in key until the provider has been asked once.
    return bool(st.user.get("is_logged_in", False))


def signed_in(store: Store) -> Annotator | None:
    """The annotator signed in in this browser session (None when nobody is, or the account was disabled)."""
    if oidc_configured():
        if not _oidc_logged_in():
            return None
        try:
            return oidc_annotator(store, st.user.get("email"))  # type: ignore[arg-type]
        except SignInError:
            return None
    name = st.session_state.get(SESSION_KEY)
    found = get_annotator(store, name) if isinstance(name, str) else None
    return found if found is not None and found.active else None


def queue_only(store: Store) -> bool:
    """Whether the app serves only the annotation queue and its sign-in: a clinician (not an administrator) is
    signed in, or annotator accounts exist and nobody is. Every other page names runs and models, and a new browser
    session (a reload, a typed URL) is not signed in yet, so on a deployment with annotators only a signed-in
    administrator reaches them."""
    found = signed_in(store)
    if found is not None:
        return not found.is_admin
    return any_accounts(store)


def _sign_in_form(store: Store) -> None:
    st.title("Sign in to annotate")
    if oidc_configured():
        if _oidc_logged_in():
            try:
                oidc_annotator(store, st.user.get("email"))  # type: ignore[arg-type]
            except SignInError as exc:
                st.error(str(exc))
            st.button("Sign out", on_click=st.logout)
        else:
            st.button("Sign in with your organisation's account", type="primary", on_click=st.login)
        return
    with st.form("annotation-sign-in"):
        name = st.text_input("Name", autocomplete="username")
        passcode = st.text_input("Passcode", type="password", autocomplete="current-password")
        submitted = st.form_submit_button("Sign in", type="primary")
    if submitted:
        try:
            annotator = sign_in(store, name, passcode)
        except SignInError as exc:
            st.error(str(exc))
            return
        st.session_state[SESSION_KEY] = annotator.name
        st.rerun()
    st.caption("Accounts are made by an administrator with `python -m medeval_core annotators add NAME`.")


def _sign_out() -> None:
    st.session_state.pop(SESSION_KEY, None)


def require_annotator(store: Store, admin: bool = False) -> Annotator:
    """The signed-in annotator, or the sign-in form and nothing else (the script stops there)."""
    annotator = signed_in(store)
    if annotator is None:
        _sign_in_form(store)
        st.stop()
    assert annotator is not None
    with st.sidebar:
        st.caption("Signed in as")
        st.text(annotator.name)
        st.button("Sign out", key="annotation-sign-out", on_click=st.logout if oidc_configured() else _sign_out)
    if admin and not annotator.is_admin:
        st.error("This page is for administrators; your annotation queue is on the Annotate page.")
        st.stop()
    return annotator
