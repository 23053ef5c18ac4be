"""The "New run" launcher: forms from Params, validation, the plan, endpoint pre-checks over HTTP against the local
OpenAI-compatible test server, and the page launching a real worker process."""

import json
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect
from streamlit.testing.v1 import AppTest

from medeval_core.benchmarks.ddi.params import DdiParams
from medeval_core.benchmarks.ddxplus.params import DDXPlusParams
from medeval_core.forms import FormError, field_specs, form_variants, validate_form
from medeval_core.models.endpoints import check_backend, check_roles
from medeval_core.runs import launch
from medeval_core.settings import BackendChoice, load_settings
from medeval_core.store import Store
from tests.browser_support import settle
from tests.conftest import free_port
from tests.fake_openai import FakeOpenAI, Reply

NEW_RUN_PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "new_run.py")


def test_form_fields_carry_defaults_limits_help_and_data_suggestions(data_dir: Path) -> None:
    specs = {s.name: s for s in field_specs(DDXPlusParams, data_folders=[data_dir / "ddxplus"])}
    concurrency = specs["concurrency"]
    assert (concurrency.kind, concurrency.default, concurrency.minimum) == ("integer", 1, 1.0)
    assert concurrency.maximum == 512 and concurrency.help == "cases run at once"
    assert specs["limit"].optional and specs["limit"].default is None and specs["limit"].minimum == 1
    assert specs["patients"].required and specs["patients"].default.endswith("patients_sample_en.csv")
    assert specs["kb"].source == "folder" and specs["kb"].default == str((data_dir / "ddxplus").resolve())
    assert specs["agent"].suggestions == ("kb-bayes", "llm")
    assert specs["agent_params"].kind == "json"
    assert "reads_kb" not in specs  # the agent says whether it reads the KB (prepare_params), nobody types it


def test_discriminated_params_are_one_form_per_launchable_variant() -> None:
    assert form_variants(DdiParams) == ["model", "responses"]  # the lesion page's sessions are not launched here
    names = [s.name for s in field_specs(DdiParams, variant="responses")]
    assert "responses_file" in names and "stage" not in names
    params = validate_form(DdiParams, {"responses_file": "/tmp/r.jsonl", "mode": "open"}, variant="responses")
    assert params.root.stage == "responses" and params.root.responses_file == "/tmp/r.jsonl"


def test_ddi_model_stage_form_starts_from_the_protocol_settings(data_dir: Path) -> None:
    settings = load_settings()
    specs = {s.name: s for s in launch.form("ddi", settings, "model")}
    assert specs["generation"].default == settings.generation.model_dump(mode="json")  # configs/evaluation.json
    assert specs["prompt"].default["user"] and Path(specs["source"].default["images_dir"]).is_dir()
    with pytest.raises(launch.LaunchError) as raised:
        launch.plan("ddi", {"mode": "open"}, settings, "model")
    # the variant's tag ("model") is not mistaken for the field called model
    assert str(raised.value).startswith("source: is required") and "model backend: is required" in str(raised.value)


def test_validation_names_every_wrong_field_in_one_sentence_each() -> None:
    with pytest.raises(FormError) as raised:
        validate_form(DDXPlusParams, {"patients": "p.csv", "kb": "kb", "agent": "kb-bayes", "concurrency": 0,
                                      "limit": "0", "agent_params": "{not json"})
    message = str(raised.value)
    assert "agent params: not valid JSON" in message
    with pytest.raises(FormError) as raised:
        validate_form(DDXPlusParams, {"patients": "p.csv", "kb": "kb", "agent": "kb-bayes", "concurrency": 0,
                                      "limit": 0})
    assert str(raised.value) == ("concurrency: Input should be greater than or equal to 1. "
                                 "limit: Input should be greater than or equal to 1.")
    with pytest.raises(FormError, match="agent: is required; enter a value"):
        validate_form(DDXPlusParams, {"patients": "p.csv", "kb": "kb", "agent": ""})


