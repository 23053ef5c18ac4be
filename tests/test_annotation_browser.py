"""Annotation in real headless Chromium against a real Streamlit server: two annotators sign in, the first completes
three pairwise items (one click per criterion) and reloads mid-task, and nothing either can reach in the browser
(page HTML, URL, navigation) shows a run or model name or the other annotator's choices."""

from __future__ import annotations

from pathlib import Path

import pytest

from medeval_core.annotation import answers
from medeval_core.annotation.report import task_report
from medeval_core.context import current_store
from tests.annotation_fixtures import PASSCODES, SECRET_NAMES, SeededRuns, create_task
from tests.browser_support import settle

pytest_plugins = ("tests.annotation_seeded",)

CHOICES = ("Response 1 is better", "Tie", "Response 2 is better")
CHOSEN = '[data-testid="stBaseButton-primary"]'


def sign_in(page, url: str, name: str) -> None:
    page.goto(f"{url}/annotate")
    page.get_by_role("heading", name="Sign in to annotate").wait_for()
    assert page.get_by_text("Models").count() == 0  # before sign-in, the page is only the sign-in
    page.get_by_label("Name").fill(name)
    page.get_by_label("Passcode").fill(PASSCODES[name])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Annotate").wait_for()


def assert_blind(page) -> None:
    html = page.content().lower()
    leaked = [name for name in SECRET_NAMES if name.lower() in html or name.lower() in page.url.lower()]
    assert not leaked, f"the annotator's page shows {leaked}"


@pytest.mark.browser
def test_two_annotators_blinded_pairwise_in_chromium(streamlit_app, browser, page, seeded: SeededRuns,
                                                     isolated_store: str, artifacts_dir: Path) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators",
                       "dr.ada,dr.bo", "--seed", "12")
    url = streamlit_app(MEDEVAL_DB_URL=isolated_store)
    page.set_viewport_size({"width": 1366, "height": 1400})  # a laptop's width; tall so the screenshot is whole
    sign_in(page, url, "dr.ada")
    page.get_by_text("0 of 6 done · item 1 of 6").wait_for()
    # A signed-in clinician's app is only the queue: no navigation to the runs page, no model list in the sidebar.
    assert page.get_by_text("Batch runs").count() == 0 and page.get_by_text("Models").count() == 0
    assert page.url.endswith("/annotate")
    for number in range(1, 4):
        for criterion, label in enumerate(CHOICES):
            page.get_by_role("button", name=label, exact=True).nth(criterion).click()
            if criterion < len(CHOICES) - 1:
                # The click's rerun is drawn and done before the next click, as a clinician reading the page
                # would (clicks during a rerun are tests/test_annotation_pages.py's and the keyboard test's).
                page.locator(CHOSEN).nth(criterion).wait_for()
                settle(page)
        page.get_by_text(f"{number} of 6 done · item {number + 1} of 6").wait_for()
        settle(page)
        assert_blind(page)
    # The lesion image of the next item is shown (loaded, not a broken link).
    image = page.get_by_test_id("stImage").locator("img").first
    image.wait_for()
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    screenshot = artifacts_dir / "annotation_pairwise.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000

    # Typing another page's URL keeps the sign-in (a cookie naming a token in the store) but a clinician's app is
    # only the queue: the runs page's URL leads back to it.
    page.goto(f"{url}/runs")
    page.get_by_role("heading", name="Annotate").wait_for()
    assert page.url.endswith("/annotate")
    assert page.get_by_text("Batch runs").count() == 0 and page.get_by_text("Models").count() == 0
    assert_blind(page)

    # A reload mid-task stays signed in and resumes at the first open item.
    page.reload()
    page.get_by_text("3 of 6 done · item 4 of 6").wait_for()
    assert page.get_by_label("Passcode").count() == 0

    # The second annotator, in a browser context of their own, sees the same items with nothing chosen.
    other_context = browser.new_context(viewport={"width": 1366, "height": 1400})
    other = other_context.new_page()
    other.set_default_timeout(60_000)
    try:
        sign_in(other, url, "dr.bo")
        other.get_by_text("0 of 6 done · item 1 of 6").wait_for()
        assert other.locator(CHOSEN).count() == 0
        assert_blind(other)
    finally:
        other_context.close()

    # An administrator who signs in gets the whole workbench back, results included.
    admin_context = browser.new_context(viewport={"width": 1366, "height": 1400})
    admin = admin_context.new_page()
    admin.set_default_timeout(60_000)
    try:
        sign_in(admin, url, "admin.eve")
        admin.get_by_test_id("stSidebarNav").get_by_text("Annotation results").click()
        admin.get_by_role("heading", name="Annotation results").wait_for()
        # Unblinded for the administrator (the data grid draws on a canvas; its cells are in the DOM, hidden).
        admin.get_by_text("DDI open: model run · vlm-alpha-7b", exact=True).first.wait_for(state="attached")
        assert admin.get_by_test_id("stSidebarNav").get_by_text("Batch runs").count() == 1
    finally:
        admin_context.close()

    report = task_report(current_store(), task["id"])
    assert report.current_answers == 9 and report.assignments_done == 3
    assert [w.a_wins + w.b_wins + w.ties for w in report.win_rates] == [3, 3, 3]
    assert [w.ties for w in report.win_rates] == [0, 3, 0]


@pytest.mark.browser
def test_keyboard_shortcuts_answer_and_skip_in_chromium(streamlit_app, page, seeded: SeededRuns,
                                                        isolated_store: str) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators", "dr.ada",
                       "--seed", "12")
    url = streamlit_app(MEDEVAL_DB_URL=isolated_store)
    page.set_viewport_size({"width": 1366, "height": 1400})
    sign_in(page, url, "dr.ada")
    criteria = task["criteria"]
    store = current_store()
    first, second, third = (item.item_id for item in answers.my_items(store, "dr.ada", task["id"])[:3])

    def keys_answer(item_id: str, criterion: str) -> None:
        """Wait until the page's listener is this rerun's (its component loads after the rest of the page)."""
        page.wait_for_function("(widget) => Object.values(window.medevalShortcutTargets || {}).includes(widget)",
                               arg=f"choose-{item_id}-{criterion}-left")

    # The keys are shown for the criterion they answer, and each press is one stored answer, in order: keys typed
    # faster than the page reruns answer the next criteria, not the one just answered again.
    page.get_by_text(f"Keys for {criteria[0]}: 1 Response 1 is better · T Tie · 2 Response 2 is better · "
                     "S skip item").wait_for()
    keys_answer(first, criteria[0])
    for key in ("1", "t", "2"):
        page.keyboard.press(key)
    page.get_by_text("1 of 6 done · item 2 of 6").wait_for()
    keys_answer(second, criteria[0])
    page.keyboard.press("s")
    page.get_by_text("1 of 6 done · item 3 of 6 · 1 skipped or flagged").wait_for()
    # A key typed into a text field is text, not a choice; out of it, the key answers again.
    settle(page)
    page.get_by_label("Comment (optional)").type("2")
    page.evaluate("document.activeElement.blur()")  # leaving the field saves the comment
    settle(page)
    keys_answer(third, criteria[0])
    page.keyboard.press("1")
    page.get_by_text(f"Keys for {criteria[1]}").wait_for()

    rows = [(r.criterion, r.value) for r in store.annotations(task["id"])]
    assert rows == [*zip(criteria, ("left", "tie", "right"), strict=True), ("skip", "skipped"), ("comment", "2"),
                    (criteria[0], "left")]
