"""Run comparison in the core, resume by name through the registry, and the batch-runs page."""

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core.records import CaseResult, CaseStatus, RunConfig, RunStatus
from medeval_core.results.compare import compare_runs, summarize_metrics
from medeval_core.runs import service
from medeval_core.settings import load_settings
from medeval_core.store import Store
from tests.browser_support import settle

RUNS_PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")


def result(run: str, case: str, correct: bool, score: float) -> CaseResult:
    return CaseResult(run_id=run, case_id=case, status=CaseStatus.OK, metrics={"correct": correct, "score": score})


@pytest.fixture
def counting_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", "tests.support.counting_benchmark")


def counting_config(settings, n_cases: int) -> RunConfig:
    from tests.support.counting_benchmark import CountingParams

    return service.new_run_config("counting", settings, CountingParams(n_cases=n_cases))


def seed_two_runs(store: Store) -> None:
    """Two runs of the counting benchmark on the same cases (same params, so the same comparison key)."""
    config = counting_config(load_settings(), 5)
    store.create_run(config.model_copy(update={"label": "model A"}), run_id="model-a", expected_cases=4)
    store.create_run(config.model_copy(update={"label": "model B"}), run_id="model-b", expected_cases=5)
    for case, a, b in (("c1", True, False), ("c2", True, False), ("c3", True, True), ("c4", False, False)):
        store.save_result(result("model-a", case, a, 1.0 if a else 0.2))
        store.save_result(result("model-b", case, b, 0.5))
    store.save_result(CaseResult(run_id="model-b", case_id="c5", status=CaseStatus.FAILED, error="timeout"))


def test_summaries_use_wilson_for_proportions_and_bootstrap_for_means(isolated_store: str,
                                                                       counting_registered: None) -> None:
    store = Store(isolated_store)
    seed_two_runs(store)
    by_metric = {s.metric: s for s in summarize_metrics(store.results("model-a"))}
    assert by_metric["correct"].kind == "proportion" and by_metric["correct"].value == 0.75
    assert by_metric["correct"].n == 4 and 0.3 < by_metric["correct"].ci_low < 0.75 < by_metric["correct"].ci_high
    assert by_metric["score"].kind == "mean" and by_metric["score"].value == pytest.approx(0.8)


def test_paired_comparison_uses_exact_mcnemar_on_shared_cases(isolated_store: str, counting_registered: None) -> None:
    store = Store(isolated_store)
    seed_two_runs(store)
    comparison = compare_runs("model-a", store.results("model-a"), "model-b", store.results("model-b"))
    correct = {p.metric: p for p in comparison.paired}["correct"]
    assert correct.shared_cases == 4  # the failed c5 is not a score
    assert (correct.only_a_correct, correct.only_b_correct) == (2, 0)
    assert correct.p_value == pytest.approx(0.5)  # 2 * P(X >= 2 | n=2, 1/2)
    assert correct.difference == pytest.approx(0.5)
    score = {p.metric: p for p in comparison.paired}["score"]
    assert score.test == "paired percentile bootstrap" and score.difference_ci_low <= score.difference


def test_resume_by_name_continues_with_the_stored_config(isolated_store: str, counting_registered: None) -> None:
    store = Store(isolated_store)
    settings = load_settings()
    store.create_run(counting_config(settings, 6), run_id="count-1", expected_cases=6)
    report = service.resume("count-1", settings, store)
    assert (report.status, report.done) == (RunStatus.COMPLETED, 6)
    summary = service.stored_summary(store, "count-1")
    assert summary is not None and summary.metric("scored").value == 6
    assert store.get_run("count-1").settings_hash == settings.settings_hash()


def test_overview_counts_follow_new_and_replaced_results(isolated_store: str, counting_registered: None) -> None:
    """A failed case replaced by a finished one, through either write path, is counted at once. SQLite may give
    the replacing row the replaced row's id, so counts cached per result stamp (count, newest id) would miss it."""
    from medeval_core.records import CaseRecords

    store = Store(isolated_store)
    seed_two_runs(store)
    before = service.run_overview(store, "model-b")
    assert (before.done, before.failed, before.pending) == (4, 1, 0)
    store.save_result(result("model-b", "c5", True, 1.0))
    after_retry = service.run_overview(store, "model-b")
    assert (after_retry.done, after_retry.failed) == (5, 0)
    store.save_case_records([CaseRecords(result=CaseResult(run_id="model-a", case_id="c5", status=CaseStatus.FAILED,
                                                           error="timeout"))])
    assert (service.run_overview(store, "model-a").done, service.run_overview(store, "model-a").failed) == (4, 1)
    store.save_case_records([CaseRecords(result=result("model-a", "c5", True, 1.0))])
    assert (service.run_overview(store, "model-a").done, service.run_overview(store, "model-a").failed) == (5, 0)


