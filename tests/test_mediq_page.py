"""The MEDIQ walkthrough page: a whole case through AppTest with a reload mid-way, the LLM expert's questions
over HTTP, and a real headless Chromium run that saves a screenshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core import context
from medeval_core.benchmarks.mediq.patients import REFUSAL
from medeval_core.catalog import pages
from medeval_core.records import RunKind, RunStatus
from medeval_core.runs import service
from tests.browser_support import settle
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply

PAGE = str(Path(__file__).resolve().parent.parent / "medeval_core" / "benchmarks" / "mediq" / "page_walkthrough.py")


def open_page(query: dict[str, str] | None = None) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=120)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, app.exception
    return app


def ask(app: AppTest, question: str) -> None:
    app.text_input(key="mediq_question").set_value(question)
    next(button for button in app.button if button.label == "Ask").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]


def texts(app: AppTest) -> list[str]:
    return [element.value for element in app.text]


def test_page_is_catalogued():
    assert any(Path(info.path).samefile(PAGE) for info in pages())


def test_whole_case_survives_a_reload_and_is_saved():
    app = open_page()
    assert [s.value for s in app.subheader] == ["Pick a case"]
    app.selectbox(key="mediq_case").set_value("3").run()
    app.button(key="mediq_start").click().run()
    walk_id = app.query_params["walkthrough"]
    assert walk_id.startswith("mediq-")
    assert any(t.startswith("A 37-year-old female") for t in texts(app))
    assert "B: Obtain a urine analysis and urine culture" in texts(app)

    ask(app, "Do you have a fever?")
    ask(app, "Have you travelled abroad recently?")
    assert "She is complaining of blood in her urine, left-sided flank pain, nausea, and fever." in texts(app)
    assert REFUSAL in texts(app)
    assert next(m.value for m in app.metric if m.label == "Questions asked") == "2 / 10"

    reloaded = open_page({"walkthrough": walk_id})
    assert next(m.value for m in reloaded.metric if m.label == "Questions asked") == "2 / 10"
    ask(reloaded, "What is your blood pressure?")
    reloaded.selectbox(key="mediq_option").set_value("B").run()
    reloaded.button(key="mediq_choose").click().run()
    assert not reloaded.exception, reloaded.exception
    assert reloaded.success[0].value == "Correct: you chose B."
    assert "B: Obtain a urine analysis and urine culture" in texts(reloaded)
    assert "- She has tenderness on the left costovertebral angle." in texts(reloaded)
    assert "- Her blood pressure is 114/82 mmHg." not in texts(reloaded)

    store = context.current_store()
    run = store.get_run(walk_id)
    assert run.status == RunStatus.COMPLETED and run.kind == RunKind.SESSION and run.benchmark == "mediq"
    (result,) = store.results(walk_id)
    assert result.output["questions"] == ["Do you have a fever?", "Have you travelled abroad recently?",
                                          "What is your blood pressure?"]
    assert result.output["correct"] is True and result.output["facts_used"] == [[2], [], [5]]
    turns = store.turns(walk_id, "3")
    assert [t.action for t in turns] == ["start", "question", "question", "question", "choice"]
    assert {t.actor for t in turns[1:]} == {"person"} and turns[2].payload["refused"] is True
    assert service.stored_summary(store, walk_id).metric("accuracy").value == 1.0


def test_mismatched_answer_text_is_said_and_the_llm_expert_is_shown(monkeypatch):
    def expert(request: RecordedRequest) -> Reply:
        text = request.text()
        if "scale of 1 to 5" in text:
            return Reply(content=json.dumps({"confidence": 5 if "Doctor:" in text else 1}))
        if 'Reply {"question"' in text:
            return Reply(content=json.dumps({"question": "Where are the lesions?"}))
        return Reply(content=json.dumps({"choice": "A"}))

    app = open_page()
    app.radio(key="mediq_dataset").set_value("icraftmd").run()
    app.selectbox(key="mediq_case").set_value("129").run()
    app.button(key="mediq_start").click().run()
    app.selectbox(key="mediq_option").set_value("A").run()
    app.button(key="mediq_choose").click().run()
    assert "differs from the text of its answer option" in app.warning[0].value
    assert "'Pemphigus foliaceous'" in texts(app)
    app.button(key="mediq_expert").click().run()
    assert "No expert model is configured" in app.info[0].value
    with FakeOpenAI(expert) as server:
        monkeypatch.setenv("MEDEVAL_EXPERT_BASE_URL", server.url)
        monkeypatch.setenv("MEDEVAL_EXPERT_MODEL", "fake-expert")
        context.reset()  # the settings are read again, with the expert role; the store is the same file
        app.button(key="mediq_expert").click().run()
        assert not app.exception, app.exception
        assert len(server.chat_requests()) == 4  # scale, question, scale, choice
    assert any("**The LLM expert** asked 1 questions and chose A" in m.value for m in app.markdown)
    assert any(t.startswith("Q: Where are the lesions?") for t in texts(app))


def test_unknown_walkthrough_offers_a_new_one():
    app = open_page({"walkthrough": "mediq-nope"})
    assert "No MEDIQ walkthrough 'mediq-nope' is stored" in app.warning[0].value
    assert [s.value for s in app.subheader] == ["Pick a case"]


@pytest.mark.browser
def test_mediq_case_in_headless_chromium(streamlit_app, page, artifacts_dir: Path) -> None:
    url = streamlit_app()
    page.goto(f"{url}/mediq")
    page.get_by_role("heading", name="Pick a case").wait_for()
    settle(page)
    page.get_by_role("button", name="Start walkthrough").click()
    page.get_by_text("0 / 10").wait_for()
    settle(page)
    for number, question in enumerate(("Do you have a fever?", "What is your blood pressure?"), start=1):
        box = page.get_by_label("Your question")
        box.fill(question)
        page.get_by_role("button", name="Ask", exact=True).click()
        page.get_by_text(f"{number} / 10").wait_for()
        settle(page)
    assert "walkthrough=mediq-" in page.url
    page.reload()
    page.get_by_text("2 / 10").wait_for()
    page.get_by_text("Her blood pressure is 114/82 mmHg.").wait_for()
    settle(page)
    page.get_by_role("button", name="Choose", exact=True).click()
    page.get_by_role("heading", name="Result").wait_for()
    page.get_by_text("Facts you never uncovered").wait_for()
    screenshot = artifacts_dir / "mediq_walkthrough.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
