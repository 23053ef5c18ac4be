"""DDXPlus batch runs through the shared runner: CLI, stored turns and summary, resume after failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from medeval_core import jobs
from medeval_core.benchmarks import plan_for
from medeval_core.benchmarks.ddxplus.plan import run_params
from medeval_core.context import current_settings, current_store
from medeval_core.metrics.ddxplus import METRIC_KEYS
from medeval_core.records import CaseStatus
from medeval_core.runs import BatchRunner
from tests.ddxplus_fixtures import sample_csv, write_patients

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_sets(tmp_path):
    """40 patients to question and the other sample patients to learn from, as two official-format files."""
    import csv

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


def test_run_stores_results_turns_and_a_summary_then_resumes_failed_cases(small_sets):
    test_csv, train_csv = small_sets
    settings = current_settings()
    store = current_store()
    params = run_params(settings, test_csv, "kb-bayes", train=train_csv)
    assert params["reads_kb"] is True and params["agent_params"]["training_patients"] == 1026
    config = jobs.new_run_config("ddxplus", settings, params)
    plan = plan_for(config, settings)
    broken = {plan.cases[3].case_id, plan.cases[7].case_id}

    def flaky(case, repetition):
        if case.case_id in broken:
            raise RuntimeError("simulated crash")
        return plan.run_case(case, repetition)

    first = BatchRunner(store).start(config, plan.cases, flaky, run_id="ddx-resume")
    assert (first.done, first.failed) == (38, 2)
    report = jobs.resume("ddx-resume", settings, store)
    assert (report.done, report.failed, report.pending) == (40, 0, 0)
    results = store.results("ddx-resume")
    assert len(results) == 40 and all(r.status == CaseStatus.OK for r in results)
    turns = store.turns("ddx-resume", plan.cases[3].case_id)
    assert turns[0].action == "intake" and turns[-1].action == "differential"
    assert [t.payload["root"] for t in turns[1:-1]] == next(
        r.output["inquired"] for r in results if r.case_id == plan.cases[3].case_id)
    summary = store.get_run("ddx-resume").summary
    assert list(summary["metrics"]) == list(METRIC_KEYS)
    assert summary["finished"] == 40 and summary["failed"] == 0 and summary["reads_kb"] is True
    assert summary["metrics"]["GTPA@1"] >= 90 and summary["metrics"]["IL"] <= 12
    assert sum(group["n"] for group in summary["per_pathology"].values()) == 40
    assert set(summary["reference"]) == {"AARLC", "BASD"}
    # Per-case metrics agree with the vectorised summary.
    for key in METRIC_KEYS:
        assert np.mean([r.metrics[key] for r in results]) == pytest.approx(summary["metrics"][key], abs=1e-9)


def test_failed_cases_count_as_empty_predictions_in_the_run_metrics(small_sets):
    test_csv, train_csv = small_sets
    settings = current_settings()
    store = current_store()
    config = jobs.new_run_config("ddxplus", settings, run_params(settings, test_csv, "kb-bayes", train=train_csv,
                                                                 limit=10))
    plan = plan_for(config, settings)

    def half(case, repetition):
        if int(case.case_id.split("-")[1]) % 2:
            raise RuntimeError("down")
        return plan.run_case(case, repetition)

    run_id = BatchRunner(store).start(config, plan.cases, half).run_id
    summary = plan.summarize(store.results(run_id))
    assert summary["finished"] == 5 and summary["failed"] == 5
    assert summary["metrics"]["GTPA"] == pytest.approx(summary["metrics_completed"]["GTPA"] / 2)


def test_run_command_prints_reference_rows_and_json(small_sets, tmp_path):
    test_csv, train_csv = small_sets
    base = [sys.executable, "-m", "medeval_core", "run", "ddxplus", "--patients", str(test_csv), "--train",
            str(train_csv), "--agent", "kb-bayes", "--limit", "12", "--run-id", "cli-run"]
    text = subprocess.run(base, capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert text.returncode == 0, text.stderr
    assert "AARLC" in text.stdout and "BASD" in text.stdout and "this run" in text.stdout
    assert "12 of 12 patients finished" in text.stdout
    # The same id again resumes (nothing left to do) and prints the same metrics as JSON.
    again = subprocess.run(base + ["--json"], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert again.returncode == 0, again.stderr
    assert list(json.loads(again.stdout)) == list(METRIC_KEYS)


def test_run_command_rejects_bad_input_in_one_sentence(tmp_path):
    bad = write_patients(tmp_path / "bad.csv", [])
    done = subprocess.run(
        [sys.executable, "-m", "medeval_core", "run", "ddxplus", "--patients", str(tmp_path / "missing.csv"),
         "--agent", "kb-bayes"], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert done.returncode == 2 and "does not exist" in done.stderr
    nokb = subprocess.run(
        [sys.executable, "-m", "medeval_core", "run", "ddxplus", "--patients", str(bad), "--agent", "kb-bayes",
         "--no-kb"], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert nokb.returncode == 2 and "needs training patients" in nokb.stderr


def test_resume_without_the_patients_file_is_a_plan_error(small_sets):
    from medeval_core.benchmarks import PlanError

    test_csv, train_csv = small_sets
    settings = current_settings()
    params = run_params(settings, test_csv, "kb-bayes", train=train_csv, limit=3)
    jobs.launch(jobs.new_run_config("ddxplus", settings, params), settings, current_store(), run_id="gone")
    test_csv.unlink()
    with pytest.raises(PlanError, match="does not exist"):
        jobs.resume("gone", settings, current_store())