def test_plan_counts_cases_and_hashes_the_settings(data_dir: Path) -> None:
    settings = load_settings()
    values = {s.name: s.default for s in launch.form("ddxplus", settings)} | {"limit": 7, "repetitions": 2}
    plan = launch.plan("ddxplus", values, settings)
    assert (plan.estimate.cases, plan.estimate.repetitions, plan.estimate.case_runs) == (7, 2, 14)
    assert plan.settings_hash == settings.settings_hash() and plan.params["limit"] == 7
    with pytest.raises(launch.LaunchError, match=r"missing\.csv"):
        launch.plan("ddxplus", values | {"patients": str(data_dir / "missing.csv")}, settings)
    # The params the run will store, as the command line stores them; a bad agent fails here, not in the worker.
    assert plan.params["reads_kb"] is True and plan.params["agent_params"]["use_kb"] is True
    with pytest.raises(launch.LaunchError, match="Unknown DDXPlus agent 'weird'"):
        launch.plan("ddxplus", values | {"agent": "weird"}, settings)


def openai_role(url: str, model: str = "fake-model") -> BackendChoice:
    return BackendChoice(backend="openai", model=model, base_url=url, api_key_env="MEDEVAL_TEST_KEY")


def test_endpoint_check_is_one_cheap_request_against_a_real_server() -> None:
    with FakeOpenAI(Reply(content="p")) as server:
        check = check_backend("judge", openai_role(server.url))
        [request] = server.chat_requests()
    assert check is not None and check.ok and check.latency_s is not None
    assert request.body["max_tokens"] == 1 and request.body["model"] == "fake-model"


def test_a_refused_key_reports_the_endpoints_error_and_the_variable_to_set() -> None:
    with FakeOpenAI(Reply(status=401)) as server:
        check = check_backend("judge", openai_role(server.url))
    assert check is not None and not check.ok
    assert "HTTP 401" in check.error and "scripted status 401" in check.error
    assert "set MEDEVAL_TEST_KEY to a valid key" in check.fix


def test_a_closed_port_and_a_missing_checkpoint_say_what_to_set(tmp_path: Path) -> None:
    [closed] = check_roles(load_settings().model_copy(update={"roles": {
        "chat": openai_role(f"http://127.0.0.1:{free_port()}/v1")}}), ["chat"])
    assert not closed.ok and "Connect" in closed.error and "MEDEVAL_CHAT_BASE_URL" in closed.fix
    missing = check_backend("vlm", BackendChoice(backend="transformers", model=str(tmp_path / "nope"),
                                                 api_key_env="X"))
    assert missing is not None and not missing.ok and "MEDEVAL_VLM_MODEL" in missing.fix
    assert check_backend("judge", BackendChoice(backend="offline", api_key_env="X")) is None


