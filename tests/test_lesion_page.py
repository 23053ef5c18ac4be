"""The lesion page: AppTest with the tiny Qwen2.5-VL and the offline judge, and a real headless Chromium run."""

from __future__ import annotations

import json
import shutil
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core import context
from medeval_core.benchmarks.ddi.images import DEFAULT_LIMITS
from medeval_core.benchmarks.ddi.interactive import CANCELLED
from medeval_core.cli import main
from medeval_core.plaintext import literal
from medeval_core.settings import DEFAULT_CONFIG_DIR
from medeval_core.store import Store
from tests.browser_support import settle
from tests.fake_openai import FakeOpenAI, Reply
from tests.tiny_qwen import tiny_qwen  # noqa: F401 - session fixture

PAGE = str(Path(__file__).resolve().parent.parent / "medeval_core" / "benchmarks" / "ddi" / "page_lesion.py")
LESION = "ISIC_0000002.jpg"


def short_generation_configs(folder: Path) -> Path:
    """The protocol configs with few new tokens, so the random tiny model answers quickly on a CPU."""
    shutil.copytree(DEFAULT_CONFIG_DIR, folder)
    evaluation = json.loads((folder / "evaluation.json").read_text())
    evaluation["max_new_tokens"] = 8
    (folder / "evaluation.json").write_text(json.dumps(evaluation))
    return folder


