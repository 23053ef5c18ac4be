"""A sign-in outlives the browser session in real Chromium: a reload and a new tab stay signed in, a deep link
opened signed out lands on its page after sign-in, and a revoked, expired or signed-out sign-in asks again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import select

from medeval_core.annotation.accounts import revoke_sign_ins
from medeval_core.annotation.gate import COOKIE
from medeval_core.context import current_store
from medeval_core.records import utc_now
from medeval_core.store.annotation_tables import SignInSessionRow
from tests.annotation_fixtures import PASSCODES, SeededRuns
from tests.browser_support import settle

pytest_plugins = ("tests.annotation_seeded",)

SIGN_IN = "Sign in to annotate"


def fill_sign_in(page, name: str) -> None:
    page.get_by_role("heading", name=SIGN_IN).wait_for()
    settle(page)
    page.get_by_label("Name").fill(name)
    page.get_by_label("Passcode").fill(PASSCODES[name])
    page.get_by_role("button", name="Sign in").click()


def cookie_value(page) -> str | None:
    found = [cookie["value"] for cookie in page.context.cookies() if cookie["name"] == COOKIE]
    return found[0] if found and found[0] else None


def wait_for_cookie(page) -> str:
    page.wait_for_function(f"() => document.cookie.includes('{COOKIE}=') && "
                           f"!document.cookie.includes('{COOKIE};') && !document.cookie.endsWith('{COOKIE}=')")
    value = cookie_value(page)
    assert value is not None
    return value


@pytest.mark.browser
def test_sign_in_survives_reload_and_new_tab_and_keeps_the_deep_link(streamlit_app, page, seeded: SeededRuns,
                                                                       isolated_store: str) -> None:
    url = streamlit_app(MEDEVAL_DB_URL=isolated_store)
    # A deep link opened signed out: only the sign-in, then the page the link names.
    page.goto(f"{url}/ddxplus")
    fill_sign_in(page, "admin.eve")
    page.get_by_role("heading", name="DDXPlus walkthrough").wait_for()
    settle(page)
    assert page.url.endswith("/ddxplus")
    token = wait_for_cookie(page)
    assert PASSCODES["admin.eve"] not in token  # the browser keeps a random token, never the passcode
    store = current_store()
    with store.session() as session:
        stored = session.exec(select(SignInSessionRow)).all()
    assert [row.annotator for row in stored] == ["admin.eve"] and token not in {row.token_hash for row in stored}

    page.reload()
    page.get_by_role("heading", name="DDXPlus walkthrough").wait_for()
    settle(page)
    assert page.get_by_role("heading", name=SIGN_IN).count() == 0

    tab = page.context.new_page()
    tab.goto(f"{url}/runs")
    tab.get_by_role("heading", name="Batch runs").wait_for()
    assert tab.get_by_test_id("stSidebarNav").get_by_text("Annotation results").count() == 1
    tab.close()

    # Revoked from the CLI's function: the next load asks again.
    assert revoke_sign_ins(store, "admin.eve") == 1
    page.reload()
    fill_sign_in(page, "admin.eve")
    page.get_by_role("heading", name="DDXPlus walkthrough").wait_for()
    settle(page)
    wait_for_cookie(page)

    # Expired: the next load asks again.
    with store.session() as session:
        for row in session.exec(select(SignInSessionRow).where(SignInSessionRow.revoked_at == None)):  # noqa: E711
            row.expires_at = utc_now() - timedelta(minutes=1)
            session.add(row)
        session.commit()
    page.reload()
    fill_sign_in(page, "admin.eve")
    page.get_by_role("heading", name="DDXPlus walkthrough").wait_for()
    settle(page)
    wait_for_cookie(page)

    # Signing out ends it in this browser: the cookie is deleted and a reload asks again.
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("heading", name=SIGN_IN).wait_for()
    settle(page)
    page.wait_for_function(f"() => !document.cookie.includes('{COOKIE}=')")
    page.reload()
    page.get_by_role("heading", name=SIGN_IN).wait_for()
    settle(page)
