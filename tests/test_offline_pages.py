"""No page asks for anything outside the machine (issue 19, item 6): a clinical workbench runs on closed networks.

Every page of the catalogue is opened in Chromium, first by its URL and then through the navigation menu, with
every request the browser makes logged; each must go to the app's own 127.0.0.1 server. Requests elsewhere are
answered with an abort, so a regression shows as a failure here, not as a hang. Streamlit 1.67 turns a
``:material/...:`` page icon into a favicon fetched from fonts.gstatic.com; the app's icon is a local file.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from medeval_core.catalog import pages

pytestmark = pytest.mark.browser


def test_every_page_requests_only_the_local_server(streamlit_app: Callable[..., str], page: object) -> None:
    url = streamlit_app()
    requested: list[str] = []

    def log(route: object) -> None:
        request_url = route.request.url  # type: ignore[attr-defined]
        requested.append(request_url)
        host = urlsplit(request_url).hostname
        if request_url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()  # type: ignore[attr-defined]
        else:
            route.abort()  # type: ignore[attr-defined]

    page.route("**/*", log)  # type: ignore[attr-defined]
    catalogue = pages()
    finished = '[data-testid="stApp"][data-test-script-state="notRunning"]'
    for info in catalogue:
        page.goto(f"{url}/{info.url_path}")  # type: ignore[attr-defined]
        page.get_by_test_id("stSidebarNav").wait_for()  # type: ignore[attr-defined]
        page.locator(finished).wait_for()  # type: ignore[attr-defined]
    for info in catalogue:
        page.get_by_test_id("stSidebarNav").get_by_text(info.title, exact=True).click()  # type: ignore[attr-defined]
        page.wait_for_url(url + ("/" if info.url_path == "home" else f"/{info.url_path}"))  # type: ignore[attr-defined]
        page.locator(finished).wait_for()  # type: ignore[attr-defined]
    page.wait_for_load_state("networkidle")  # type: ignore[attr-defined]
    outside = sorted({address for address in requested
                      if not address.startswith(("data:", "blob:")) and urlsplit(address).hostname != "127.0.0.1"})
    assert outside == [], f"requests outside the machine: {outside}"
    # The log is real: the app's own pages, scripts and websocket handshake went through it.
    assert len(requested) > len(catalogue) and any("/static/" in address for address in requested)