def test_a_failing_endpoint_stops_the_launch_and_stores_nothing(isolated_store: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAI(Reply(status=503)) as server:
        monkeypatch.setenv("MEDEVAL_CHAT_BASE_URL", server.url)
        monkeypatch.setenv("MEDEVAL_CHAT_MODEL", "fake-model")
        settings = load_settings()
        values = {s.name: s.default for s in launch.form("ddxplus", settings)} | {"limit": 3}
        plan = launch.plan("ddxplus", values, settings)
        assert plan.estimate.model_roles == ["chat"] and plan.estimate.min_model_calls == 3
        with pytest.raises(launch.LaunchError, match="HTTP 503"):
            launch.launch(plan, settings)
    assert Store(isolated_store).list_runs() == []


def wait_finished(store: Store, run_id: str, timeout_s: float = 120) -> str:
    from medeval_core.runs import workers

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = workers.run_liveness(store, run_id)
        if state in ("completed", "failed", "cancelled", "interrupted"):
            return state
        time.sleep(0.3)
    raise TimeoutError(f"run {run_id} did not finish in {timeout_s} s")


def test_launcher_page_validates_plans_and_launches_a_worker(isolated_store: str) -> None:
    app = AppTest.from_file(NEW_RUN_PAGE, default_timeout=120).run()
    assert not app.exception, app.exception
    app.selectbox(key="launch_benchmark").set_value("ddxplus").run()
    app.number_input(key="field_ddxplus_None_concurrency").set_value(1)
    app.number_input(key="field_ddxplus_None_limit").set_value(4)
    app.text_area(key="field_ddxplus_None_agent_params").input("{oops")
    app.button[0].click().run()  # "Check parameters"
    assert any("not valid JSON" in e.value for e in app.error), [e.value for e in app.error]
    assert not [b for b in app.button if b.label == "Launch"]
    app.text_area(key="field_ddxplus_None_agent_params").input("{}")
    app.button[0].click().run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Cases"] == "4" and metrics["Case runs (cases x repetitions)"] == "4"
    assert any("Settings hash" in c.value for c in app.caption)
    [launch_button] = [b for b in app.button if b.label == "Launch"]
    launch_button.click().run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    run_id = app.session_state["launched_run"]
    store = Store(isolated_store)
    assert wait_finished(store, run_id) == "completed"
    assert len(store.results(run_id)) == 4


@pytest.mark.browser
def test_launch_a_kb_bayes_ddxplus_run_from_the_page_in_chromium(streamlit_app, page, artifacts_dir: Path,
                                                                  tmp_path_factory) -> None:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('launch-browser') / 'medeval.db'}"
    page.goto(f"{streamlit_app(MEDEVAL_DB_URL=db_url)}/new-run")
    page.get_by_role("heading", name="New run").wait_for()
    settle(page)
    page.get_by_test_id("stSelectbox").filter(has_text="Benchmark").click()
    page.get_by_role("option", name="DDXPlus").click()
    settle(page)
    page.get_by_role("spinbutton", name="limit (optional)").fill("25")
    repetitions = page.get_by_role("spinbutton", name="repetitions")
    # While the form reruns for the chosen benchmark, the previous form's field can still stand beside the new one.
    expect(repetitions).to_have_count(1)
    repetitions.fill("3")
    page.get_by_role("textbox", name="Run label").fill("KB-Bayes on 25 patients")
    page.get_by_role("button", name="Check parameters").click()
    page.get_by_role("button", name="Launch", exact=True).wait_for()
    settle(page)
    page.screenshot(path=str(artifacts_dir / "new_run_plan.png"), full_page=True)
    page.get_by_role("button", name="Launch", exact=True).click()
    page.get_by_text("Launched run").wait_for()
    settle(page)
    page.get_by_role("button", name="Watch it on the Batch runs page").click()
    page.get_by_role("heading", name="Batch runs").wait_for()
    settle(page)
    # The run's panel refreshes on its own until the worker has finished every case.
    page.get_by_text("completed: 75 done, 0 failed, 0 pending of 75").wait_for(timeout=120_000)
    page.get_by_role("heading", name="Summary").wait_for()
    page.get_by_text("Across 3 repetitions").wait_for()  # each repetition's metrics and their spread
    settle(page)
    page.set_viewport_size({"width": 1400, "height": 4600})  # Streamlit scrolls inside itself: show all plots
    page.get_by_text("Plots of this run").click()  # drawn on demand
    page.locator(".js-plotly-plot").first.wait_for()
    assert page.locator(".js-plotly-plot").count() >= 2  # intervals and the per-pathology breakdown
    screenshot = artifacts_dir / "runs_launched_kb_bayes.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 20_000
    store = Store(db_url)
    [run] = store.list_runs()
    assert run.status == "completed" and len(store.results(run.id)) == 75
    assert run.config["params"]["reads_kb"] is True  # stored as the command line stores it (prepare_params)
    assert run.label == "KB-Bayes on 25 patients"
    # Score the stored run again from New run, as `rescore` does: the run is chosen from the list.
    page.goto(f"{streamlit_app(MEDEVAL_DB_URL=db_url)}/new-run")
    page.get_by_text("Score a stored run").click()
    page.get_by_test_id("stSelectbox").filter(has_text="Run whose outputs are scored").wait_for()
    page.get_by_role("button", name="Launch scoring").click()
    page.get_by_text("Launched score run").wait_for()
    page.screenshot(path=str(artifacts_dir / "new_run_score_stored.png"), full_page=True)
    [score] = store.runs_scoring(run.id)
    assert wait_finished(store, score.id) == "completed" and len(store.results(score.id)) == 75


