"""Exports (CSV formula neutralisation, JSON cells, JSON Lines), the offline HTML report of a run from the core and
from ``runs report``, and the model-backend registry (store, migration, settings resolution, Models page)."""

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from streamlit.testing.v1 import AppTest

from medeval_core import context
from medeval_core.benchmark import Metric, MetricGroup, RunCounts, RunSummary
from medeval_core.records import CaseResult, CaseStatus, RunConfig, RunKind
from medeval_core.results import exports, plots
from medeval_core.results import summaries as results
from medeval_core.results.reports import SECTIONS, run_report_html
from medeval_core.settings import load_settings
from medeval_core.store import Store
from medeval_core.store import model_backends as registry
from tests.browser_support import settle
from tests.fake_openai import FakeOpenAI, Reply

REPO = Path(__file__).resolve().parent.parent
MODELS_PAGE = str(REPO / "pages" / "models.py")
HOSTILE = ["=HYPERLINK(\"http://x\")", "+1+2", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd"]


def is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def seeded_run(store: Store, run_id: str = "r1", label: str = "my <b>run</b>") -> None:
    store.create_run(RunConfig(benchmark="ddxplus", label=label, params={"agent": "kb-bayes"}), run_id=run_id,
                     expected_cases=len(HOSTILE) + 1)
    for index, value in enumerate(HOSTILE):
        store.save_result(CaseResult(run_id=run_id, case_id=f"c{index}", status=CaseStatus.OK,
                                     output={"answer": value, "differential": {"Flu": 0.7, "URTI": 0.3}},
                                     metrics={"correct": index % 2 == 0, "delta": -0.5}))
    store.save_result(CaseResult(run_id=run_id, case_id="bad", status=CaseStatus.FAILED,
                                 error="<script>alert(1)</script>"))
    summary = RunSummary(
        benchmark="ddxplus", title="DDXPlus", counts=RunCounts(expected=7, done=6, failed=1, pending=0),
        headline=[Metric(name="GTPA@1", value=0.5, interval=(0.2, 0.8), n=6, denominator="planned patients")],
        groups=[MetricGroup(dimension="pathology", label=name, metrics=[
            Metric(name="GTPA@1", value=v, n=3, denominator="planned patients")]) for name, v in (("Flu", 0.4),
                                                                                                  ("URTI", 0.6))],
        notes=["note with *markdown* <i>and html</i>"])
    store.update_run(run_id, summary=summary.model_dump(mode="json"))


def test_csv_neutralises_formula_cells_and_writes_json_not_reprs(isolated_store: str) -> None:
    store = Store(isolated_store)
    seeded_run(store)
    rows = list(csv.DictReader(io.StringIO(exports.results_csv(store.results("r1")), newline="")))
    answers = [row["output.answer"] for row in rows if row["status"] == "ok"]
    assert answers == ["'" + value for value in HOSTILE]  # shown as text by spreadsheets, nothing evaluated
    text_cells = [value for row in rows for value in row.values() if value and not is_number(value)]
    assert text_cells and not [value for value in text_cells if value.startswith(exports.FORMULA_PREFIXES)]
    assert json.loads(rows[0]["output.differential"]) == {"Flu": 0.7, "URTI": 0.3}
    assert rows[0]["metric.delta"] == "-0.5"  # a negative number stays a number


def test_jsonl_keeps_values_as_json(isolated_store: str, tmp_path: Path) -> None:
    store = Store(isolated_store)
    seeded_run(store)
    path = exports.write_results(store.results("r1"), tmp_path / "out.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["output.differential"] == {"Flu": 0.7, "URTI": 0.3} and lines[0]["output.answer"] == HOSTILE[0]
    with pytest.raises(ValueError, match=r"use a \.csv or \.jsonl"):
        exports.write_results(store.results("r1"), tmp_path / "out.xlsx")


def test_html_report_has_every_section_opens_offline_and_escapes_stored_text(isolated_store: str) -> None:
    store = Store(isolated_store)
    seeded_run(store)
    document = run_report_html(store, "r1")
    for section in SECTIONS:
        assert f"<h2>{section}" in document
    assert "GTPA@1" in document and "50.00%" in document and "Flu" in document
    # plotly.js is inlined once; nothing is fetched from anywhere.
    assert document.count("Plotly.newPlot") >= 2
    assert not re.search(r"<script[^>]*\bsrc=", document) and not re.search(r"<link[^>]*\bhref=", document)
    assert "<script>alert(1)</script>" not in document and "&lt;script&gt;alert(1)&lt;/script&gt;" in document
    assert "my &lt;b&gt;run&lt;/b&gt;" in document and "<b>run</b>" not in document


def test_runs_report_command_writes_the_file(isolated_store: str, tmp_path: Path) -> None:
    seeded_run(Store(isolated_store))
    out = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "medeval_core", "runs", "report", "r1", "--html", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
    bad = subprocess.run([sys.executable, "-m", "medeval_core", "runs", "report", "nope", "--html", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "No run with id 'nope'" in bad.stderr


def test_pareto_front_and_labels_in_plots() -> None:
    points = plots.pareto_front([plots.CostPoint(label=label, accuracy=a, cost=c) for label, a, c in (
        ("physicians", 0.199, 2963), ("GPT-4o", 0.493, 2745), ("o3", 0.786, 7850), ("MAI-DxO", 0.799, 2396))])
    assert [p.label for p in points if p.on_front] == ["MAI-DxO"]
    # SDBench's names: the plot reads the roles the metrics declare, not their names.
    summary = RunSummary(benchmark="x", counts=RunCounts(expected=1, done=1, failed=0, pending=0), headline=[
        Metric(name="accuracy (sdbench-offline-judge)", value=0.5, n=1, denominator="cases", role="accuracy"),
        Metric(name="mean cost per case ($)", value=100.0, n=1, denominator="cases", unit="number", role="cost")])
    figure = plots.accuracy_vs_cost(plots.cost_points({"budgeted agent": summary}))
    assert list(figure.data[0].text) == ["budgeted agent"] and figure.data[1].name == "Pareto front"
    unroled = summary.model_copy(update={"headline": [m.model_copy(update={"role": None}) for m in summary.headline]})
    assert plots.cost_points({"no roles": unroled}) == []


def test_sessions_are_listed_apart_with_response_and_verdict(isolated_store: str) -> None:
    store = Store(isolated_store)
    store.create_run(RunConfig(benchmark="ddi", kind=RunKind.SESSION, session_case_id="lesion"), run_id="s1")
    store.save_result(CaseResult(run_id="s1", case_id="lesion", status=CaseStatus.OK, output={
        "image": {"name": "mole.png"}, "response": "Melanoma.", "verdict": {"correct": True}}))
    store.create_run(RunConfig(benchmark="ddxplus", kind=RunKind.SESSION, session_case_id="row-3"), run_id="w1")
    walkthrough, lesion = results.session_listings(store)
    assert (lesion.image, lesion.response, lesion.verdict) == ("mole.png", "Melanoma.", "correct")
    assert lesion.reopen_page is None  # the lesion page keeps no session in its URL: reopened in the drill-down
    assert (walkthrough.run_id, walkthrough.reopen_query) == ("w1", "walkthrough")
    assert Path(walkthrough.reopen_page or "").samefile(REPO / "medeval_core/benchmarks/ddxplus/page_walkthrough.py")
    assert [r.id for r in results.run_listings(store.list_runs(), {})] == ["w1", "s1"]


# Model backends -----------------------------------------------------------------------------------------------------

def test_a_pasted_key_is_refused_and_a_variable_name_kept() -> None:
    with pytest.raises(ValueError, match="NAME of the environment variable"):
        registry.ModelBackend(role="judge", name="x", backend="openai", model="m", base_url="http://h/v1",
                              api_key_env="sk-live-0123456789abcdef")
    backend = registry.ModelBackend(role="judge", name="x", backend="openai", model="m", base_url="http://h/v1/")
    assert backend.base_url == "http://h/v1" and backend.api_key_env == "MEDEVAL_JUDGE_API_KEY"


def test_registered_defaults_reach_settings_without_restart_and_the_environment_wins(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(db_url)
    first = registry.register_backend(store, registry.ModelBackend(
        role="chat", name="local vllm", backend="openai", model="qwen", base_url="http://127.0.0.1:9/v1"))
    assert first.is_default
    assert context.current_settings().role("chat").model == "qwen"
    second = registry.register_backend(store, registry.ModelBackend(
        role="chat", name="other", backend="openai", model="llama", base_url="http://127.0.0.1:9/v1"))
    assert not second.is_default and context.current_settings().role("chat").model == "qwen"
    registry.set_default(store, second.id or 0)
    assert context.current_settings().role("chat").model == "llama"  # same process, no restart
    assert context.current_settings().settings_hash() != load_settings().settings_hash()
    monkeypatch.setenv("MEDEVAL_CHAT_MODEL", "from-env")
    context.reset()
    assert context.current_settings().role("chat").model == "from-env"
    with pytest.raises(Exception, match="already has a backend called"):
        registry.register_backend(store, registry.ModelBackend(
            role="chat", name="other", backend="openai", model="x", base_url="http://h/v1"))
    with store.engine.connect() as connection:
        stored = connection.execute(text("SELECT * FROM model_backends")).mappings().all()
    assert all("sk-" not in json.dumps(dict(row), default=str) for row in stored)


def test_migration_0004_keeps_existing_rows(tmp_path: Path) -> None:
    from alembic import command

    from medeval_core.store.migrations import alembic_config

    url = f"sqlite:///{tmp_path / 'at-0003.db'}"
    command.upgrade(alembic_config(url=url), "0003_case_leases")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO runs (id, benchmark, label, kind, status, config, settings_hash, "
                                "versions, summary, created_at) VALUES ('keep', 'ddxplus', '', 'batch', "
                                "'completed', '{}', '', '{}', '{}', '2026-01-01 00:00:00')"))
    engine.dispose()
    store = Store(url)
    assert store.schema_action == "upgraded" and [r.id for r in store.list_runs()] == ["keep"]
    assert registry.list_backends(store) == []
    registry.register_backend(store, registry.ModelBackend(role="vlm", name="ckpt", backend="transformers",
                                                           model=str(tmp_path)))
    assert [b.name for b in registry.list_backends(store)] == ["ckpt"]
    store.engine.dispose()


def test_models_page_registers_tests_and_picks_defaults(isolated_store: str) -> None:
    with FakeOpenAI(Reply(content="p")) as server:
        app = AppTest.from_file(MODELS_PAGE, default_timeout=60).run()
        assert not app.exception, app.exception
        app.selectbox(key="model_role").set_value("judge")
        app.text_input(key="model_name").input("fake judge")
        app.text_input(key="model_base_url").input(server.url)
        app.text_input(key="model_model").input("fake-model")
        app.text_input(key="model_key_env").input("sk-this-is-a-key")
        app.button[0].click().run()  # Register
        refusals = [e.value.replace("\\", "") for e in app.error]
        assert any("NAME of the environment variable" in e for e in refusals)
        assert not any("Value error" in e for e in refusals), refusals  # the sentence, without pydantic's prefix
        assert app.text_input(key="model_name").value == "fake judge"  # a refused form keeps what was typed
        app.text_input(key="model_key_env").input("MY_JUDGE_KEY")
        app.button[0].click().run()
        assert not app.exception and not app.error, [e.value for e in app.error]
        assert len(server.chat_requests()) == 1  # tested with one request before saving
        assert any("Registered fake judge" in s.value.replace("\\", "") for s in app.success)
        assert (app.text_input(key="model_name").value, app.text_input(key="model_model").value) == ("", "")
        in_use = app.dataframe[0].value.set_index("role")
        assert in_use.loc["judge", "model"] == "fake-model" and in_use.loc["judge", "key variable"] == "MY_JUDGE_KEY"
        [test] = [b for b in app.button if b.label == "Test"]
        test.click().run()
        assert any("answered in" in s.value.replace("\\", "") for s in app.success)
    assert [b.name for b in registry.list_backends(Store(isolated_store))] == ["fake judge"]


@pytest.mark.browser
def test_html_report_renders_offline_in_chromium(isolated_store: str, page, artifacts_dir: Path,
                                                 tmp_path: Path) -> None:
    from medeval_core.results.reports import write_run_report

    store = Store(isolated_store)
    seeded_run(store)
    path = write_run_report(store, "r1", tmp_path / "report.html")
    fetched: list[str] = []

    def refuse_network(route) -> None:
        fetched.append(route.request.url)
        route.abort()

    page.route("http*://**/*", refuse_network)  # nothing may load from anywhere but the file itself
    page.goto(path.as_uri())
    page.locator(".js-plotly-plot .main-svg").first.wait_for()
    assert page.locator(".js-plotly-plot").count() >= 2 and not fetched
    assert page.get_by_text("<script>alert(1)</script>").count() == 1  # the stored error, shown as text
    page.screenshot(path=str(artifacts_dir / "run_report.png"), full_page=True)


@pytest.mark.browser
def test_models_page_registers_a_backend_in_chromium(streamlit_app, page, artifacts_dir: Path,
                                                     tmp_path_factory) -> None:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('models-browser') / 'medeval.db'}"
    with FakeOpenAI(Reply(content="p")) as server:
        page.goto(f"{streamlit_app(MEDEVAL_DB_URL=db_url)}/models")
        page.get_by_role("heading", name="Register a backend").wait_for()
        page.get_by_test_id("stSelectbox").filter(has_text="Role").click()
        page.get_by_role("option", name="chat").click()
        page.get_by_role("textbox", name="Name", exact=True).fill("local vLLM")
        page.get_by_role("textbox", name="Base URL", exact=True).fill(server.url)
        page.get_by_role("textbox", name="Model", exact=True).fill("fake-model")
        page.get_by_role("button", name="Register").click()
        page.get_by_text("Registered local vLLM for chat as its default.").wait_for()
        settle(page)
        page.get_by_role("button", name="Test").click()
        # The Test's own line; the registration notice above also ends "answered in", from the test before saving.
        page.get_by_text(re.compile(r"^chat: fake-model at .* answered in")).wait_for()
        settle(page)  # the rerun has drawn the whole page again
        page.screenshot(path=str(artifacts_dir / "models.png"), full_page=True)
        assert len(server.chat_requests()) == 2  # one before saving, one for Test
    [saved] = registry.list_backends(Store(db_url))
    assert (saved.role, saved.model, saved.is_default, saved.api_key_env) == ("chat", "fake-model", True,
                                                                             "MEDEVAL_CHAT_API_KEY")
