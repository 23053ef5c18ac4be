"""A walkthrough's own states in real Chromium: open while used (never *running* in `runs list`), closed or deleted
by whoever holds it from its page; a closed one takes no further step."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from urllib.parse import parse_qs, urlparse

import pytest

from medeval_core.cli import main
from tests.browser_support import settle


def listed_states() -> dict[str, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["runs", "list"]) == 0
    return {line.split()[0]: line.split()[2] for line in out.getvalue().splitlines() if line.startswith("mediq")}


def start_and_ask(page, url: str) -> str:
    page.goto(f"{url}/mediq")
    page.get_by_role("button", name="Start walkthrough").click()
    page.get_by_text("0 / 10").wait_for(timeout=240_000)  # a cold server loads the patient simulator first
    settle(page)
    page.get_by_label("Your question").fill("Do you have a fever?")
    page.get_by_role("button", name="Ask", exact=True).click()
    page.get_by_text("1 / 10").wait_for()
    settle(page)
    return parse_qs(urlparse(page.url).query)["walkthrough"][0]


@pytest.mark.browser
def test_walkthrough_is_open_then_closed_or_deleted_from_its_page(streamlit_app, page, isolated_store: str) -> None:
    url = streamlit_app(MEDEVAL_DB_URL=isolated_store)
    closed = start_and_ask(page, url)
    assert listed_states() == {closed: "open"}

    page.get_by_text("Close or delete this walkthrough").click()
    settle(page)
    page.get_by_role("button", name="Close it").click()
    page.get_by_role("heading", name="Pick a case").wait_for()
    assert listed_states() == {closed: "closed"}
    # Its link still shows what it recorded, but a closed walkthrough takes no further question.
    page.goto(f"{url}/mediq?walkthrough={closed}")
    page.get_by_text("1 / 10").wait_for()
    settle(page)
    page.get_by_label("Your question").fill("Any cough?")
    page.get_by_role("button", name="Ask", exact=True).click()
    page.get_by_text("This walkthrough was closed").first.wait_for()

    deleted = start_and_ask(page, url)
    assert listed_states() == {closed: "closed", deleted: "open"}
    page.get_by_text("Close or delete this walkthrough").click()
    settle(page)
    page.get_by_text("Yes, delete everything it recorded").click()
    settle(page)
    page.get_by_role("button", name="Delete it").click()
    page.get_by_role("heading", name="Pick a case").wait_for()
    assert listed_states() == {closed: "closed"}