def test_a_backend_chosen_in_the_launcher_is_checked_and_stored_with_the_run(isolated_store: str) -> None:
    from medeval_core import context
    from medeval_core.store import model_backends

    store = Store(isolated_store)
    with FakeOpenAI(Reply(content="a")) as default_server, FakeOpenAI(Reply(content="b")) as chosen_server:
        for name, server in (("default", default_server), ("other", chosen_server)):
            model_backends.register_backend(store, model_backends.ModelBackend(
                role="chat", name=name, backend="openai", model=f"{name}-model", base_url=server.url))
        settings = context.current_settings()
        assert settings.role("chat").model == "default-model"
        [offered] = launch.role_choices("ddxplus", settings, store)
        labels = [option.label for option in offered.options]
        assert labels[0].startswith("as configured now (openai default-model") and labels[1].startswith("other:")
        values = {s.name: s.default for s in launch.form("ddxplus", settings)} | {"limit": 2}
        plan = launch.plan("ddxplus", values, settings, roles={"chat": offered.options[1].choice})
        assert plan.settings_hash != settings.settings_hash()  # the chosen backend is part of the run's settings
        launched = launch.launch(plan, settings, label="chosen backend")
        assert [c.model for c in launched.checks] == ["other-model"]
        assert len(chosen_server.chat_requests()) == 1 and not default_server.chat_requests()
        chosen_url = chosen_server.url
    stored = store.get_run(launched.run_id).config["settings"]["roles"]["chat"]
    assert (stored["model"], stored["base_url"]) == ("other-model", chosen_url)
    assert wait_finished(store, launched.run_id) == "completed"


def test_explicit_case_ids_run_exactly_those_patients(isolated_store: str) -> None:
    settings = load_settings()
    values = {s.name: s.default for s in launch.form("ddxplus", settings)} | {"case_ids": '["row-9", "row-3"]'}
    plan = launch.plan("ddxplus", values, settings)
    assert plan.estimate.cases == 2 and plan.params["case_ids"] == ["row-9", "row-3"]
    launched = launch.launch(plan, settings)
    store = Store(isolated_store)
    assert wait_finished(store, launched.run_id) == "completed"
    assert sorted(r.case_id for r in store.results(launched.run_id)) == ["row-3", "row-9"]
    summary = store.get_run(launched.run_id).summary
    assert summary["counts"]["done"] == 2 and summary["extras"]["patients"] == 2
    with pytest.raises(launch.LaunchError, match="no usable patient row-999999"):
        launch.plan("ddxplus", values | {"case_ids": '["row-999999"]'}, settings)


def test_launcher_page_offers_the_ddi_stages_and_reports_missing_data_as_text() -> None:
    app = AppTest.from_file(NEW_RUN_PAGE, default_timeout=60).run()
    app.selectbox(key="launch_benchmark").set_value("ddi").run()
    assert not app.exception, app.exception
    assert list(app.radio(key="launch_variant_ddi").options) == ["model", "responses"]
    app.radio(key="launch_variant_ddi").set_value("responses").run()
    app.text_input(key="field_ddi_responses_responses_file").input("/nowhere/*responses*.jsonl")
    app.button[0].click().run()
    assert not app.exception
    [error] = app.error
    assert error.value.startswith("Not launched") and "\\*responses\\*" in error.value  # the path stays literal


