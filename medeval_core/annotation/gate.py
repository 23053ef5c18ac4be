"""The sign-in every annotation page shows before anything else (Streamlit).

With OpenID Connect configured in Streamlit secrets (an ``[auth]`` section), ``st.login`` signs the annotator in
and the provider's e-mail address names the account; otherwise the account name and passcode are checked against
the store (argon2, rate-limited). The account is read again on every rerun, so disabling it takes effect at once.

A passcode sign-in lasts beyond the browser session that made it (a reload, a new tab, a link) for
``MEDEVAL_SIGN_IN_HOURS``: the browser keeps a random token in a cookie (never the passcode), the store keeps its
hash with an expiry (``accounts.open_sign_in``), and signing out, disabling the account or ``annotators sign-out``
revokes it. Streamlit reads cookies (``st.context.cookies``, sent with the session's websocket) but has no call
that writes one, so the token is written by a zero-height component: its iframe is same-origin, so its script can
set the app's cookie.
"""

from __future__ import annotations

import json

import streamlit as st
import streamlit.components.v1 as components
from pydantic import BaseModel

from medeval_core.annotation.accounts import (
    Annotator,
    SignInError,
    annotator_for_token,
    any_accounts,
    oidc_annotator,
    open_sign_in,
    revoke_sign_in,
    sign_in,
)
from medeval_core.settings import sign_in_lifetime
from medeval_core.store import Store

COOKIE = "medeval_sign_in"
TOKEN_KEY = "annotation_sign_in_token"
"""This browser session's token: set on sign-in (the cookie is written on the next run), None after sign-out (the
cookie this session was opened with is then ignored, and deleted)."""


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
    token = _token()
    return annotator_for_token(store, token) if token else None


def _token() -> str | None:
    if TOKEN_KEY in st.session_state:
        return st.session_state[TOKEN_KEY]
    cookie = st.context.cookies.get(COOKIE)
    return cookie if isinstance(cookie, str) else None  # a script run without a browser (AppTest) has no cookies


def keep_sign_in_cookie() -> None:
    """Write this session's new sign-in token to the browser, or delete the cookie after a sign-out; call it on
    every run (the same component is not reloaded, so the script runs once per change)."""
    if TOKEN_KEY not in st.session_state or oidc_configured():
        return
    token = st.session_state[TOKEN_KEY]
    if token is None and COOKIE not in st.context.cookies:
        return
    max_age = int(sign_in_lifetime().total_seconds()) if token else 0
    cookie = json.dumps(f"{COOKIE}={token or ''}; path=/; max-age={max_age}; SameSite=Strict")
    components.html(f"""<script>
const page = window.parent;
page.document.cookie = {cookie} + (page.location.protocol === "https:" ? "; Secure" : "");
</script>""", height=0)


class Access(BaseModel):
    """What the app may show this browser session."""

    annotator: Annotator | None
    """Who is signed in (None: nobody)."""
    accounts: bool
    """Whether any annotator account exists on this deployment."""

    @property
    def must_sign_in(self) -> bool:
        """Annotator accounts exist and nobody is signed in: only the sign-in is shown, whatever the URL (every
        other page names runs and models); the page the URL names runs once signed in."""
        return self.annotator is None and self.accounts

    @property
    def queue_only(self) -> bool:
        """A clinician (not an administrator) is signed in: only the annotation queue."""
        return self.annotator is not None and not self.annotator.is_admin


def access(store: Store) -> Access:
    found = signed_in(store)
    return Access(annotator=found, accounts=found is not None or any_accounts(store))


def sign_in_form(store: Store) -> None:
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
        st.session_state[TOKEN_KEY] = open_sign_in(store, annotator, sign_in_lifetime())
        st.rerun()
    st.caption("Accounts are made by an administrator with `python -m medeval_core annotators add NAME`.")


def _sign_out(store: Store) -> None:
    token = _token()
    if token:
        revoke_sign_in(store, token)
    st.session_state[TOKEN_KEY] = None


def signed_in_box(store: Store, annotator: Annotator) -> None:
    """Who is signed in, and the button that signs this browser out (in the sidebar)."""
    with st.sidebar:
        st.caption("Signed in as")
        st.text(annotator.name)
        if oidc_configured():
            st.button("Sign out", key="annotation-sign-out", on_click=st.logout)
        else:
            st.button("Sign out", key="annotation-sign-out", on_click=_sign_out, args=(store,))


def require_annotator(store: Store, admin: bool = False) -> Annotator:
    """The signed-in annotator, or the sign-in form and nothing else (the script stops there)."""
    annotator = signed_in(store)
    if annotator is None:
        sign_in_form(store)
        st.stop()
    assert annotator is not None
    if admin and not annotator.is_admin:
        st.error("This page is for administrators; your annotation queue is on the Annotate page.")
        st.stop()
    return annotator