@pytest.fixture(scope="session")
def tiny_model_env(tiny_qwen: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # noqa: F811
    return {
        "MEDEVAL_VLM_BACKEND": "transformers",
        "MEDEVAL_VLM_MODEL": str(tiny_qwen),
        "MEDEVAL_CONFIG_DIR": str(short_generation_configs(tmp_path_factory.mktemp("configs") / "configs")),
    }


@pytest.fixture
def with_tiny_model(tiny_model_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in tiny_model_env.items():
        monkeypatch.setenv(key, value)
    context.reset()


def open_page() -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not app.exception, app.exception
    return app


def run_button(app: AppTest):
    return next(b for b in app.button if b.label == "Run")


def test_upload_run_with_tiny_model_and_offline_judge(
    with_tiny_model: None, tiny_model_env: dict[str, str], data_dir: Path
) -> None:
    app = open_page()
    assert not app.info, "a configured model needs no setup hint"
    app.file_uploader(key="lesion_upload").upload(LESION, (data_dir / "lesions" / LESION).read_bytes(), "image/jpeg")
    app.run()
    assert app.get("image")[0].proto.imgs[0].caption == literal(f"{LESION}: 1022x767 JPEG")  # the preview
    app.text_input(key="lesion_reference").set_value("melanoma")
    run_button(app).click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    assert "Result" in [s.value for s in app.subheader]
    verdict_text = " ".join(t.value for t in app.text)
    assert "Incorrect against 'melanoma'" in verdict_text or "Correct against 'melanoma'" in verdict_text
    assert app.status[0].label == "Done"  # the progress box of the run
    assert any("offline\\-rules\\-v1" in c.value for c in app.caption)  # shown as literal text

    store = context.current_store()
    (run,) = [r for r in store.list_runs(benchmark="ddi") if r.label == "Lesion page (open)"]
    assert run.status == "completed" and run.settings_hash
    params = run.config["params"]
    assert params["stage"] == "interactive" and params["model"] == tiny_model_env["MEDEVAL_VLM_MODEL"]
    assert params["generation"]["max_new_tokens"] == 8
    assert "melanoma" not in json.dumps(params["prompt"])  # the reference is not part of the model's prompt
    (result,) = store.results(run.id)
    assert result.output["response_source"] == "model"
    assert result.output["image"]["name"] == LESION and result.output["image"]["width"] == 1022
    assert result.output["model"]["workers"][0]["attention"] == "sdpa"
    (judgement,) = store.judgements(run_id=run.id)
    assert judgement.ok and judgement.judge_name == "offline-rules-v1"
    assert run.kind == "session" and run.config["session_case_id"] == "lesion"
    (call,) = store.model_calls(run_id=run.id)  # the tested model's one call, as role vlm
    assert call.role == "vlm" and call.model == tiny_model_env["MEDEVAL_VLM_MODEL"]
    assert result.metrics["correct"] == judgement.verdict["correct"]
    assert "This session's evaluations" in [s.value for s in app.subheader]
    assert len(app.dataframe[0].value) == 1


def test_without_a_model_the_page_explains_setup_and_judges_a_pasted_answer() -> None:
    app = open_page()
    setup_hint = app.info[0].value.replace("\\", "")
    assert "Models** page" in setup_hint
    assert "MEDEVAL_VLM_MODEL" in setup_hint and "MEDEVAL_VLM_BASE_URL" in setup_hint
    app.text_input(key="lesion_reference").set_value("basal-cell-carcinoma-nodular")
    app.text_area(key="lesion_pasted").set_value("Pearly papule with telangiectasia.\nFinal diagnosis: nodular BCC")
    run_button(app).click().run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    verdict_text = " ".join(t.value for t in app.text)
    assert "Correct against 'basal-cell-carcinoma-nodular'" in verdict_text

    # A second evaluation: classification, pasted, scored in the label space; both appear in the session list.
    app.radio(key="lesion_mode").set_value("classification").run()
    app.selectbox(key="lesion_reference_label").set_value("Melanoma")
    app.text_area(key="lesion_pasted").set_value("Asymmetric, multicoloured.\nFinal diagnosis: Melanoma")
    run_button(app).click().run()
    assert not app.exception and not app.error
    assert "Correct against 'Melanoma'" in " ".join(t.value for t in app.text)
    rows = app.dataframe[0].value
    assert list(rows["task"]) == ["classification", "open"]
    assert list(rows["judge"]) == ["exact-label", "offline-rules-v1"]
    stored = [r for r in context.current_store().list_runs(benchmark="ddi") if r.label.startswith("Lesion page")]
    assert len(stored) == 2


def test_a_page_evaluation_cannot_be_resumed_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    app = open_page()
    app.text_area(key="lesion_pasted").set_value("Final diagnosis: psoriasis")
    run_button(app).click().run()
    (run,) = context.current_store().list_runs(benchmark="ddi")
    assert run.kind == "session"
    assert main(["resume", run.id]) == 2
    assert "interactive session" in capsys.readouterr().err


def test_without_a_model_or_a_pasted_answer_the_run_says_what_to_do() -> None:
    app = open_page()
    run_button(app).click().run()
    assert not app.exception
    assert "Upload a lesion image first" in app.error[0].value


def test_a_bad_upload_gets_a_clear_message(with_tiny_model: None) -> None:
    app = open_page()
    app.file_uploader(key="lesion_upload").upload("lesion.jpg", b"GIF89a definitely not a jpeg", "image/jpeg")
    app.run()
    assert not app.exception
    assert "is not an image file" in app.error[0].value or "GIF" in app.error[0].value


@pytest.mark.browser
def test_lesion_page_in_headless_chromium(
    streamlit_app: Callable[..., str], page: Any, artifacts_dir: Path, data_dir: Path, tiny_model_env: dict[str, str]
) -> None:
    url = streamlit_app(**tiny_model_env)
    page.goto(f"{url}/lesion")  # a cold deep link lands on the page inside the app shell
    page.get_by_role("heading", name="Lesion diagnosis").wait_for()
    settle(page)
    page.get_by_test_id("stSidebarNav").get_by_text("Benchmarks").wait_for()
    page.locator("input[type='file']").set_input_files(str(data_dir / "lesions" / LESION))
    page.get_by_text(f"{LESION}: 1022x767 JPEG").wait_for()
    settle(page)
    reference = page.get_by_label("Reference diagnosis (optional, given only to the judge)")
    reference.fill("melanoma")
    reference.press("Enter")
    settle(page)
    page.get_by_role("button", name="Run").click()
    page.get_by_text("Judge verdict").wait_for()
    page.get_by_text("Saved as run").wait_for()
    assert page.get_by_text("against 'melanoma'").first.is_visible()
    page.get_by_test_id("stDataFrame").wait_for()
    page.get_by_role("heading", name="Store").wait_for()  # the app shell's sidebar is there too
    screenshot = artifacts_dir / "lesion_diagnosis.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 20_000


def test_the_uploader_limit_is_the_image_check_limit() -> None:
    config = tomllib.loads((Path(__file__).resolve().parent.parent / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] * 1024 * 1024 == DEFAULT_LIMITS.max_bytes


MARKDOWN_ANSWER = ("See [the atlas](https://evil.example/phish) and ![tracker](http://127.0.0.1:9/beacon.png) "
                   "<img src=x onerror=alert(1)> **bold**\nFinal diagnosis: melanoma")
MARKDOWN_REFERENCE = "melanoma ![ref](http://127.0.0.1:9/ref-beacon.png)"


def markdown_bodies(app: AppTest) -> list[str]:
    """Every string the page hands to Streamlit as Markdown (markdown, captions, alerts)."""
    return [e.value for kind in (app.markdown, app.caption, app.error, app.warning, app.info, app.success)
            for e in kind]


def test_model_and_user_text_is_shown_as_plain_text() -> None:
    app = open_page()
    app.text_input(key="lesion_reference").set_value(MARKDOWN_REFERENCE)
    app.text_area(key="lesion_pasted").set_value(MARKDOWN_ANSWER)
    run_button(app).click().run()
    assert not app.exception, app.exception
    texts = [t.value for t in app.text]
    assert MARKDOWN_ANSWER in texts  # the response, verbatim
    assert any(f"against {MARKDOWN_REFERENCE!r}" in t for t in texts)
    for body in markdown_bodies(app):
        # No unescaped link, image or tag: a bracket, parenthesis or angle bracket always follows a backslash.
        for at, char in enumerate(body):
            if char in "[]()<>!" and ("evil" in body or "beacon" in body):
                assert at > 0 and body[at - 1] == "\\", body


def test_classification_says_no_label_chosen_and_that_there_is_no_nevus_class() -> None:
    app = open_page()
    app.radio(key="lesion_mode").set_value("classification").run()
    labels = app.selectbox(key="lesion_reference_label").options
    assert len(labels) == 24 and "Melanoma" in labels and "melanoma" not in labels  # "(none)" and the 23 labels
    assert any("no nevus" in c.value for c in app.caption)
    app.selectbox(key="lesion_reference_label").set_value("Melanoma")
    app.text_area(key="lesion_pasted").set_value("A long rationale about a benign mole.\nFinal diagnosis: nevus")
    run_button(app).click().run()
    assert not app.exception, app.exception
    answer, reading = app.text[0].value, app.text[1].value
    assert (answer, reading) == ("nevus", "no label chosen"), (answer, reading)
    assert any(t.value == "Incorrect against 'Melanoma'" for t in app.text)


@pytest.mark.browser
def test_markdown_in_a_model_answer_is_neither_a_link_nor_an_image_in_chromium(
    streamlit_app: Callable[..., str], page: Any, artifacts_dir: Path
) -> None:
    url = streamlit_app()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{url}/lesion")
    page.get_by_role("heading", name="Lesion diagnosis").wait_for()
    settle(page)
    page.get_by_text("20MB per file", exact=False).wait_for()  # the uploader advertises the image check limit
    reference = page.get_by_label("Reference diagnosis (optional, given only to the judge)")
    reference.fill(MARKDOWN_REFERENCE)
    reference.press("Enter")
    settle(page)
    answer = page.get_by_role("textbox", name="Model response")  # the expander is open without a model
    answer.fill(MARKDOWN_ANSWER)
    answer.press("Control+Enter")
    settle(page)
    page.get_by_role("button", name="Run").click()
    page.get_by_text("Saved as run").wait_for()
    page.get_by_text("Final diagnosis: melanoma").first.wait_for()
    assert page.locator("a[href*='evil.example']").count() == 0
    assert page.locator("img[src*='beacon']").count() == 0
    assert not [u for u in requested if "beacon" in u or "evil.example" in u]
    assert page.get_by_text("against 'melanoma ![ref](http://127.0.0.1:9/ref-beacon.png)'").first.is_visible()
    page.screenshot(path=str(artifacts_dir / "lesion_markdown_as_text.png"), full_page=True)


@pytest.mark.browser
def test_a_slow_evaluation_shows_its_stage_and_cancel_stops_it_in_chromium(
    streamlit_app: Callable[..., str], page: Any, artifacts_dir: Path, data_dir: Path, tmp_path_factory: Any
) -> None:
    database = tmp_path_factory.mktemp("cancel") / "medeval.db"
    with FakeOpenAI(Reply(content="Final diagnosis: melanoma"), latency_s=60.0) as server:
        url = streamlit_app(MEDEVAL_VLM_BASE_URL=server.url, MEDEVAL_VLM_MODEL="slow-vlm",
                            MEDEVAL_DB_URL=f"sqlite:///{database}")
        page.goto(f"{url}/lesion")
        page.get_by_role("heading", name="Lesion diagnosis").wait_for()
        settle(page)
        page.locator("input[type='file']").set_input_files(str(data_dir / "lesions" / LESION))
        page.get_by_text(f"{LESION}: 1022x767 JPEG").wait_for()
        settle(page)
        page.get_by_role("button", name="Run").click()
        page.get_by_text("Generating the answer:").wait_for(timeout=30_000)
        # The endpoint named in the setup caption is text, not an autolink.
        shown = server.url.replace("http://", "http:\u2060//")  # with the invisible joiner that breaks the autolink
        assert page.get_by_text(f"slow-vlm at {shown}").first.is_visible()
        assert page.get_by_test_id("stMain").locator("a[href*='127.0.0.1']").count() == 0
        page.screenshot(path=str(artifacts_dir / "lesion_progress.png"), full_page=True)
        started = time.monotonic()
        page.get_by_role("button", name="Cancel").click()
        page.get_by_text("The evaluation was cancelled").wait_for(timeout=15_000)
        assert time.monotonic() - started < 15  # not the model's 60 s
        # The interrupted script stores the failure at its next progress update (half a second at most), which may
        # come just after the new run has drawn the page. Checked while the model still holds its answer: once the
        # fake server stops, the pending request is answered at once and would race the interruption.
        store = Store(f"sqlite:///{database}")
        deadline = time.monotonic() + 5
        while (run := store.list_runs(benchmark="ddi")[0]).status == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert run.status == "failed" and run.error == CANCELLED
        assert all(call.answered_at is None for call in server.chat_requests())  # stopped before the model answered


def test_the_model_answer_is_shown_beside_the_judges_reading_and_a_misspelt_label_is_refused_with_why() -> None:
    from medeval_core.benchmarks.ddi.interactive import EXACT_LABEL_RULE

    app = open_page()
    app.text_input(key="lesion_reference").set_value("basal-cell-carcinoma-nodular")
    app.text_area(key="lesion_pasted").set_value(
        "<think>Pearly papule with telangiectasia.</think><answer>Final diagnosis: nodular BCC</answer>")
    run_button(app).click().run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    headings = [m.value for m in app.markdown]
    assert "**The model's final answer**" in headings and "**The judge read it as**" in headings
    (run,) = context.current_store().list_runs(benchmark="ddi")
    (judgement,) = context.current_store().judgements(run_id=run.id)
    assert app.text[0].value == "nodular BCC"  # what the model wrote, from its <answer> part
    assert app.text[1].value == judgement.verdict["predicted_diagnosis"]  # what the judge made of it

    # Classification: "melanoma" for the label "Melanoma" is refused under the protocol's exact-spelling rule.
    app.radio(key="lesion_mode").set_value("classification").run()
    assert literal(EXACT_LABEL_RULE) in [c.value for c in app.caption]
    app.selectbox(key="lesion_reference_label").set_value("Melanoma")
    app.text_area(key="lesion_pasted").set_value("Asymmetric, multicoloured.\nFinal diagnosis: melanoma")
    run_button(app).click().run()
    assert not app.exception and not app.error
    assert (app.text[0].value, app.text[1].value) == ("melanoma", "no label chosen")
    assert any(t.value == "Incorrect against 'Melanoma'" for t in app.text)
    why = " ".join(c.value for c in app.caption).replace("\\", "")
    assert "names 'Melanoma' but not with its exact spelling" in why


def test_switching_task_keeps_the_reference() -> None:
    app = open_page()
    app.text_input(key="lesion_reference").set_value("melanoma").run()
    app.radio(key="lesion_mode").set_value("classification").run()
    assert app.selectbox(key="lesion_reference_label").value == "Melanoma"  # the label the text names
    app.radio(key="lesion_mode").set_value("open").run()
    assert app.text_input(key="lesion_reference").value == "melanoma"  # as the user typed it

    app.text_input(key="lesion_reference").set_value("melanoma-in-situ").run()
    app.radio(key="lesion_mode").set_value("classification").run()
    assert app.selectbox(key="lesion_reference_label").value == ""
    assert any("melanoma\\-in\\-situ" in c.value and "not one of the candidate labels" in c.value
               for c in app.caption)
    app.radio(key="lesion_mode").set_value("open").run()
    assert app.text_input(key="lesion_reference").value == "melanoma-in-situ"