def test_a_ddi_run_launched_from_new_run_is_generated_then_judged_and_can_be_scored_again(
        isolated_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's stages are the run's: the vision model answers every image, then the configured judge (the fake
    OpenAI server) judges every response, both in the launched worker; a second judge (offline) scores the same
    outputs from the page's "Score a stored run", chosen from the stored runs."""
    from tests.ddi_fixtures import DDI_ROWS, make_ddi_folder, responder_by_colour
    from tests.fake_openai import RecordedRequest, verdict_reply

    cases = make_ddi_folder(tmp_path / "ddi", DDI_ROWS[:3])
    vision = responder_by_colour(cases, {case.ddi_id: f"Final diagnosis: {case.disease}" for case in cases})

    def respond(request: RecordedRequest) -> Reply:
        if "[DDI reference diagnosis]" in request.text():
            return verdict_reply("as given", True)
        return vision(request) if "image_url" in str(request.body) else Reply(content="ok")  # the endpoint check

    store = Store(isolated_store)
    with FakeOpenAI(respond) as server:
        monkeypatch.setenv("MEDEVAL_JUDGE_BASE_URL", server.url)
        monkeypatch.setenv("MEDEVAL_JUDGE_MODEL", "judge-llm")
        monkeypatch.setenv("DASHSCOPE_API_KEY", "test-key")
        settings = load_settings()
        values = {s.name: s.default for s in launch.form("ddi", settings, "model")} | {
            "source": {"images_dir": str(tmp_path / "ddi")}, "model_backend": "openai", "model": "skin-vlm",
            "base_url": server.url}
        plan = launch.plan("ddi", values, settings, "model")
        [stage] = plan.score_stages
        assert (stage.scorer, stage.options["backend"]) == ("ddi-judge", "openai")
        assert "judge" in plan.estimate.model_roles
        launched = launch.launch(plan, settings, label="launched ddi")
        judge_run = f"{launched.run_id}-judge"
        assert wait_finished(store, launched.run_id) == "completed"
        assert wait_finished(store, judge_run) == "completed"
        requests = server.chat_requests()
    judged = [r for r in requests if "[DDI reference diagnosis]" in r.text()]
    seen = [r for r in requests if "image_url" in str(r.body)]
    assert len(seen) == 3 and len(judged) == 3, "3 vision calls, then 3 judge calls"
    summary = store.get_run(judge_run).summary
    accuracy = {m["name"]: m for m in summary["headline"]}["accuracy_judged"]
    assert accuracy["value"] == 1.0 and accuracy["interval"] and store.get_run(judge_run).source_run_id \
        == launched.run_id

    app = AppTest.from_file(NEW_RUN_PAGE, default_timeout=120).run()
    app.radio(key="launch_kind").set_value("Score a stored run").run()
    assert not app.exception, app.exception
    app.selectbox(key="score_source").set_value(launched.run_id)
    app.selectbox(key="score_scorer").set_value("ddi-judge")
    app.text_area(key="score_options").input('{"backend": "offline"}')
    [submit] = [b for b in app.button if b.label == "Launch scoring"]
    submit.click().run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    second = app.session_state["launched_run"]
    assert second != judge_run and store.get_run(second).source_run_id == launched.run_id
    assert wait_finished(store, second) == "completed"
    provenance = [r.scores["correct"]["provenance"]["judge"] for r in store.results(second)]
    assert len(provenance) == 3 and all(name.startswith("offline") for name in provenance)


def test_ddi_form_starts_from_the_shared_lesions_and_its_errors_name_the_form_fields(data_dir: Path) -> None:
    assert not (data_dir / "ddi" / "ddi_metadata.csv").exists()  # so the folder offered is the shared lesions
    app = AppTest.from_file(NEW_RUN_PAGE, default_timeout=60).run()
    app.selectbox(key="launch_benchmark").set_value("ddi").run()
    app.radio(key="launch_variant_ddi").set_value("model").run()
    source = json.loads(app.text_area(key="field_ddi_model_source").value)
    assert Path(source["images_dir"]) == data_dir / "lesions" and Path(source["images_dir"]).is_dir()
    app.text_input(key="field_ddi_model_model").input("/nowhere/checkpoint")
    app.button[0].click().run()  # "Check parameters"
    assert not app.exception, app.exception
    [error] = app.error
    shown = error.value.replace("\\", "")
    assert "source.metadata" in shown and "--" not in shown, shown


def test_sdbench_form_suggests_the_shipped_price_table_and_does_not_require_one(data_dir: Path) -> None:
    from medeval_core.benchmarks.sdbench.benchmark import SDBenchBenchmark, SDBenchParams

    specs = {s.name: s for s in launch.form("sdbench", load_settings())}
    shipped = str((data_dir / "costing" / "cms_prices.csv").resolve())
    assert specs["prices"].default == shipped and not specs["prices"].required
    params = validate_form(SDBenchParams, {"cases": "/tmp/cases.jsonl", "agent": "replay", "prices": ""})
    assert SDBenchBenchmark().prepare_params(params, load_settings()).prices == shipped  # what the CLI stores
