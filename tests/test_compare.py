"""Run summaries: cases (not draws) are the unit, binary metrics get Wilson intervals, summaries are cached."""

import numpy as np
import pytest

from medeval_core.metrics.stats import bootstrap_mean_ci, wilson_interval, wilson_intervals
from medeval_core.records import CaseRecords, CaseResult, CaseStatus, RunConfig
from medeval_core.results import compare
from medeval_core.results.compare import compare_runs, run_summaries, summarize_metrics
from medeval_core.store import Store


def result(case: str, rep: int = 0, run: str = "r", **metrics: object) -> CaseResult:
    return CaseResult(run_id=run, case_id=case, repetition=rep, status=CaseStatus.OK, metrics=metrics)


def test_repetitions_are_averaged_per_case_before_the_interval() -> None:
    # c1 right on 3 of 3 repetitions, c2 on 1 of 3: two cases, proportion (1 + 1/3) / 2, not 4 successes in 6.
    results = [result("c1", rep, correct=True, score=float(rep)) for rep in range(3)]
    results += [result("c2", rep, correct=rep == 0, score=10.0) for rep in range(3)]
    by_metric = {s.metric: s for s in summarize_metrics(results)}
    correct = by_metric["correct"]
    assert (correct.n, correct.draws) == (2, 6)
    assert correct.value == pytest.approx((1 + 1 / 3) / 2)
    low, high = wilson_intervals([correct.value], [2])
    assert (correct.ci_low, correct.ci_high) == (pytest.approx(low[0]), pytest.approx(high[0]))
    score = by_metric["score"]
    assert (score.n, score.draws) == (2, 6) and score.value == pytest.approx((1.0 + 10.0) / 2)
    # n cases, not n draws: the interval of 2 cases is wider than the one 6 independent cases would give.
    assert correct.ci_high - correct.ci_low > np.subtract(*wilson_interval(4, 6)[::-1])


