"""DDXPlus batch runs through the service and runner: CLI, stored dialogues and summary, resume after failures,
stored parameters (concurrency, input files), and agents given by import path."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import subprocess
import sys
import threading
import typing
from pathlib import Path

import numpy as np
import pytest

from medeval_core import registry
from medeval_core.benchmark import BenchmarkError, RunSummary
from medeval_core.benchmarks.ddxplus import benchmark as ddx_benchmark
from medeval_core.benchmarks.ddxplus.benchmark import build_params
from medeval_core.benchmarks.ddxplus.metrics import METRIC_KEYS
from medeval_core.context import current_settings, current_store
from medeval_core.records import CaseStatus, RunConfig
from medeval_core.runs import service
from tests.ddxplus_fixtures import sample_csv, write_patients

REPO_ROOT = Path(__file__).resolve().parent.parent


class FirstQuestionsAgent:
    """An outside agent (``--agent tests.test_ddxplus_runs:FirstQuestionsAgent``): asks the first ``n`` roots of
    the KB, then names the pathology the KB lists first, with all the mass."""

    name = "first-questions"
    reads_kb = False
    instances = 0

    def __init__(self, n: int = 2, guess: str = "URTI") -> None:
        self.n = n
        self.guess = guess
        FirstQuestionsAgent.instances += 1

    @classmethod
    def build(cls, kb, train, settings, params):
        agent = cls(**params)
        agent.roots = kb.roots
        return agent

    def params(self):
        return {"n": self.n, "guess": self.guess}

    def start(self, intake):
        roots = iter(self.roots[: self.n])
        guess = self.guess

        class Session:
            answers: typing.ClassVar[list] = []

            def next_question(self):
                return next(roots, None)

            def observe(self, answer):
                self.answers.append(answer)

            def differential(self):
                return {guess: 1.0}

        return Session()


@pytest.fixture
def small_sets(tmp_path):
    """40 patients to question and the other sample patients to learn from, as two official-format files."""
    with sample_csv().open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    order = np.random.default_rng(1).permutation(len(body))
    test = [body[i] for i in order[:40]]
    train = [body[i] for i in order[40:]]

    def write(path, chosen):
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(chosen)
        return path

    return write(tmp_path / "test.csv", test), write(tmp_path / "train.csv", train)


def _failing(monkeypatch, broken):
    """Make the solver raise for the cases in ``broken`` (a set that the test may empty to heal them)."""
    real = ddx_benchmark.consult

    def consult(agent, kb, patient, ctx):
        if patient.case_id in broken:
            raise RuntimeError("simulated crash")
        return real(agent, kb, patient, ctx)

    monkeypatch.setattr(ddx_benchmark, "consult", consult)


def test_run_stores_results_dialogues_and_a_summary_then_resumes_failed_cases(small_sets, monkeypatch):
    test_csv, train_csv = small_sets
    settings = current_settings()
    store = current_store()
    params = build_params(settings, test_csv, "kb-bayes", train=train_csv)
    assert params.reads_kb is True and params.agent_params["training_patients"] == 1026
    cases = registry.benchmark("ddxplus").cases(params, settings)
    broken = {cases[3].case_id, cases[7].case_id}
    _failing(monkeypatch, broken)
    first = service.launch("ddxplus", params, settings, store, run_id="ddx-resume")
    assert (first.done, first.failed) == (38, 2)
    broken.clear()
    report = service.resume("ddx-resume", settings, store)
    assert (report.done, report.failed, report.pending) == (40, 0, 0)
    results = store.results("ddx-resume")
    assert len(results) == 40 and all(r.status == CaseStatus.OK for r in results)
    # Every dialogue is stored with its case: the intake, each question, the differential.
    for result in results:
        turns = store.turns("ddx-resume", result.case_id)
        assert len(turns) == len(result.output["inquired"]) + 2
        assert [t.index for t in turns] == list(range(len(turns)))
        assert turns[0].action == "intake" and turns[-1].action == "differential"
        assert [t.payload["root"] for t in turns[1:-1]] == result.output["inquired"]
        assert {t.actor for t in turns[1:]} == {"kb-bayes"}
        assert set(result.scores) == set(METRIC_KEYS)
    summary = service.stored_summary(store, "ddx-resume")
    assert summary is not None and summary.counts.done == 40
    extras = summary.extras
    assert list(extras["metrics"]) == list(METRIC_KEYS)
    assert extras["finished"] == 40 and extras["failed"] == 0 and extras["reads_kb"] is True
    assert extras["metrics"]["GTPA@1"] >= 90 and extras["metrics"]["IL"] <= 12
    assert sum(group["n"] for group in extras["per_pathology"].values()) == 40
    assert set(extras["reference"]) == {"AARLC", "BASD"}
    assert {row.label for row in summary.reference} >= {"AARLC", "BASD"}
    assert all(row.source for row in summary.reference)
    headline = {m.name: m for m in summary.headline}
    assert headline["GTPA@1"].n == 40 and headline["GTPA@1"].denominator == "completed patients"
    assert sum(g.metrics[0].n for g in summary.groups if g.dimension == "pathology") == 40
    # Per-case metrics agree with the vectorised summary.
    for key in METRIC_KEYS:
        assert np.mean([r.metrics[key] for r in results]) == pytest.approx(extras["metrics"][key], abs=1e-9)


def test_failed_cases_are_counted_apart_from_the_run_metrics(small_sets, monkeypatch):
    """design.md §3.2: a failed consultation is not averaged in as an empty differential with IL 1."""
    test_csv, train_csv = small_sets
    settings = current_settings()
    store = current_store()
    params = build_params(settings, test_csv, "kb-bayes", train=train_csv, limit=10)
    cases = registry.benchmark("ddxplus").cases(params, settings)
    _failing(monkeypatch, {case.case_id for i, case in enumerate(cases) if i % 2})
    run_id = service.launch("ddxplus", params, settings, store).run_id
    summary = service.summarize_run(store, run_id, settings)
    assert summary.extras["finished"] == 5 and summary.extras["failed"] == 5 and summary.counts.failed == 5
    ok = [r for r in store.results(run_id) if r.ok]
    for key in METRIC_KEYS:
        assert summary.metric(key).n == 5 and summary.metric(key).denominator == "completed patients"
        assert summary.metric(key).value == pytest.approx(np.mean([r.metrics[key] for r in ok]), abs=1e-9)
    assert min(r.metrics["IL"] for r in ok) > 1 and summary.metric("IL").value > 1
    assert any("5 consultation(s) failed" in note for note in summary.notes)


def _run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "medeval_core", "run", "ddxplus", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO_ROOT, check=False, env=env)


def test_run_command_prints_reference_rows_and_json(small_sets):
    test_csv, train_csv = small_sets
    base = ["--patients", test_csv, "--train", train_csv, "--agent", "kb-bayes", "--limit", "12", "--run-id",
            "cli-run"]
    text = _run(*base)
    assert text.returncode == 0, text.stderr
    assert "AARLC" in text.stdout and "BASD" in text.stdout and "this run" in text.stdout
    assert "12 of 12 consultations (12 patients x 1 repetitions) finished" in text.stdout
    # Every reference row names its source: the NeurIPS 2022 figures and the arXiv v2 preprint's apart.
    lines = text.stdout.splitlines()
    assert any(line.startswith("AARLC [1] ") for line in lines)
    assert any(line.startswith("AARLC (arXiv v2) [2] ") for line in lines)
    assert "[1] Fansi Tchango et al., NeurIPS 2022" in text.stdout and "[2] arXiv v2 preprint" in text.stdout
    # The same id again resumes (nothing left to do) and prints the same metrics as JSON.
    again = _run(*base, "--json")
    assert again.returncode == 0, again.stderr
    assert list(json.loads(again.stdout)) == list(METRIC_KEYS)


def test_run_id_reuse_with_another_patients_file_is_refused(small_sets):
    test_csv, train_csv = small_sets
    first = _run("--patients", test_csv, "--agent", "kb-bayes", "--limit", "3", "--run-id", "same-id")
    assert first.returncode == 0, first.stderr
    other = _run("--patients", train_csv, "--agent", "kb-bayes", "--limit", "3", "--run-id", "same-id")
    assert other.returncode == 2
    assert "exists with other parameters" in other.stderr and "patients" in other.stderr
    assert str(train_csv) in other.stderr


def test_run_command_rejects_bad_input_in_one_sentence(tmp_path):
    bad = write_patients(tmp_path / "bad.csv", [])
    done = _run("--patients", tmp_path / "missing.csv", "--agent", "kb-bayes")
    assert done.returncode == 2 and "does not exist" in done.stderr
    nokb = _run("--patients", bad, "--agent", "kb-bayes", "--no-kb")
    assert nokb.returncode == 2 and "needs training patients" in nokb.stderr
    unknown = _run("--patients", bad, "--agent", "no-such-agent")
    assert unknown.returncode == 2 and "Unknown DDXPlus agent" in unknown.stderr
    missing = _run("--patients", bad, "--agent", "tests.nowhere:Agent")
    assert missing.returncode == 2 and "Cannot import the agent" in missing.stderr


def test_resume_without_the_patients_file_is_refused(small_sets):
    test_csv, train_csv = small_sets
    settings = current_settings()
    params = build_params(settings, test_csv, "kb-bayes", train=train_csv, limit=3)
    service.launch("ddxplus", params, settings, current_store(), run_id="gone")
    test_csv.unlink()
    with pytest.raises(BenchmarkError, match="Cannot read the input file"):
        service.resume("gone", settings, current_store())


def test_resume_after_the_patients_file_was_rewritten_is_refused(small_sets):
    test_csv, train_csv = small_sets
    settings = current_settings()
    params = build_params(settings, test_csv, "kb-bayes", train=train_csv, limit=3)
    service.launch("ddxplus", params, settings, current_store(), run_id="rewritten")
    config = RunConfig.model_validate(current_store().get_run("rewritten").config)
    assert set(config.inputs) >= {"patients", "train", "kb_evidences", "kb_conditions"}
    lines = test_csv.read_text(encoding="utf-8").splitlines(keepends=True)
    test_csv.write_text("".join([lines[0], *reversed(lines[1:])]), encoding="utf-8")
    with pytest.raises(BenchmarkError, match="has changed since"):
        service.resume("rewritten", settings, current_store())


def test_resume_after_the_patients_file_became_unreadable_as_patients_is_refused_as_changed(small_sets):
    # The inputs are hashed on a thread while the cases load: a file whose new contents fail to load is still
    # reported as changed, and the hashes stored at launch are those of the files' bytes.
    test_csv, train_csv = small_sets
    settings = current_settings()
    params = build_params(settings, test_csv, "kb-bayes", train=train_csv, limit=3)
    service.launch("ddxplus", params, settings, current_store(), run_id="garbled")
    config = RunConfig.model_validate(current_store().get_run("garbled").config)
    assert config.inputs["patients"].sha256 == hashlib.sha256(test_csv.read_bytes()).hexdigest()
    test_csv.write_text("AGE,DIFFERENTIAL_DIAGNOSIS,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE\n", encoding="utf-8")
    with pytest.raises(BenchmarkError, match="has changed since"):
        service.resume("garbled", settings, current_store())


def test_resume_keeps_the_stored_concurrency(small_sets, monkeypatch):
    test_csv, _ = small_sets
    settings = current_settings()
    store = current_store()
    params = build_params(settings, test_csv, "kb-bayes", limit=4, concurrency=3)
    service.launch("ddxplus", params, settings, store, run_id="three-workers")
    assert store.get_run("three-workers").config["params"]["concurrency"] == 3
    seen: list[int] = []
    real = service.BatchRunner

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(kwargs["concurrency"])

    monkeypatch.setattr(service, "BatchRunner", Recording)
    service.resume("three-workers", settings, store)
    assert seen == [3]
    # Another launch with the same id (concurrency not given) continues with the stored 3 as well.
    service.launch("ddxplus", build_params(settings, test_csv, "kb-bayes", limit=4), settings, store,
                   run_id="three-workers")
    assert seen == [3, 3]


def test_agent_by_import_path(small_sets):
    test_csv, _ = small_sets
    done = _run("--patients", test_csv, "--agent", f"{__name__}:FirstQuestionsAgent", "--limit", "5",
                "--run-id", "outside", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["IL"] == 3.0  # two questions + 1
    settings = current_settings()
    store = current_store()
    params = build_params(settings, test_csv, f"{__name__}:FirstQuestionsAgent", limit=5,
                          agent_params={"n": 4, "guess": "Bronchitis"}, concurrency=2)
    assert params.reads_kb is False and params.agent_params == {"n": 4, "guess": "Bronchitis"}
    before = FirstQuestionsAgent.instances
    service.launch("ddxplus", params, settings, store, run_id="outside-here")
    assert FirstQuestionsAgent.instances == before  # the agent built for the params runs the cases
    results = store.results("outside-here")
    assert len(results) == 5 and all(r.ok for r in results)
    assert all(r.output["differential"] == {"Bronchitis": 1.0} and len(r.output["inquired"]) == 4
               for r in results)
    assert all(len(store.turns("outside-here", r.case_id)) == 6 for r in results)
    assert {t.actor for t in store.turns("outside-here", results[0].case_id)[1:]} == {"first-questions"}


def test_spec_is_light_and_lists_the_page():
    code = ("import sys; import medeval_core.benchmarks.ddxplus as d, medeval_core.benchmarks.ddxplus.cli; "
            "from medeval_core import registry; registry.specs(); "
            "print(sorted(m for m in ('numpy', 'pandas', 'sklearn', 'openai') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert done.stdout.strip() == "[]"
    spec = registry.spec("ddxplus")
    assert Path(spec.pages[0].path).samefile(REPO_ROOT / "medeval_core/benchmarks/ddxplus/page_walkthrough.py")
    assert spec.model_roles[0].name == "chat"


def test_concurrent_cases_run_at_once(small_sets, monkeypatch):
    test_csv, _ = small_sets
    settings = current_settings()
    real = ddx_benchmark.consult
    active, peak, lock = [0], [0], threading.Lock()
    barrier = threading.Barrier(3, timeout=10)

    def consult(agent, kb, patient, ctx):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()  # the three cases meet here only if they run at once
            return real(agent, kb, patient, ctx)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(ddx_benchmark, "consult", consult)
    params = build_params(settings, test_csv, "kb-bayes", limit=3, concurrency=3)
    report = service.launch("ddxplus", params, settings, current_store())
    assert report.done == 3 and peak[0] == 3


def test_score_run_recomputes_the_metrics_from_stored_outputs(small_sets):
    test_csv, _ = small_sets
    settings = current_settings()
    store = current_store()
    params = build_params(settings, test_csv, "kb-bayes", limit=6)
    service.launch("ddxplus", params, settings, store, run_id="to-rescore")
    service.score_run("to-rescore", service.ScoreParams(scorer="ddxplus-metrics"), settings, store,
                      run_id="rescored")
    first = {r.case_id: r.metrics for r in store.results("to-rescore")}
    again = {r.case_id: r.metrics for r in store.results("rescored")}
    assert again == first
    summary = service.stored_summary(store, "rescored")
    assert summary is not None and summary.extras["finished"] == 6
    assert summary.extras["metrics"] == service.stored_summary(store, "to-rescore").extras["metrics"]
    with pytest.raises(BenchmarkError, match="no scorer called"):
        service.score_run("to-rescore", service.ScoreParams(scorer="judge"), settings, store)


def test_repetitions_complete_with_a_summary_from_the_cli_and_the_launcher(isolated_store: str,
                                                                          data_dir: Path) -> None:
    """Three repetitions of each patient: the run completes (each repetition scored on its own), its summary pools
    them and gives each repetition's metrics and their spread, from the command line and from New run alike."""
    from medeval_core.runs import launch
    from medeval_core.settings import load_settings
    from medeval_core.store import Store
    from tests.test_launcher import wait_finished

    patients = data_dir / "ddxplus" / "patients_sample_en.csv"
    env = {**os.environ, "MEDEVAL_DB_URL": isolated_store}
    done = subprocess.run([sys.executable, "-m", "medeval_core", "run", "ddxplus", "--patients", str(patients),
                           "--agent", "kb-bayes", "--limit", "4", "--repetitions", "3", "--run-id", "ddx-reps"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Across 3 repetitions (mean ± SD, range):" in done.stdout and "repetition 2:" in done.stdout
    store = Store(isolated_store)
    settings = load_settings()
    values = {s.name: s.default for s in launch.form("ddxplus", settings)} | {"limit": 4, "repetitions": 3}
    launched = launch.launch(launch.plan("ddxplus", values, settings), settings)
    assert wait_finished(store, launched.run_id) == "completed"
    for run_id in ("ddx-reps", launched.run_id):
        row = store.get_run(run_id)
        assert row.status == "completed" and row.error is None
        summary = RunSummary.model_validate(row.summary)
        assert summary.counts.done == 12 and [r.repetition for r in summary.repetitions] == [0, 1, 2]
        assert all(r.counts.done == 4 for r in summary.repetitions)
        spread = {item.name: item for item in summary.spread}
        gtpa1 = summary.metric("GTPA@1")
        assert spread["GTPA@1"].repetitions == 3 and spread["GTPA@1"].mean == pytest.approx(gtpa1.value)
        assert gtpa1.interval is not None and gtpa1.role == "accuracy" and summary.metric("IL").role == "turns"
        assert summary.case_metrics and all(m.n == 4 for m in summary.case_metrics)
    from medeval_core.results.reports import run_report_html
    from medeval_core.results.summaries import run_listings

    report = run_report_html(store, "ddx-reps")
    assert "Across 3 repetitions" in report and gtpa1.formatted_interval() in report  # the interval column is filled
    [listing] = [r for r in run_listings(store.list_runs(), {}) if r.id == "ddx-reps"]
    assert listing.headline.startswith("GTPA@1") and f"({gtpa1.formatted_interval()})" in listing.headline
