"""The DDXPlus walkthrough page: a whole case through AppTest, a page reload mid-way, and a real headless Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core import context
from medeval_core.benchmarks.ddxplus import walkthrough as wt
from medeval_core.catalog import pages
from medeval_core.plaintext import literal
from medeval_core.records import RunKind, RunStatus
from medeval_core.runs import service
from tests.browser_support import settle

PAGE = str(Path(__file__).resolve().parent.parent / "medeval_core" / "benchmarks" / "ddxplus" / "page_walkthrough.py")


def open_page(query: dict[str, str] | None = None) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=60)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, app.exception
    return app


def metric(app: AppTest, label: str) -> str:
    return next(m.value for m in app.metric if m.label == label)


def ask(app: AppTest, search: str, code: str) -> None:
    app.text_input(key="ddx_search").set_value(search).run()
    app.selectbox(key="ddx_question").set_value(code).run()
    app.button(key="ddx_ask").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]


def test_page_is_catalogued() -> None:
    assert any(Path(info.path).samefile(PAGE) for info in pages())


def test_whole_walkthrough_survives_a_reload_and_is_saved() -> None:
    app = open_page()
    assert [s.value for s in app.subheader] == ["Pick a patient"]
    app.radio(key="ddx_pick_mode").set_value("index").run()
    app.number_input(key="ddx_pick_index").set_value(0).run()
    app.button(key="ddx_start").click().run()
    walk_id = app.query_params["walkthrough"]
    assert walk_id.startswith("ddxplus-")
    assert (metric(app, "Age"), metric(app, "Sex"), metric(app, "Questions asked")) == ("30", "male", "0 / 30")
    assert any("shortness of breath" in m.value.lower() or "E_66" in m.value for m in app.markdown)

    ask(app, "fever", "E_91")
    ask(app, "cough", "E_201")
    assert metric(app, "Questions asked") == "2 / 30"
    answers = [m.text[0].value for m in app.chat_message if m.name == "assistant"]
    assert answers == ["No", "No"]

    # The teacher's hint names a question not asked yet.
    app.button(key="ddx_hint").click().run()
    hint = app.info[0].value
    assert hint.startswith("KB-Bayes would ask **E\\_") and "E\\_91:" not in hint

    # A reload (a new session on the same URL) continues the same consultation.
    reloaded = open_page({"walkthrough": walk_id})
    assert metric(reloaded, "Questions asked") == "2 / 30"
    ask(reloaded, "smoke", "E_79")
    assert metric(reloaded, "Questions asked") == "3 / 30"

    reloaded.multiselect(key="ddx_differential").set_value(
        ["Acute COPD exacerbation / infection", "Bronchitis", "Pneumonia"]).run()
    reloaded.button(key="ddx_submit").click().run()
    assert not reloaded.exception, reloaded.exception
    assert "Result" in [s.value for s in reloaded.subheader]
    assert metric(reloaded, "GTPA@1") == "100.0" and metric(reloaded, "IL") == "4"
    assert metric(reloaded, "DDP") == "100.0"
    assert any(m.value == "**True pathology:** " + literal("Acute COPD exacerbation / infection")
               for m in reloaded.markdown)
    missed = [m.value for m in reloaded.markdown if m.value.startswith("- E")]
    assert any(line.startswith("- E\\_77 ") for line in missed) and not any("E\\_79 " in line for line in missed)
    assert reloaded.get("plotly_chart")

    store = context.current_store()
    run = store.get_run(walk_id)
    assert run.status == RunStatus.COMPLETED and run.benchmark == wt.BENCHMARK == "ddxplus"
    assert run.kind == RunKind.SESSION
    summary = service.stored_summary(store, walk_id)
    assert summary is not None and summary.metric("GTPA@1").value == 100.0
    (result,) = store.results(walk_id)
    assert result.output["inquired"] == ["E_91", "E_201", "E_79"]
    masses = result.output["differential"]
    assert list(masses) == ["Acute COPD exacerbation / infection", "Bronchitis", "Pneumonia"]
    assert masses == pytest.approx(wt.ranks_to_masses(list(masses)))
    turns = store.turns(walk_id, result.case_id)
    assert [t.action for t in turns] == ["intake", "ask", "ask", "ask", "differential"]
    assert [t.index for t in turns] == [0, 1, 2, 3, 4] and {t.actor for t in turns[1:]} == {"person"}
    assert set(result.scores) >= {"GTPA@1", "IL"}


def test_pick_by_pathology_and_entered_masses() -> None:
    app = open_page()
    app.radio(key="ddx_pick_mode").set_value("pathology").run()
    app.selectbox(key="ddx_pick_pathology").set_value("Croup").run()
    app.button(key="ddx_start").click().run()
    walk = wt.load(context.current_store(), wt.resources(context.current_settings()),
                   app.query_params["walkthrough"])
    assert walk.patient.pathology == "Croup"
    app.multiselect(key="ddx_differential").set_value(["Croup", "Bronchiolitis"]).run()
    app.radio(key="ddx_weights").set_value("masses").run()
    app.number_input(key="ddx_mass_Croup").set_value(0.9).run()
    app.number_input(key="ddx_mass_Bronchiolitis").set_value(0.01).run()
    app.button(key="ddx_submit").click().run()
    (result,) = context.current_store().results(app.query_params["walkthrough"])
    assert result.output["differential"] == {"Croup": 0.9, "Bronchiolitis": 0.01}
    assert result.metrics["GTPA@1"] == 100.0 and result.metrics["IL"] == 1.0


def test_unknown_walkthrough_id_offers_a_new_one() -> None:
    app = open_page({"walkthrough": "ddxplus-walk-nope"})
    assert literal("No walkthrough 'ddxplus-walk-nope' is stored") in app.warning[0].value
    assert [s.value for s in app.subheader] == ["Pick a patient"]


def test_ranks_to_masses_keeps_every_rank_above_the_threshold() -> None:
    names = [f"p{i}" for i in range(49)]
    masses = wt.ranks_to_masses(names)
    assert sum(masses.values()) == pytest.approx(1.0)
    assert min(masses.values()) > 0.0135 and masses["p0"] == max(masses.values())
    assert sorted(masses.values(), reverse=True) == list(masses.values())
    assert wt.ranks_to_masses(["a", "b"]) == pytest.approx({"a": 4 / 7, "b": 3 / 7})
    with pytest.raises(wt.WalkthroughError, match="only once"):
        wt.ranks_to_masses(["a", "a"])


@pytest.mark.browser
def test_walkthrough_in_headless_chromium(streamlit_app, page, artifacts_dir: Path) -> None:
    url = streamlit_app()
    page.goto(url)
    page.get_by_test_id("stSidebarNav").get_by_text("DDXPlus walkthrough").click()
    page.get_by_role("heading", name="Pick a patient").wait_for()
    settle(page)
    page.get_by_text("By row").click()
    settle(page)
    page.get_by_role("button", name="Start walkthrough").click()
    page.get_by_text("0 / 30").wait_for()
    settle(page)
    for number, search in enumerate(("fever", "cough", "smoke"), start=1):
        box = page.get_by_label("Search the questions")
        box.fill(search)
        box.press("Enter")
        page.get_by_text("matching)").wait_for()
        settle(page)
        page.get_by_role("button", name="Ask", exact=True).click()
        page.get_by_text(f"{number} / 30").wait_for()
        settle(page)
    assert "walkthrough=ddxplus-" in page.url
    # A reload keeps the consultation: the id in the URL brings it back from the store.
    page.reload()
    page.get_by_text("3 / 30").wait_for()
    settle(page)
    assert page.get_by_role("dialog").count() == 0, "a reload lands on the page itself, not a page-not-found dialog"
    choices = page.get_by_test_id("stMultiSelect").locator("input")
    for name in ("Acute COPD exacerbation / infection", "Bronchitis"):
        choices.click()
        choices.fill(name)
        page.get_by_role("option", name=name, exact=True).click()
        settle(page)
    page.keyboard.press("Escape")
    chosen = page.get_by_test_id("stMultiSelect").get_by_text("Bronchitis", exact=True)
    chosen.wait_for()
    settle(page)
    page.get_by_role("button", name="Submit differential").click()
    page.get_by_role("heading", name="Result").wait_for()
    page.get_by_text("True pathology:").wait_for()
    page.get_by_test_id("stPlotlyChart").wait_for()
    screenshot = artifacts_dir / "ddxplus_walkthrough.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000


def test_an_asked_question_leaves_the_picker_and_cannot_be_asked_again() -> None:
    app = open_page()
    app.radio(key="ddx_pick_mode").set_value("index").run()
    app.number_input(key="ddx_pick_index").set_value(0).run()
    app.button(key="ddx_start").click().run()
    ask(app, "fever", "E_91")
    app.text_input(key="ddx_search").set_value("fever").run()
    options = app.selectbox(key="ddx_question").options
    assert options and not any(option.startswith("E_91:") for option in options)
    # Pressing Ask again asks the question now selected, not E_91 a second time.
    app.button(key="ddx_ask").click().run()
    assert not app.error, [e.value for e in app.error]
    walk = wt.load(context.current_store(), wt.resources(context.current_settings()),
                   app.query_params["walkthrough"])
    assert len(walk.asked) == 2 and walk.asked.count("E_91") == 1
    with pytest.raises(wt.WalkthroughError, match="E_91 is already answered above"):
        wt.ask(context.current_store(), walk, "E_91_@_V_1")
    with pytest.raises(wt.WalkthroughError, match="already answered"):
        wt.ask(context.current_store(), walk, walk.patient.initial_evidence)
    assert len(walk.asked) == 2
