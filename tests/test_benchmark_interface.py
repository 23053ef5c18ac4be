"""The benchmark seam: a benchmark defined outside medeval plugs in through its spec alone, its parameters are
stored whole, a --run-id with other parameters is refused, resume keeps the stored concurrency, score runs apply a
scorer to a stored run, and group commit survives SIGKILL with exactly one result per case."""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from medeval_core import registry
from medeval_core.benchmark import BenchmarkError
from medeval_core.catalog import pages
from medeval_core.cli import build_parser, main
from medeval_core.data import data_status
from medeval_core.records import RunKind, RunStatus
from medeval_core.runs import launch, service
from medeval_core.runs.runner import BatchRunner
from medeval_core.settings import load_settings
from medeval_core.status import backends_status, data_status_rows
from medeval_core.store import Store
from tests.support.counting_benchmark import CountingParams

REPO = Path(__file__).resolve().parent.parent
TOY = "tests.support.counting_benchmark"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", TOY)


def test_a_benchmark_outside_medeval_appears_in_run_pages_and_sidebar(toy: None) -> None:
    assert "counting" in registry.specs()
    run_choices = build_parser()._subparsers._group_actions[0].choices["run"]._subparsers._group_actions[0].choices
    assert "counting" in run_choices
    assert any(page.url_path == "counting" for page in pages())
    assert any(row.role == "counter" and row.used_by == "counting" for row in backends_status(load_settings()))
    by_source = {row.name: row.used_by for row in data_status_rows(load_settings())}
    assert "counting" in by_source["MEDIQ (iMedQA, iCraft-MD)"] and by_source["DDXPlus (English)"] == "ddxplus"


@contextmanager
def serving(folder: Path) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving ``folder``; yields its base URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True)
class OutsidePlugins:
    """A folder outside the checkout on sys.path, holding a copy of the counting benchmark under its own name."""

    folder: Path
    counting: str

    def add(self, name: str, update: str) -> str:
        """Another plugin: the counting spec renamed ``name`` with ``update`` (a dict literal) applied; its module."""
        module = f"{self.counting}_{name}"
        (self.folder / f"{module}.py").write_text(
            f"from {self.counting} import NUMBERS_SOURCE, SPEC as COUNTING\n"
            f"SPEC = COUNTING.model_copy(update={{'name': {name!r}, 'cli': None, 'pages': (), **{update}}})\n")
        return module


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> OutsidePlugins:
    folder = tmp_path / "plugins"
    folder.mkdir()
    counting = f"outside_{tmp_path.name}"  # a module name of this test's own
    shutil.copy(REPO / "tests" / "support" / "counting_benchmark.py", folder / f"{counting}.py")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEDEVAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", counting)
    return OutsidePlugins(folder, counting)