def test_a_binary_metric_uses_wilson_and_is_never_bootstrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_bootstrap(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a binary metric was bootstrapped")

    monkeypatch.setattr(compare, "bootstrap_mean_ci", no_bootstrap)
    results = [result(f"c{i}", correct=i % 4 != 0) for i in range(40)]
    [correct] = summarize_metrics(results)
    assert correct.kind == "proportion" and correct.interval == "wilson" and correct.n == 40
    assert (correct.ci_low, correct.ci_high) == pytest.approx(wilson_interval(30, 40))


def test_failed_and_non_numeric_values_are_left_out() -> None:
    results = [result("c1", correct=True, label="x", cost=float("nan")), result("c2", correct=False, cost=2.0),
               CaseResult(run_id="r", case_id="c3", status=CaseStatus.FAILED, error="boom", metrics={"correct": True})]
    by_metric = {s.metric: s for s in summarize_metrics(results)}
    assert set(by_metric) == {"correct", "cost"}
    assert by_metric["correct"].n == 2 and by_metric["cost"].n == 1 and by_metric["cost"].value == 2.0


def test_vectorised_wilson_matches_statsmodels() -> None:
    successes = np.array([0, 1, 50, 72, 81, 10])
    n = np.array([10, 3, 100, 158, 160, 10])
    low, high = wilson_intervals(successes / n, n)
    for s, size, lo, hi in zip(successes, n, low, high, strict=True):
        assert (lo, hi) == pytest.approx(wilson_interval(int(s), int(size)), abs=1e-12)
    assert [v.tolist() for v in wilson_intervals([0.5], [0])] == [[0.0], [1.0]]


def test_vectorised_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    values = np.random.default_rng(3).normal(5, 2, size=500)
    first = bootstrap_mean_ci(values, seed=1)
    assert first == bootstrap_mean_ci(values, seed=1)
    assert first[0] < values.mean() < first[1]
    assert first[1] - first[0] == pytest.approx(2 * 1.96 * values.std() / np.sqrt(500), rel=0.2)
    assert bootstrap_mean_ci([2.0, 2.0]) == (2.0, 2.0)
    with pytest.raises(ValueError):
        bootstrap_mean_ci([])


def test_paired_comparison_reduces_repetitions_per_case() -> None:
    a = [result(f"c{i}", rep, run="a", correct=True) for i in range(4) for rep in range(2)]
    b = [result(f"c{i}", rep, run="b", correct=rep == 0 or i == 0) for i in range(4) for rep in range(2)]
    [correct] = compare_runs("a", a, "b", b).paired
    assert correct.shared_cases == 4
    assert correct.value_a == 1.0 and correct.value_b == pytest.approx((1 + 0.5 * 3) / 4)
    # Per-case shares are not single outcomes, so the paired test is the bootstrap over per-case differences.
    assert correct.test == "paired percentile bootstrap" and correct.p_value is None
    assert correct.difference_ci_low <= correct.difference <= correct.difference_ci_high

    one_each = compare_runs("a", [r for r in a if r.repetition == 0], "b", [r for r in b if r.repetition == 1])
    assert one_each.paired[0].test == "exact McNemar" and one_each.paired[0].only_a_correct == 3


def test_run_summaries_are_cached_until_a_result_is_added(isolated_store: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(isolated_store)
    store.create_run(RunConfig(benchmark="demo"), run_id="r")
    store.save_case_records([CaseRecords(result=result(f"c{i}", correct=i < 3)) for i in range(4)])
    calls = []
    real = compare.summarize_metric_rows
    monkeypatch.setattr(compare, "summarize_metric_rows", lambda rows: calls.append(1) or real(rows))
    first = run_summaries(store, "r")
    assert run_summaries(store, "r") == first and len(calls) == 1
    store.save_case_records([CaseRecords(result=result("c9", correct=True))])
    [updated] = run_summaries(store, "r")
    assert len(calls) == 2 and updated.n == 5 and updated.value == pytest.approx(0.8)
    assert [updated] == summarize_metrics(store.results("r"))  # the same as over the full records


def stored_run(store: Store, run_id: str, benchmark: str, params: dict, kind: str = "batch",
               cases: dict[str, bool] | None = None) -> None:
    from medeval_core.records import RunKind

    store.create_run(RunConfig(benchmark=benchmark, params=params, kind=RunKind(kind)), run_id=run_id)
    store.save_case_records([CaseRecords(result=result(case_id, run=run_id, correct=correct))
                             for case_id, correct in (cases or {}).items()])


def responses(mode: str) -> dict:
    return {"stage": "responses", "mode": mode, "responses_file": "/data/responses.jsonl"}


def test_sessions_are_never_paired(isolated_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every lesion-page evaluation has the case id "lesion": two of them must not make "1 shared case"."""
    from medeval_core.benchmark import BenchmarkError
    from medeval_core.cli import main

    store = Store(isolated_store)
    session = {"stage": "interactive", "mode": "open"}
    stored_run(store, "lesion-1", "ddi", session, kind="session", cases={"lesion": True})
    stored_run(store, "lesion-2", "ddi", session, kind="session", cases={"lesion": False})
    with pytest.raises(BenchmarkError, match="lesion-1 is an interactive session"):
        compare.run_comparison(store, "lesion-1", "lesion-2")
    assert main(["runs", "compare", "lesion-1", "lesion-2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "only batch runs are compared" in err


def test_only_the_same_dataset_and_task_are_paired(isolated_store: str) -> None:
    from medeval_core.benchmark import BenchmarkError

    store = Store(isolated_store)
    cases_a = {"img-1": True, "img-2": False, "img-3": True}
    stored_run(store, "open-a", "ddi", responses("open"), cases=cases_a)
    stored_run(store, "open-b", "ddi", responses("open"), cases={"img-1": False, "img-2": False, "img-3": True})
    stored_run(store, "classify", "ddi", responses("classification"), cases=cases_a)
    stored_run(store, "other", "ddxplus", {"patients": "/p.csv", "kb": "/kb", "agent": "kb-bayes"}, cases=cases_a)
    [paired] = compare.run_comparison(store, "open-a", "open-b").paired
    assert paired.shared_cases == 3 and paired.test == "exact McNemar" and paired.p_value is not None
    with pytest.raises(BenchmarkError, match=r"not on the same dataset and task \(task: open against "
                                             r"classification\)"):
        compare.run_comparison(store, "open-a", "classify")
    with pytest.raises(BenchmarkError, match="open-a is a ddi run and run other a ddxplus run"):
        compare.run_comparison(store, "open-a", "other")


def test_ddxplus_runs_pair_only_on_the_same_patients_file() -> None:
    from medeval_core import registry
    from medeval_core.records import InputFile

    ddxplus = registry.benchmark("ddxplus")
    params = ddxplus.parse_params({"patients": "/p.csv", "kb": "/kb", "agent": "kb-bayes"})
    key = ddxplus.comparison_key
    one = {"patients": InputFile(path="/p.csv", sha256="a" * 64, bytes=1)}
    other = {"patients": InputFile(path="/p.csv", sha256="b" * 64, bytes=1),
             "train": InputFile(path="/t.csv", sha256="c" * 64, bytes=1)}
    assert key(params, one) == key(params, {**one, "train": other["train"]})  # another agent, same patients
    assert key(params, one) != key(params, other)  # a rewritten patients file: row ids name other patients