def test_a_batch_runs_overview_reads_none_of_its_turns(isolated_store: str, counting_registered: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a session's state depends on its last step; the newest of a batch run's turns (millions in a DDXPlus
    test-set run) is never read for the Batch runs page."""
    store = Store(isolated_store)
    seed_two_runs(store)
    read: list[list[str]] = []
    last_turn_times = Store.last_turn_times
    monkeypatch.setattr(Store, "last_turn_times",
                        lambda self, ids: read.append(list(ids)) or last_turn_times(self, ids))
    assert service.run_snapshot(store, "model-b").overview.done == 4
    assert read == []


def test_runs_page_shows_progress_metrics_failures_and_comparison(isolated_store: str,
                                                                   counting_registered: None) -> None:
    seed_two_runs(Store(isolated_store))
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    assert not app.exception, app.exception
    app.selectbox(key="run_selected").set_value("model-b").run()
    assert not app.exception
    [progress] = app.get("progress")
    assert progress.proto.text == "pending: 4 done, 1 failed, 0 pending of 5"
    assert app.subheader[0].value.startswith("Per-case metrics")
    app.toggle(key="cases_shown").set_value(True).run()
    app.selectbox(key="case_filter").set_value("failed").run()
    [cases] = [frame.value for frame in app.dataframe if "case" in frame.value.columns]
    assert list(cases["case"]) == ["c5"] and list(cases["error"]) == ["timeout"]
    resume_buttons = [b for b in app.button if b.label == "Resume"]
    assert resume_buttons, "a run with failed cases offers Resume"
    app.toggle(key="compare_shown").set_value(True).run()
    app.selectbox(key="compare_a").set_value("model-a").run()
    app.selectbox(key="compare_b").set_value("model-b").run()
    comparison = app.table[-1].value
    assert comparison.loc["correct", "only A right"] == 2
    assert comparison.loc["correct", "p-value"] == pytest.approx(0.5)
    assert {"model A", "model B"} <= set(comparison.columns), "runs are named by their labels"


def test_resume_from_the_page_finishes_the_run(isolated_store: str, counting_registered: None) -> None:
    store = Store(isolated_store)
    store.create_run(counting_config(load_settings(), 5), run_id="count-page", expected_cases=5)
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    [resume] = [b for b in app.button if b.label == "Resume"]
    resume.click().run()
    assert not app.exception and not app.error
    deadline = time.monotonic() + 30
    while store.get_run("count-page").status != RunStatus.COMPLETED and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(store.results("count-page")) == 5


def test_unknown_benchmark_cannot_be_resumed_and_says_so(isolated_store: str) -> None:
    store = Store(isolated_store)
    store.create_run(RunConfig(benchmark="retired-benchmark"), run_id="old", expected_cases=3)
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    [resume] = [b for b in app.button if b.label == "Resume"]
    resume.click().run()
    shown = [e.value.replace("\\", "") for e in app.error]  # stored text is shown Markdown-escaped
    assert any("cannot be resumed here" in text and "retired-benchmark" in text for text in shown), shown


def test_empty_store_says_how_to_start_a_run() -> None:
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    assert not app.exception
    assert "No runs yet" in app.info[0].value and "New run page" in app.info[0].value
    assert "benchmark page" not in app.info[0].value


def test_runs_page_in_headless_chromium(streamlit_app, page, artifacts_dir: Path, tmp_path_factory,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('runs-browser') / 'medeval.db'}"
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", "tests.support.counting_benchmark")
    seed_two_runs(Store(db_url))
    url = streamlit_app(MEDEVAL_DB_URL=db_url, MEDEVAL_BENCHMARKS="tests.support.counting_benchmark")
    page.goto(f"{url}/runs")  # a cold server's first request is a deep link
    page.get_by_role("heading", name="Compare two runs").wait_for()
    settle(page)
    page.get_by_text("Compare two runs case by case").click()  # drawn on demand
    sidebar = page.get_by_test_id("stSidebar")
    # The page runs inside the app shell (waited for: the click's rerun may be redrawing the sidebar).
    sidebar.get_by_role("heading", name="Store").wait_for()
    assert sidebar.get_by_role("link", name="app").count() == 0, "no legacy pages-folder navigation"
    page.locator("table").get_by_text("exact McNemar").wait_for()
    page.screenshot(path=str(artifacts_dir / "runs.png"), full_page=True)


def test_session_runs_offer_neither_resume_nor_cancel(isolated_store: str, counting_registered: None) -> None:
    from medeval_core.sessions import Session
    from tests.support.counting_benchmark import CountingParams

    store = Store(isolated_store)
    session = Session.open(store, load_settings(), "counting", CountingParams(n_cases=1), case_id="case-0000")
    session.context().record_turn("person", "count", {"n": 1})
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    assert not app.exception
    assert not [b for b in app.button if b.label in ("Resume", "Cancel")]
    assert any("past interactive sessions are listed below" in i.value for i in app.info)
    [listed] = [f.value for f in app.dataframe if "verdict" in f.value.columns]
    assert list(listed["run_id"]) == [session.run_id] and list(listed["benchmark"]) == ["counting"]
    app.selectbox(key="session_open").set_value(session.run_id).run()
    assert not app.exception


def test_runs_page_renders_a_benchmark_run_summary(isolated_store: str, counting_registered: None) -> None:
    store = Store(isolated_store)
    service.launch("counting", counting_config(load_settings(), 4).params, load_settings(), store, run_id="cnt")
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    assert not app.exception
    assert "Summary" in [s.value for s in app.subheader]
    headline = app.table[0].value
    assert headline.loc["scored", "denominator"] == "expected cases"
    assert headline.loc["scored", "value"] == "4"  # a count, not a percentage


def test_runs_page_renders_a_10000_result_run_without_loading_all_results(isolated_store: str,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         counting_registered: None) -> None:
    """Not timed: the page's reruns read the metrics once (cached per result stamp), only the failed results by
    status, and never every full result (outputs, scores) of the run; the comparison likewise."""
    from medeval_core.records import CaseRecords

    store = Store(isolated_store)
    for run_id in ("big-a", "big-b"):
        store.create_run(counting_config(load_settings(), 2_500), run_id=run_id, expected_cases=10_000)
        store.save_case_records([CaseRecords(result=CaseResult(
            run_id=run_id, case_id=f"case-{i // 4:05d}", repetition=i % 4,
            status=CaseStatus.FAILED if i % 100 == 0 else CaseStatus.OK, error="timeout" if i % 100 == 0 else None,
            output={"answer": i % 7}, metrics={} if i % 100 == 0 else {"correct": i % 3 != 0, "score": i % 10 / 10}))
            for i in range(10_000)])
    calls: list[tuple[str, str, object]] = []
    results, metric_rows = Store.results, Store.metric_rows

    def counted_results(self: Store, run_id: str, status: CaseStatus | None = None) -> list[CaseResult]:
        calls.append(("results", run_id, status))
        return results(self, run_id, status)

    def counted_metric_rows(self: Store, run_id: str) -> list[tuple[str, int, dict]]:
        calls.append(("metric_rows", run_id, None))
        return metric_rows(self, run_id)

    monkeypatch.setattr(Store, "results", counted_results)
    monkeypatch.setattr(Store, "metric_rows", counted_metric_rows)
    app = AppTest.from_file(RUNS_PAGE, default_timeout=120).run()
    assert not app.exception, app.exception
    app.toggle(key="cases_shown").set_value(True).run()
    app.toggle(key="across_shown").set_value(True).run()
    app.toggle(key="compare_shown").set_value(True).run()
    for _ in range(3):
        app.run()
        assert not app.exception, app.exception
    selected = str(app.selectbox(key="run_selected").value)
    assert app.subheader[0].value.startswith("Per-case metrics")
    assert "1-50 of 10000 case results (page 1 of 200)" in " ".join(c.value for c in app.caption)
    correct = app.table[-1].value.loc["correct"]
    assert correct["shared cases"] == 2_500
    full_loads = [c for c in calls if c[0] == "results" and c[2] is None]
    assert not full_loads, f"full results loaded: {full_loads}"
    assert all(c[2] == CaseStatus.FAILED for c in calls if c[0] == "results")
    # The metrics of each run are read once over the page runs by each of the page's readers, each cached per
    # result stamp: the metric summaries (selected run; plots across runs reuse them and read the other run once),
    # the comparison and its paired differences (both runs); the case table reads a page at a time.
    metric_reads = [c[1] for c in calls if c[0] == "metric_rows"]
    assert metric_reads.count(selected) <= 3 and len(metric_reads) <= 6, metric_reads


def test_cached_comparison_matches_compare_runs_until_a_result_is_added(isolated_store: str,
                                                                        counting_registered: None) -> None:
    from medeval_core.results.compare import run_comparison

    store = Store(isolated_store)
    seed_two_runs(store)
    expected = compare_runs("model-a", store.results("model-a"), "model-b", store.results("model-b"))
    assert run_comparison(store, "model-a", "model-b") == expected
    assert run_comparison(store, "model-a", "model-b") == expected  # from the cache
    store.save_result(result("model-b", "c6", True, 0.9))
    store.save_result(result("model-a", "c6", False, 0.1))
    updated = {p.metric: p for p in run_comparison(store, "model-a", "model-b").paired}
    assert updated["correct"].shared_cases == 5 and updated["correct"].only_b_correct == 1


def stored_summary(store: Store, run_id: str, done: int, failed: int, notes: list[str] | None = None) -> None:
    from medeval_core.benchmark import Metric, MetricGroup, RunCounts, RunSummary

    headline = [Metric(name="scored", value=float(done), n=done + failed, denominator="expected cases",
                       unit="count")]
    groups = [MetricGroup(dimension="pathology", label=label, metrics=[
        Metric(name="GTPA@1", value=value, n=2, denominator="planned patients", unit="percent")])
        for label, value in (("Bronchitis", 50.0), ("Pneumonia", 100.0))]
    summary = RunSummary(benchmark="counting", counts=RunCounts(expected=done + failed, done=done, failed=failed,
                                                                pending=0),
                         headline=headline if done else [], groups=groups if done else [], notes=notes or [])
    store.update_run(run_id, summary=summary.model_dump(mode="json"))


def test_groups_are_tables_and_a_run_with_no_finished_case_shows_no_metric(isolated_store: str,
                                                                           counting_registered: None) -> None:
    store = Store(isolated_store)
    seed_two_runs(store)
    stored_summary(store, "model-a", done=4, failed=0)
    store.create_run(counting_config(load_settings(), 2), run_id="all-failed", expected_cases=2)
    for case in ("c1", "c2"):
        store.save_result(CaseResult(run_id="all-failed", case_id=case, status=CaseStatus.FAILED, error="boom"))
    store.update_run("all-failed", status=RunStatus.FAILED, error="Every case failed.")
    stored_summary(store, "all-failed", done=0, failed=2, notes=["No case finished: no metric is reported."])
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    app.selectbox(key="run_selected").set_value("model-a").run()
    assert not app.exception, app.exception
    [pathology] = [f.value for f in app.dataframe if "pathology" in f.value.columns]
    assert list(pathology["pathology"]) == ["Bronchitis", "Pneumonia"]
    assert list(pathology["GTPA@1"]) == ["50.00", "100.00"]  # a table of values, not a JSON document
    assert not app.json or all("per_pathology" not in j.value for j in app.json)
    app.selectbox(key="run_selected").set_value("all-failed").run()
    assert not app.exception
    assert any("No case finished, so no metric is shown" in w.value for w in app.warning)
    assert not [t for t in app.table if "denominator" in t.value.columns]
    assert app.get("progress")[0].proto.text.startswith("failed: 0 done, 2 failed")


def test_a_live_run_shows_its_eta_and_finishes_on_the_page(isolated_store: str, counting_registered: None) -> None:
    from medeval_core.runs import workers

    settings = load_settings()
    run_id = workers.create_run(settings, "counting", {"n_cases": 24, "sleep_s": 0.25}, label="slow counting")
    workers.start_worker(settings, run_id)
    store = Store(isolated_store)
    deadline = time.monotonic() + 60
    while (workers.run_liveness(store, run_id) != "running" or not store.results_stamp(run_id)[0]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    assert not app.exception, app.exception
    line = app.get("progress")[0].proto.text
    assert line.startswith("running: ") and "cases/s, about" in line and line.endswith("s left"), line
    while workers.run_liveness(store, run_id) != "completed" and time.monotonic() < deadline:
        time.sleep(0.2)
    app.run()
    assert app.get("progress")[0].proto.text == "completed: 24 done, 0 failed, 0 pending of 24"


def test_case_drill_down_shows_turns_output_judge_attempts_and_model_calls(isolated_store: str,
                                                                          counting_registered: None) -> None:
    from medeval_core.records import CaseRecords, Judgement, ModelCall, Turn

    store = Store(isolated_store)
    store.create_run(counting_config(load_settings(), 1), run_id="drill", expected_cases=1)
    answer = "**bold** <script>alert(1)</script>" + " long model answer" * 10
    reasoned = "<think>Pearly border, telangiectasia.</think><answer>Basal cell carcinoma</answer>" + " " * 80
    differential = {"Bronchitis": 0.6, "Pneumonia": 0.3, "URTI": 0.095, "Croup": 0.005}
    store.save_case_records([CaseRecords(
        result=CaseResult(run_id="drill", case_id="case-0000", status=CaseStatus.OK,
                          output={"response": answer, "reply": reasoned, "differential": differential},
                          metrics={"correct": True}),
        turns=[Turn(run_id="drill", case_id="case-0000", index=0, actor="agent", action="order",
                    payload={"test": "CBC", "result": "normal", "provenance": "SYNTHETIC"}, cost=25.0),
               Turn(run_id="drill", case_id="case-0000", index=1, actor="agent", action="question",
                    payload={"question": "fever?", "provenance": "REAL"}, cost=300.0)],
        judgements=[Judgement(run_id="drill", case_id="case-0000", judge_name="ddi-llm", attempt=1, ok=False,
                              http_status=429, error="rate limited"),
                    Judgement(run_id="drill", case_id="case-0000", judge_name="ddi-llm", attempt=2, ok=True,
                              verdict={"correct": True, "reason": "same"})],
        model_calls=[ModelCall(run_id="drill", case_id="case-0000", role="judge", model="m",
                               messages_sha256="a" * 64, latency_s=0.25, prompt_tokens=120, completion_tokens=7)])])
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    app.toggle(key="cases_shown").set_value(True).run()
    app.selectbox(key="case_open_drill").set_value(("case-0000", 0)).run()
    assert not app.exception, app.exception
    frames = [f.value for f in app.dataframe]
    # The dialogue as a conversation: who and what (with cost and tags), the step, its answer; no key: value strings.
    first, second = app.chat_message
    assert [c.value.replace("\\", "") for c in first.caption] == ["0. agent · order · cost 25.00 · SYNTHETIC"]
    assert [t.value for t in first.text] == ["CBC", "normal"]
    assert [c.value.replace("\\", "") for c in second.caption] == ["1. agent · question · cost 300.00 · REAL"]
    assert [t.value for t in second.text] == ["fever?"]
    # The differential as a sorted table of the pathologies above 0.01, not raw JSON.
    [table] = [f for f in frames if "pathology" in f.columns]
    assert list(table["pathology"]) == ["Bronchitis", "Pneumonia", "URTI"]
    # A reasoning model's tags shown as the two parts.
    texts = [t.value for t in app.text]
    assert "Basal cell carcinoma" in texts and "Pearly border, telangiectasia." in texts
    assert not any("<answer>" in text for text in texts)
    [attempts] = [f for f in frames if "raw reply" in f.columns]
    assert list(attempts["http"].fillna(0)) == [429, 0] and '"reason": "same"' in attempts["raw reply"].iloc[1]
    [calls] = [f for f in frames if "prompt tokens" in f.columns]
    assert (calls["latency s"].iloc[0], calls["prompt tokens"].iloc[0]) == (0.25, 120)
    assert answer in [t.value for t in app.text]  # the model's answer as plain text, not Markdown
    assert any("total cost 325.00" in m.value for m in app.markdown)


def test_a_run_whose_worker_was_killed_shows_interrupted_and_resumes_from_the_page(
        isolated_store: str, counting_registered: None) -> None:
    import os
    import signal

    from medeval_core.runs import workers

    settings = load_settings()
    run_id = workers.create_run(settings, "counting", {"n_cases": 30, "sleep_s": 0.2}, label="to be killed")
    pid = workers.start_worker(settings, run_id)
    store = Store(isolated_store)
    deadline = time.monotonic() + 60
    while store.results_stamp(run_id)[0] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    while workers.run_liveness(store, run_id) != "interrupted" and time.monotonic() < deadline:
        time.sleep(0.1)
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    assert not app.exception, app.exception
    assert app.get("progress")[0].proto.text.startswith("interrupted: ")
    [resume] = [b for b in app.button if b.label == "Resume"]
    resume.click().run()
    assert not app.error, [e.value for e in app.error]
    while workers.run_liveness(store, run_id) != "completed" and time.monotonic() < deadline + 60:
        time.sleep(0.2)
    finished = store.results(run_id)
    assert len(finished) == 30 and len({r.case_id for r in finished}) == 30 and all(r.ok for r in finished)


def test_a_worker_error_reaches_the_page_and_the_run_ends_failed(isolated_store: str,
                                                                 counting_registered: None) -> None:
    """A detached worker whose run's summary raises: the run ends *failed* with the error (no resume loop), and
    the page shows the error and the tail of the worker's log with the traceback."""
    from medeval_core.context import current_settings
    from medeval_core.runs import workers
    from tests.support.counting_benchmark import CountingParams

    settings = current_settings()
    run_id = workers.create_run(settings, "counting", CountingParams(n_cases=3, fail_summary=True))
    workers.start_worker(settings, run_id)
    store = Store(isolated_store)
    deadline = time.monotonic() + 60
    while workers.run_liveness(store, run_id) not in ("failed", "completed") and time.monotonic() < deadline:
        time.sleep(0.2)
    row = store.get_run(run_id)
    assert row.status == RunStatus.FAILED and "the summary fails on purpose" in (row.error or "")
    app = AppTest.from_file(RUNS_PAGE, default_timeout=60).run()
    app.selectbox(key="run_selected").set_value(run_id).run()
    assert not app.exception, app.exception
    shown = " ".join(e.value.replace("\\", "") for e in app.error)
    assert "summary failed" in shown and "the summary fails on purpose" in shown, shown
    [log] = [c.value for c in app.code]
    assert "in summarize" in log and log.endswith("RuntimeError: the summary fails on purpose")


def seed_roles_and_a_failed_run(db_url: str) -> str:
    """Two SDBench runs whose stored summaries name their metrics as SDBench does (roles declared), and a newer
    run whose worker failed, with its log beside the store. Returns the failed run's id."""
    from medeval_core.benchmark import Metric, RunCounts, RunSummary
    from medeval_core.runs.workers import worker_log_path
    from medeval_core.settings import load_settings

    store = Store(db_url)
    for run_id, accuracy, cost in (("sd-cheap", 0.5, 900.0), ("sd-thorough", 0.8, 2400.0)):
        store.create_run(RunConfig(benchmark="sdbench", label=run_id), run_id=run_id, expected_cases=10)
        summary = RunSummary(benchmark="sdbench", counts=RunCounts(expected=10, done=10, failed=0, pending=0),
                             headline=[Metric(name="accuracy (sdbench-offline-judge)", value=accuracy,
                                              interval=(accuracy - 0.2, accuracy + 0.1), n=10,
                                              denominator="judged cases", role="accuracy"),
                                       Metric(name="mean cost per case ($)", value=cost, interval=(cost - 100,
                                              cost + 100), n=10, denominator="completed cases", unit="number",
                                              role="cost")])
        store.update_run(run_id, status=RunStatus.COMPLETED, summary=summary.model_dump(mode="json"))
    store.create_run(RunConfig(benchmark="counting", label="broken summary"), run_id="broken", expected_cases=3)
    store.update_run("broken", status=RunStatus.FAILED,
                     error="The run's cases finished but its summary failed: RuntimeError: on purpose")
    log = worker_log_path(load_settings().model_copy(update={"db_url": db_url}), "broken")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("Traceback (most recent call last):\nRuntimeError: on purpose\n", encoding="utf-8")
    return "broken"


@pytest.mark.browser
def test_pareto_by_roles_and_a_worker_error_in_chromium(streamlit_app, page, artifacts_dir: Path,
                                                        tmp_path_factory) -> None:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('runs-roles') / 'medeval.db'}"
    seed_roles_and_a_failed_run(db_url)
    url = streamlit_app(MEDEVAL_DB_URL=db_url)
    page.goto(f"{url}/runs")
    page.get_by_text("The run stopped with an error").wait_for()  # the newest run, selected on opening
    page.get_by_text("The worker's log (last lines)").wait_for()
    page.get_by_text("RuntimeError: on purpose").last.wait_for()
    settle(page)
    page.get_by_text("Show plots across runs").click()
    page.get_by_text("Pareto front").wait_for()  # SDBench's metric names, read by their roles
    page.screenshot(path=str(artifacts_dir / "runs_pareto_error.png"), full_page=True)
