"""The SDBench walkthrough page: a whole case through AppTest (reload mid-way, commit, clinician grade), and a real
headless Chromium ordering two tests and committing."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core import context
from medeval_core.catalog import pages
from medeval_core.records import RunKind, RunStatus
from tests.browser_support import settle

PAGE = str(Path(__file__).resolve().parent.parent / "medeval_core" / "benchmarks" / "sdbench" / "page_walkthrough.py")


def open_page(query: dict[str, str] | None = None) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=120)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, app.exception
    return app


def send(app: AppTest, mode: str, text: str) -> None:
    app.radio(key="sd_mode").set_value(mode).run()
    app.text_area(key="sd_box").set_value(text).run()
    app.button(key="sd_send").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]


def metric(app: AppTest, label: str) -> str:
    return next(m.value for m in app.metric if m.label == label)


def test_page_is_catalogued():
    assert any(Path(info.path).samefile(PAGE) and info.title == "SDBench walkthrough"
               for info in pages())


def test_whole_case_with_a_reload_a_commit_and_a_clinician_grade():
    app = open_page()
    assert [s.value for s in app.subheader] == ["Pick a case"]
    app.text_input(key="sd_search").set_value("double vision").run()
    assert app.selectbox(key="sd_case").options == ["agentclinic-0001 (test)"]
    app.button(key="sd_start").click().run()
    walk_id = app.query_params["walkthrough"]
    assert walk_id.startswith("sdbench-")
    assert app.text[0].value.startswith("A 35-year-old female presents with double vision.")

    send(app, "questions", "Do you smoke?\nAny past medical history?")
    assert (metric(app, "Visits"), metric(app, "Visit cost")) == ("1", "$300")
    send(app, "tests", "Chest CT\nSerum lipase\nall labs")
    timeline = app.dataframe[0].value
    assert list(timeline["request"]) == ["Do you smoke?", "Any past medical history?", "Chest CT", "Serum lipase",
                                         "all labs"]
    assert "source" not in timeline.columns  # REAL / SYNTHETIC stay hidden until the commit
    assert list(timeline["code"])[2:4] == ["71250", "83690"] and list(timeline["estimated"])[2:4] == ["no", "no"]
    assert timeline["answer"][2] == "Normal, no thymoma or other masses detected."

    reloaded = open_page({"walkthrough": walk_id})  # a reload continues the same walkthrough
    assert list(reloaded.dataframe[0].value["request"]) == list(timeline["request"])
    assert metric(reloaded, "Total cost") == metric(app, "Total cost")
    send(reloaded, "tests", "Acetylcholine receptor antibodies")
    send(reloaded, "diagnosis", "Myasthenia gravis")
    assert "Result" in [s.value for s in reloaded.subheader]
    assert metric(reloaded, "Judge score") == "5 / 5" and metric(reloaded, "Correct (4-5)") == "yes"
    texts = [t.value for t in reloaded.text]
    assert "Myasthenia gravis" in texts  # the reference, as plain text
    never = [t for t in texts if t.startswith("[")]
    assert any(t.startswith("[tests] Electromyography") for t in never)
    assert not any("Chest CT" in t or "Acetylcholine" in t for t in never)
    assert list(reloaded.dataframe[0].value["source"])[2:] == ["REAL", "SYNTHETIC", "REFUSED", "REAL"]

    # form widgets are sent with the submit button
    reloaded.slider(key="sd_grade_score").set_value(4)
    reloaded.text_area(key="sd_grade_reason").set_value("Right, but <b>no</b> mention of thymoma.")
    reloaded.text_input(key="sd_grade_name").set_value("Dr Ada")
    reloaded.button(key="FormSubmitter:sd_grade_form-Save my grade").click().run()
    assert not reloaded.exception, reloaded.exception
    assert any(t.value == "Dr Ada: 4/5 - Right, but <b>no</b> mention of thymoma." for t in reloaded.text)

    store = context.current_store()
    run = store.get_run(walk_id)
    assert run.status == RunStatus.COMPLETED and run.kind == RunKind.SESSION and run.benchmark == "sdbench"
    (result,) = store.results(walk_id)
    assert result.metrics["offline_judge_score"] == 5 and result.metrics["visits"] == 1
    turns = store.turns(walk_id, result.case_id)
    assert [t.action for t in turns] == ["start", "questions", "tests", "tests", "diagnosis"]
    assert {t.actor for t in turns[1:]} == {"person"}
    judges = {j.judge_name: j for j in store.judgements(run_id=walk_id)}
    assert set(judges) == {"sdbench-offline-judge", "sdbench-clinician"}
    assert judges["sdbench-clinician"].verdict["graded_by"] == "Dr Ada"
    assert judges["sdbench-clinician"].verdict["score"] == 4


def test_unknown_walkthrough_and_empty_box():
    app = open_page({"walkthrough": "sdbench-nope"})
    assert "No walkthrough 'sdbench-nope' is stored" in app.warning[0].value
    app.button(key="sd_start").click().run()
    app.button(key="sd_send").click().run()
    assert app.error[0].value.startswith("Write something first")


@pytest.mark.browser
def test_walkthrough_in_headless_chromium(streamlit_app, page, artifacts_dir: Path) -> None:
    url = streamlit_app()
    page.goto(url)
    page.get_by_test_id("stSidebarNav").get_by_text("SDBench walkthrough").click()
    page.get_by_role("heading", name="Pick a case").wait_for()
    settle(page)
    box = page.get_by_label("Search the summaries")
    box.fill("knee")
    box.press("Enter")
    page.get_by_text("cases match.").wait_for()
    settle(page)
    page.get_by_role("button", name="Start walkthrough").click()
    page.get_by_role("heading", name="Case summary").wait_for()
    settle(page)
    page.get_by_text("Order tests", exact=True).click()
    page.get_by_placeholder("Complete blood count").wait_for()
    settle(page)
    area = page.get_by_label("One question or test per line")
    area.fill("Knee X-ray\nMRI knee")
    area.press("Control+Enter")
    settle(page)
    page.get_by_role("button", name="Send").click()
    page.get_by_test_id("stDataFrame").wait_for()
    page.get_by_text("Test cost").wait_for()
    settle(page)
    assert page.get_by_test_id("stMetricValue").nth(0).inner_text() == "0"  # tests only: no visit
    assert "walkthrough=sdbench-" in page.url
    page.get_by_text("Commit a diagnosis", exact=True).click()
    diagnosis = page.get_by_label("Diagnosis", exact=True)
    diagnosis.fill("Pes anserine bursitis")
    diagnosis.press("Control+Enter")
    settle(page)
    page.get_by_role("button", name="Commit diagnosis").click()
    page.get_by_role("heading", name="Result").wait_for()
    page.get_by_text("Reference diagnosis", exact=True).wait_for()
    page.get_by_text("Pes anserine bursitis", exact=True).first.wait_for()
    page.get_by_role("heading", name="Findings you never asked for").wait_for()
    screenshot = artifacts_dir / "sdbench_walkthrough.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000


def test_llm_walkthrough_restores_stored_answers_without_asking_again(monkeypatch, data_dir):
    import json

    from medeval_core.benchmarks.sdbench import walkthrough as wt
    from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply

    def model(request: RecordedRequest) -> Reply:
        messages = request.body["messages"]
        if messages[0]["content"].startswith("You grade"):
            return Reply(content=json.dumps({"score": 4, "reasoning": "Core disease right."}))
        asked = [line.split(". ", 1)[1] for line in messages[-1]["content"].splitlines()[1:]]
        return Reply(content=json.dumps({"results": [{"request": r, "result": f"{r}: normal.", "source": "SYNTHETIC"}
                                                     for r in asked]}))

    with FakeOpenAI(model) as server:
        for role in ("GATEKEEPER", "SDBENCH_JUDGE"):
            monkeypatch.setenv(f"MEDEVAL_{role}_BASE_URL", server.url)
            monkeypatch.setenv(f"MEDEVAL_{role}_MODEL", "fake")
        context.reset()
        settings, store = context.current_settings(), context.current_store()
        source = wt.case_sources(settings)["AgentClinic MedQA"]
        walk_id = wt.start(store, settings, source, "agentclinic-0001")
        walk = wt.load(store, settings, walk_id)
        assert walk.params.gatekeeper == "llm" and walk.params.judge == "llm"
        wt.act(walk, "tests", "Serum lipase")
        assert len(server.chat_requests()) == 1
        again = wt.load(store, settings, walk_id)  # a reload: the stored answer comes back, no new request
        assert [row.answer for row in wt.timeline(again, reveal=False)] == ["Serum lipase: normal."]
        assert len(server.chat_requests()) == 1
        wt.act(again, "tests", "TSH")
        history = server.chat_requests()[1].body["messages"]
        assert "Serum lipase: normal." in history[2]["content"]  # the restored exchange is in the conversation
        wt.act(again, "diagnosis", "Myasthenia gravis")
        assert again.result is not None and again.result.metrics["llm_judge_score"] == 4
        assert store.get_run(walk_id).status == RunStatus.COMPLETED
