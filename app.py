"""medeval: navigation and the global status sidebar. The generic pages live in pages/, a benchmark's own pages in
its package (medeval_core/benchmarks/NAME/page_*.py); medeval_core/catalog.py lists both (the core pages plus each
benchmark spec's pages). Every page calls one controller module of medeval_core and never the store.

Streamlit treats a pages/ folder beside the entry point as a legacy multipage app until st.navigation has run
once, so under a plain `streamlit run` a cold deep link (e.g. /runs) would open the page without this shell: the app
is served by `python -m medeval_core serve` (what `make run` calls), which turns that mode off first.
"""

from pathlib import Path

import streamlit as st
from pydantic import BaseModel

from medeval_core.annotation.gate import Access, access, keep_sign_in_cookie, sign_in_form, signed_in_box
from medeval_core.catalog import ANNOTATION_PAGES, ANNOTATOR_PAGES, pages
from medeval_core.context import current_settings, current_store
from medeval_core.plaintext import literal
from medeval_core.registry import PageInfo
from medeval_core.settings import SettingsError
from medeval_core.status import (
    BackendStatus,
    DataRow,
    StoreStatus,
    backends_status,
    data_status_rows,
    store_status,
)

LOGO = str(Path(__file__).parent / "assets" / "logo.svg")
# A file, not a ":material/...:" icon: Streamlit fetches a Material favicon from fonts.gstatic.com, and the app must
# work on a closed network without asking anything outside the machine (tests/test_offline_pages.py).
st.set_page_config(page_title="medeval", page_icon=LOGO, layout="wide")
st.logo(LOGO)


def current_access() -> Access:
    try:
        return access(current_store())
    except Exception:  # noqa: BLE001 - whatever keeps the store from opening, the sidebar's store status reports
        return Access(annotator=None, accounts=False)


def page_of(info: PageInfo) -> st.Page:
    return st.Page(info.path, title=info.title, icon=info.icon, url_path=info.url_path,
                   default=info.url_path == "home")


# Annotation is blinded: a signed-in clinician, and anyone not signed in once annotator accounts exist, get no
# navigation menu and no sidebar status (they name runs and models). A sign-in outlives the browser session (see
# gate.py), so a reload or a new tab stays signed in; signed out, every URL shows only the sign-in, and the page it
# names runs once signed in (a deep link is kept).
gate = current_access()
blinded = gate.must_sign_in or gate.queue_only
if gate.must_sign_in:
    navigation = st.navigation([page_of(info) for info in pages()], position="hidden")
elif gate.queue_only:
    queue = [st.Page(info.path, title=info.title, icon=info.icon, url_path=info.url_path) for info in ANNOTATOR_PAGES]

    def to_the_queue() -> None:
        st.switch_page(queue[0])

    # Every other page's URL leads to the queue, so a link a clinician follows never ends on "Page not found".
    elsewhere = [st.Page(to_the_queue, title=info.title, url_path=info.url_path, default=info.url_path == "home")
                 for info in pages() if info not in ANNOTATOR_PAGES]
    navigation = st.navigation([*elsewhere, *queue], position="hidden")
else:
    sections: dict[str, list] = {}
    for info in pages():
        sections.setdefault(info.section, []).append(page_of(info))
    navigation = st.navigation(sections)
keep_sign_in_cookie()
if gate.must_sign_in:
    sign_in_form(current_store())
    st.stop()
if gate.annotator is not None:
    signed_in_box(current_store(), gate.annotator)


class SidebarStatus(BaseModel):
    """What the sidebar shows, read apart from drawing it, so that a status the page left unchanged is not sent to
    the browser a second time."""

    settings_error: str | None = None
    store: StoreStatus | None = None
    data: list[DataRow] = []
    backends: list[BackendStatus] = []


def read_status() -> SidebarStatus:
    try:
        settings = current_settings()
    except SettingsError as exc:
        return SidebarStatus(settings_error=str(exc))
    return SidebarStatus(store=store_status(settings), data=data_status_rows(settings),
                         backends=backends_status(settings))


def show_status(status: SidebarStatus) -> None:
    if status.store is None:
        st.error(f"Settings could not be loaded: {literal(status.settings_error)}")
        return
    store = status.store
    st.subheader("Store")
    if store.reachable:
        st.caption(f"{literal(store.url)}  \n{store.counts.get('runs', 0)} runs, "
                   f"{store.counts.get('case_results', 0)} case results")
    else:
        st.error(f"The store at {literal(store.url)} cannot be opened: {literal(store.error)}. Check "
                 "MEDEVAL_DB_URL.")
    # One markdown element per list: each element is a message the browser lays out before the page is usable.
    st.subheader("Data")
    st.markdown("  \n".join(f"{row.icon} **{literal(row.name)}**: {literal(row.state)}" for row in status.data))
    st.subheader("Models")
    st.markdown("  \n".join(
        f"{':material/check_circle:' if backend.working else ':material/cancel:'} **{literal(backend.role)}**: "
        f"{literal(f'{backend.backend} {backend.model}'.strip())}"
        for backend in status.backends))


# Drawn before the page (so it is there even when a page ends with st.stop()) and drawn again after it when the page
# changed it, so the counts include what the page just saved. Never on an annotation page: before sign-in it shows
# only the sign-in, and the status names models.
with_status = not blinded and navigation.url_path not in {info.url_path for info in ANNOTATION_PAGES}
status_slot = st.sidebar.empty()
shown = read_status() if with_status else None
if shown is not None:
    with status_slot.container():
        show_status(shown)
navigation.run()
if shown is not None and (status_now := read_status()) != shown:
    with status_slot.container():
        show_status(status_now)