def test_a_plugin_outside_the_checkout_declares_a_data_source_and_a_command(
        outside: OutsidePlugins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_store: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "status", "--json"]) == 0
    sources = {s["source"]["name"]: s for s in json.loads(capsys.readouterr().out)["sources"]}
    assert sources["counting"]["state"] == "missing"
    assert sources["counting"]["how_to_get"] == "run `python -m medeval_core data fetch counting`"
    assert main(["count-numbers"]) == 2
    assert "numbers.txt is missing" in capsys.readouterr().err

    published = tmp_path / "published"
    published.mkdir()
    (published / "numbers.txt").write_text("1\n2\n3\n")
    with serving(published) as base:
        monkeypatch.setenv("MEDEVAL_COUNTING_API", base)
        assert main(["data", "fetch", "counting"]) == 0
    assert (tmp_path / "data" / "counting" / "numbers.txt").read_text() == "1\n2\n3\n"
    assert "numbers.txt  6 bytes" in capsys.readouterr().out
    assert main(["count-numbers"]) == 0
    assert capsys.readouterr().out == "3 numbers, total 6\n"
    by_source = {row.name: row for row in data_status_rows(load_settings())}
    assert (by_source["Counting numbers (toy)"].state, by_source["Counting numbers (toy)"].used_by) == \
        ("found", "counting")
    assert launch.data_folders("counting", load_settings()) == [tmp_path / "data" / "counting",
                                                                tmp_path / "data" / "mediq"]

    assert main(["run", "counting", "--n-cases", "3", "--run-id", "p", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["counts"]["done"] == 3
    assert main(["rescore", "p", "--scorer", "parity", "--run-id", "p-parity", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["done"] == 3
    assert registry.spec("counting").factory == f"{outside.counting}:CountingBenchmark"
    assert Path(sys.modules[outside.counting].__file__ or "").parent == outside.folder


def test_a_data_source_no_benchmark_declares_or_two_declare_apart_is_refused_with_what_to_do(
        outside: OutsidePlugins, monkeypatch: pytest.MonkeyPatch) -> None:
    misnamed = outside.add("misnamed", "{'data_sources': ('nowhere',)}")
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", f"{outside.counting},{misnamed}")
    with pytest.raises(BenchmarkError, match=r"reads the data source 'nowhere', which no benchmark declares .*"
                                             r"declare it in the spec's data_sources"):
        launch.data_folders("misnamed", load_settings())

    conflict = outside.add("conflict", "{'data_sources': (NUMBERS_SOURCE.model_copy(update={'folder': 'other'}),)}")
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", f"{outside.counting},{conflict}")
    with pytest.raises(BenchmarkError, match="declare the data source 'counting' differently; declare it in one"):
        data_status(load_settings().data_dir)

    same_fetch = outside.add("samefetch", "{'data_sources': (NUMBERS_SOURCE.model_copy(update={'name': 'more'}),)}")
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", f"{outside.counting},{same_fetch}")
    with pytest.raises(BenchmarkError, match="'counting' and 'more' are both fetched as `data fetch counting`"):
        data_status(load_settings().data_dir)


def test_without_the_variable_the_toy_is_not_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDEVAL_BENCHMARKS", raising=False)
    assert "counting" not in registry.specs()
    assert {"ddi", "ddxplus"} <= set(registry.specs())


def test_cli_run_stores_params_whole_and_refuses_other_params_on_the_same_run_id(
        toy: None, isolated_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "counting", "--n-cases", "4", "--concurrency", "3", "--run-id", "c1", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["summary"]["counts"] == {"expected": 4, "done": 4, "failed": 0, "pending": 0}
    stored = Store(isolated_store).get_run("c1").config
    assert stored["params"] == {"concurrency": 3, "repetitions": 1, "n_cases": 4, "sleep_s": 0.0, "fail_every": 0,
                                "fail_summary": False}
    assert stored["kind"] == "batch" and stored["settings_hash"] and stored["versions"]["medeval"]

    assert main(["run", "counting", "--n-cases", "5", "--run-id", "c1"]) == 2
    err = capsys.readouterr().err
    assert "exists with other parameters" in err and "n_cases: stored 4, asked 5" in err
    assert len(Store(isolated_store).results("c1")) == 4  # nothing was added to the stored run


def concurrency_seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The concurrency of every BatchRunner made from now on, in order."""
    seen: list[int] = []
    original = BatchRunner.__init__

    def spy(self: BatchRunner, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        seen.append(self.concurrency)

    monkeypatch.setattr(BatchRunner, "__init__", spy)
    return seen


def test_resume_keeps_the_stored_concurrency(toy: None, isolated_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(isolated_store)
    settings = load_settings()
    store.create_run(service.new_run_config("counting", settings, CountingParams(n_cases=6, concurrency=5)),
                     run_id="w", expected_cases=6)
    seen = concurrency_seen(monkeypatch)
    assert service.resume("w", settings, store).status == RunStatus.COMPLETED
    assert seen == [5]


def old_shape_run(store: Store, run_id: str, params: dict[str, Any], kind: RunKind = RunKind.BATCH,
                  source_run_id: str | None = None) -> None:
    """A run stored before ``workers`` (cases at once) was renamed ``concurrency``: its params say ``workers``."""
    config = service.new_run_config("counting", load_settings(), CountingParams(n_cases=1))
    config = config.model_copy(update={"params": params, "kind": kind, "source_run_id": source_run_id})
    store.create_run(config, run_id=run_id, expected_cases=params.get("n_cases", 4))
    assert "concurrency" not in store.get_run(run_id).config["params"]


def test_a_run_stored_with_workers_loads_resumes_and_rescores_with_that_concurrency(
        toy: None, isolated_store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(isolated_store)
    settings = load_settings()
    old = {"workers": 3, "repetitions": 1, "n_cases": 4, "sleep_s": 0.0, "fail_every": 0, "fail_summary": False}
    old_shape_run(store, "old", old)
    old_shape_run(store, "old-parity", {"scorer": "parity", "options": {"modulus": 2}, "workers": 2},
                  kind=RunKind.SCORE, source_run_id="old")
    seen = concurrency_seen(monkeypatch)
    assert service.resume("old", settings, store).status == RunStatus.COMPLETED  # then its pending score run
    assert store.get_run("old-parity").status == RunStatus.COMPLETED and len(store.results("old-parity")) == 4
    assert seen == [3, 2]  # each run's stored number of cases at once
    # The same parameters under the new name continue the old run rather than being refused as different.
    assert main(["run", "counting", "--n-cases", "4", "--concurrency", "2", "--run-id", "old", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["counts"]["done"] == 4
    rescored = service.score_run("old", service.ScoreParams.model_validate({"scorer": "parity", "workers": 2}),
                                 settings, store, run_id="new-parity")
    assert (rescored.done, store.get_run("new-parity").config["params"]["concurrency"]) == (4, 2)


def test_workers_is_a_hidden_alias_of_concurrency_that_names_the_new_option(
        toy: None, isolated_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "counting", "--n-cases", "2", "--workers", "2", "--run-id", "w2", "--json"]) == 0
    err = capsys.readouterr().err
    assert err.count("--workers is now called --concurrency") == 1
    assert Store(isolated_store).get_run("w2").config["params"]["concurrency"] == 2
    with pytest.raises(SystemExit):
        main(["run", "counting", "--help"])
    usage = capsys.readouterr().out
    assert "--concurrency" in usage and "--workers" not in usage


def test_a_score_run_scores_a_stored_runs_outputs_with_its_source_named(toy: None, isolated_store: str) -> None:
    store = Store(isolated_store)
    settings = load_settings()
    service.launch("counting", CountingParams(n_cases=5), settings, store, run_id="src")
    report = service.score_run("src", service.ScoreParams(scorer="parity", options={"modulus": 2}), settings,
                               store, run_id="src-parity")
    assert (report.status, report.done) == (RunStatus.COMPLETED, 5)
    row = store.get_run("src-parity")
    assert (row.kind, row.source_run_id) == (RunKind.SCORE, "src")
    results = {r.case_id: r for r in store.results("src-parity")}
    assert [results[f"case-{i:04d}"].metrics["even"] for i in range(5)] == [True, False, True, False, True]
    assert results["case-0000"].scores["even"]["provenance"] == {"scorer": "parity"}
    summary = service.stored_summary(store, "src-parity")
    assert summary is not None and summary.metric("even").value == pytest.approx(3 / 5)
    with pytest.raises(BenchmarkError, match="no scorer called 'judge'"):
        service.score_run("src", service.ScoreParams(scorer="judge"), settings, store)


def test_rescore_command_and_resume_of_a_score_run(toy: None, isolated_store: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "counting", "--n-cases", "3", "--run-id", "s"]) == 0
    assert main(["rescore", "s", "--scorer", "parity", "--option", "modulus=3", "--run-id", "s-3", "--json"]) == 0
    capsys.readouterr()
    assert main(["resume", "s-3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["done"] == 3
    even = [r.metrics["even"] for r in sorted(Store(isolated_store).results("s-3"), key=lambda r: r.case_id)]
    assert even == [True, False, False]


def test_sessions_cannot_be_resumed_as_batch_runs(toy: None, isolated_store: str) -> None:
    from medeval_core.sessions import Session

    store = Store(isolated_store)
    session = Session.open(store, load_settings(), "counting", CountingParams(n_cases=1), case_id="case-0000")
    with pytest.raises(BenchmarkError, match="interactive session"):
        service.resume(session.run_id, load_settings(), store)


def test_sigkill_during_group_commits_then_resume_gives_exactly_one_result_and_its_turns_per_case(
        isolated_store: str) -> None:
    n_cases = 4000
    command = [sys.executable, "-m", TOY, isolated_store, "fast", str(n_cases), "0", "4"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "MEDEVAL_BENCHMARKS": TOY}
    process = subprocess.Popen(command, cwd=REPO, env=env)
    store = Store(isolated_store)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if store.find_run("fast") is not None and store.result_counts("fast").get("ok", 0) >= 500:
            break
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    stored = store.result_counts("fast").get("ok", 0)
    assert 500 <= stored < n_cases, "the kill must land mid-run"
    with store.engine.connect() as connection:
        turns = connection.execute(text("select count(*) from turns where run_id = 'fast'")).scalar_one()
    assert turns == stored, "a case's turns are committed with its result, never apart"

    subprocess.run(command, cwd=REPO, env=env, check=True, timeout=180)
    after = store.results("fast")
    assert len(after) == n_cases == len({(r.case_id, r.repetition) for r in after})
    assert all(r.ok for r in after)
    assert store.get_run("fast").status == RunStatus.COMPLETED


def test_two_executions_of_one_run_at_once_store_each_case_once(toy: None, isolated_store: str) -> None:
    store = Store(isolated_store)
    settings = load_settings()
    store.create_run(service.new_run_config("counting", settings, CountingParams(n_cases=300, sleep_s=0.001,
                                                                                 concurrency=4)),
                     run_id="twice", expected_cases=300)
    threads = [threading.Thread(target=service.resume, args=("twice", settings, Store(isolated_store)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    results = store.results("twice")
    assert len(results) == 300 and all(r.ok for r in results)
    assert len({r.case_id for r in results}) == 300


def test_metrics_are_shown_in_their_own_unit() -> None:
    from medeval_core.benchmark import Metric

    share = Metric(name="accuracy", value=0.5, interval=(0.25, 0.75), n=8, denominator="judged cases")
    assert (share.format(share.value), share.formatted_interval()) == ("50.00%", "25.00% - 75.00%")
    assert Metric(name="DDF1", value=80.63, n=3, denominator="planned", unit="percent").format(80.63) == "80.63"
    assert Metric(name="responses", value=40.0, n=40, denominator="expected", unit="count").format(40.0) == "40"
    assert share.format(None) == "n/a"


def test_the_default_summary_counts_and_gives_each_score_its_mean_or_wilson_interval() -> None:
    from statsmodels.stats.proportion import proportion_confint

    from medeval_core.benchmark import Benchmark
    from medeval_core.records import CaseResult, CaseStatus
    from tests.support.counting_benchmark import CountingBenchmark, make_cases

    class Plain(CountingBenchmark):  # a benchmark that adds nothing to the summary
        summarize = Benchmark.summarize

    results = [CaseResult(run_id="r", case_id=f"case-{i:04d}", status=CaseStatus.OK,
                          metrics={"even": i % 2 == 0, "index": float(i)}) for i in range(5)]
    results.append(CaseResult(run_id="r", case_id="case-0005", status=CaseStatus.FAILED, error="boom"))
    summary = Plain().summarize(CountingParams(n_cases=8, repetitions=2), make_cases(8), results)
    assert summary.counts.model_dump() == {"expected": 16, "done": 5, "failed": 1, "pending": 10}
    even, index = summary.metric("even"), summary.metric("index")
    assert even is not None and index is not None
    assert even.value == pytest.approx(3 / 5) and even.n == 5 and even.unit == "proportion"
    assert even.interval == pytest.approx(proportion_confint(3, 5, method="wilson"))
    assert index.value == pytest.approx(2.0) and index.unit == "number" and index.method == "percentile bootstrap"
    assert index.interval is not None and index.interval[0] < 2.0 < index.interval[1]


def test_two_scorers_naming_one_metric_are_refused_instead_of_overwriting(
        toy: None, isolated_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.counting_benchmark import CountingBenchmark, _IndexScorer

    class AlsoIndex(_IndexScorer):
        name = "also-index"

    monkeypatch.setattr(CountingBenchmark, "scorers", lambda self, params, settings: (_IndexScorer(), AlsoIndex()))
    store = Store(isolated_store)
    report = service.launch("counting", CountingParams(n_cases=2), load_settings(), store, run_id="clash")
    assert (report.done, report.failed) == (0, 2)
    assert all(r.error and r.error.startswith(
        "BenchmarkError: The scorers 'index' and 'also-index' both name a metric 'index'; give one of them another "
        "name so neither score is lost.") for r in store.results("clash"))


def test_a_summary_names_the_runs_agent_models_and_judge_and_the_run_list_reads_them(
        toy: None, isolated_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from medeval_core.benchmark import RunActors
    from medeval_core.results.summaries import run_listings
    from tests.support.counting_benchmark import CountingBenchmark

    monkeypatch.setattr(CountingBenchmark, "actors", lambda self, params: RunActors(
        agent=f"counter-{params.n_cases}", models={"counter": "abacus-1"}))
    store = Store(isolated_store)
    settings = load_settings()
    service.launch("counting", CountingParams(n_cases=3), settings, store, run_id="named")
    service.score_run("named", service.ScoreParams(scorer="parity"), settings, store, run_id="named-parity")
    summary = service.stored_summary(store, "named")
    assert summary is not None
    assert (summary.agent, summary.models, summary.judge) == ("counter-3", {"counter": "abacus-1"}, "")
    scored = service.stored_summary(store, "named-parity")
    assert scored is not None and (scored.agent, scored.judge) == ("counter-3", "parity")
    listed = {row.id: (row.agent, row.judge) for row in run_listings(store.list_runs(), {})}
    assert listed == {"named": ("counter-3", ""), "named-parity": ("counter-3", "parity")}


def test_a_package_without_a_spec_beside_the_benchmarks_is_no_benchmark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shared code in a package of its own under ``medeval_core/benchmarks/`` (no ``spec.py``) is skipped by the
    discovery, as a package without a ``SPEC`` always was."""
    import medeval_core.benchmarks as benchmarks

    (tmp_path / "shared_helpers").mkdir()
    (tmp_path / "shared_helpers" / "__init__.py").write_text("")
    monkeypatch.setattr(benchmarks, "__path__", [*benchmarks.__path__, str(tmp_path)])
    monkeypatch.delenv("MEDEVAL_BENCHMARKS", raising=False)
    registry._specs.cache_clear()
    try:
        assert "medeval_core.benchmarks.shared_helpers" in benchmarks.packages()
        assert set(registry.specs()) == {"ddi", "ddxplus", "dynamicare", "mediq", "sdbench"}
    finally:
        registry._specs.cache_clear()
        sys.modules.pop("medeval_core.benchmarks.shared_helpers", None)
