"""The administrator's figures against values worked out by hand, the CLI report, and the CSV export from which
the same figures can be recomputed."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from medeval_core.annotation import answers, tasks
from medeval_core.annotation.report import export_rows, task_report, write_csv
from medeval_core.context import current_store
from tests.annotation_fixtures import SeededRuns, cli, create_task

# The seeded runs and accounts (fixtures ``seeded`` and ``seeded_template``).
pytest_plugins = ("tests.annotation_seeded",)


def answer_resolved(task_id: str, annotator: str, by_case: dict[str, str], criterion: str) -> None:
    """Answer in terms of the runs (A, B, tie); translated to the side each item shows A on."""
    store = current_store()
    keys = {item.id: item for item in tasks.task_items(store, task_id)}
    for queued in answers.my_items(store, annotator, task_id):
        item = keys[queued.item_id]
        wanted = by_case.get(item.case_id)
        if wanted is None:
            continue
        value = "tie" if wanted == "tie" else ("left" if item.key["left"] == wanted else "right")
        answers.record_answer(store, annotator, item.id, criterion, value)


def test_pairwise_win_rate_wilson_interval_and_cohens_kappa(seeded: SeededRuns) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators",
                       "dr.ada,dr.bo", "--criteria", "accuracy", "--seed", "9")
    # dr.ada first prefers B on case 2, then changes her mind: only the newer answer counts.
    answer_resolved(task["id"], "dr.ada", {"2": "B"}, "accuracy")
    answer_resolved(task["id"], "dr.ada", {"1": "A", "2": "A", "3": "B", "4": "tie", "5": "A", "6": "B"}, "accuracy")
    answer_resolved(task["id"], "dr.bo", {"1": "A", "2": "B", "3": "B", "4": "tie", "5": "A", "6": "A"}, "accuracy")
    report = task_report(current_store(), task["id"])
    [win] = report.win_rates
    # A 3+3, B 2+2, ties 1+1: 6 of 10 decisive answers; Wilson 95 % for 6/10 is 31.27 %-83.18 %.
    assert (win.a_wins, win.b_wins, win.ties) == (6, 4, 2)
    assert win.a_win_rate == pytest.approx(0.6)
    assert win.interval == pytest.approx((0.312674, 0.831820), abs=1e-6)
    assert win.system_a.startswith("vlm-alpha-7b") and win.system_b.startswith("lesion-beta-13b")
    # Agreement on 4 of 6 items; both marginals A 3/6, B 2/6, tie 1/6, so pe = 14/36 and kappa = 5/11.
    [agreement] = report.agreement
    assert (agreement.statistic, agreement.annotators, agreement.overlapping_items) == ("cohen_kappa", 2, 6)
    assert agreement.value == pytest.approx(5 / 11)
    assert (report.annotation_rows, report.current_answers, report.assignments_done) == (13, 12, 12)

    # The CLI gives the same figures, and the export lets anyone recompute them.
    assert json.loads(cli("annotations", "report", task["id"], "--json")) == report.model_dump(mode="json")
    frame = pd.read_csv(io.StringIO(write_csv(export_rows(current_store(), task["id"]))))
    assert len(frame) == 13 and set(frame["annotator"]) == {"dr.ada", "dr.bo"}
    assert frame["created_at"].notna().all() and (frame["task_id"] == task["id"]).all()
    current = frame[frame["current"]]
    counts = current["resolved"].value_counts()
    assert counts["A"] / (counts["A"] + counts["B"]) == pytest.approx(win.a_win_rate)
    superseded = frame[~frame["current"]]
    assert len(superseded) == 1 and superseded.iloc[0]["resolved"] == "B"
    assert frame.loc[frame["supersedes_id"].notna(), "supersedes_id"].tolist() == [superseded.iloc[0]["annotation_id"]]


def test_judge_agreement_kappa_confusion_and_krippendorff_alpha(seeded: SeededRuns) -> None:
    task = create_task("judge-review", "--run", seeded.judge_run_a, "--annotators", "dr.ada,dr.bo,dr.cy",
                       "--seed", "4")
    store = current_store()
    items = {item.case_id: item for item in tasks.task_items(store, task["id"])}
    assert {case: item.key["judge_correct"] for case, item in items.items()} == {
        "1": True, "2": False, "3": True, "4": True, "5": True, "6": True}
    given = {"dr.ada": {"1": "agree", "2": "agree", "3": "disagree", "4": "agree"},
             "dr.bo": {"1": "agree", "2": "agree", "3": "disagree", "4": "disagree"},
             "dr.cy": {"1": "agree", "2": "disagree", "3": "disagree"}}
    for annotator, by_case in given.items():
        for case, value in by_case.items():
            answers.record_answer(store, annotator, items[case].id, tasks.JUDGE_CRITERION, value)
    report = task_report(store, task["id"])
    [judge] = report.judge_agreement
    # (judge, clinician) calls: TT 4, TF 4, FT 1, FF 2 over 11 answers; po = 6/11, pe = 58/121, kappa = 8/63.
    assert judge.judge == "offline-rules-v1" and judge.n == 11
    assert judge.confusion == {"correct": {"correct": 4, "incorrect": 4}, "incorrect": {"correct": 1, "incorrect": 2}}
    assert judge.kappa == pytest.approx(8 / 63) and judge.agree_share == pytest.approx(6 / 11)
    # Three annotators: Krippendorff's alpha (nominal) over the 4 items two or more answered. Coincidences
    # o_aa 4, o_ad = o_da 2, o_dd 3 (n 11): Do = 4/11, De = 2*6*5/(11*10) = 6/11, alpha = 1 - 4/6 = 1/3.
    [agreement] = report.agreement
    assert (agreement.statistic, agreement.annotators, agreement.overlapping_items) == ("krippendorff_alpha", 3, 4)
    assert agreement.value == pytest.approx(1 / 3)


def test_patient_answer_means_with_t_intervals(seeded: SeededRuns) -> None:
    task = create_task("patient-answers", "--run", seeded.ddxplus_run, "--annotators", "dr.ada,dr.bo",
                       "--seed", "8")
    store = current_store()
    items = tasks.task_items(store, task["id"])
    truth = {"dr.ada": ["2", "2", "1", "0"], "dr.bo": ["2", "1"]}
    for annotator, values in truth.items():
        for item, value in zip(items, values, strict=False):
            answers.record_answer(store, annotator, item.id, "truthfulness", value)
    for item in items[:4]:
        answers.record_answer(store, "dr.ada", item.id, "relevance", "2")
    report = task_report(store, task["id"])
    truthfulness, relevance = report.ratings
    # [2, 2, 1, 0, 2, 1]: mean 4/3, sd sqrt(2/3), se 1/3, t(0.975, 5) = 2.570582: 0.476473 to 2.19 -> 2 (scale).
    assert (truthfulness.patient_system, truthfulness.criterion, truthfulness.n) == (
        "ddxplus simulated patient", "truthfulness", 6)
    assert truthfulness.mean == pytest.approx(4 / 3)
    assert truthfulness.interval == pytest.approx((4 / 3 - 2.5705818 / 3, 2.0))
    assert (relevance.n, relevance.mean, relevance.interval) == (4, 2.0, (2.0, 2.0))
    # Two annotators share items 1 and 2 on truthfulness: (2,2) and (2,1): po 1/2 = pe 1/2, kappa 0. Relevance
    # has one annotator, so no agreement figure.
    [agreement] = report.agreement
    assert (agreement.criterion, agreement.overlapping_items, agreement.value) == ("truthfulness", 2, 0.0)


def test_agreement_is_undefined_when_every_answer_is_the_same(seeded: SeededRuns, recwarn) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators",
                       "dr.ada,dr.bo", "--criteria", "accuracy", "--seed", "9")
    everything_tied = dict.fromkeys("123456", "tie")
    for annotator in ("dr.ada", "dr.bo"):
        answer_resolved(task["id"], annotator, everything_tied, "accuracy")
    report = task_report(current_store(), task["id"])
    [agreement] = report.agreement
    assert (agreement.value, agreement.overlapping_items) == (None, 6)  # chance agreement is 1: kappa is 0/0
    [win] = report.win_rates
    assert (win.ties, win.a_win_rate, win.interval) == (12, None, None)
    assert not [w for w in recwarn if "kappa" in str(w.message) or "label" in str(w.message)]


def test_an_undefined_agreement_says_why() -> None:
    from medeval_core.annotation.report import Agreement

    def shown(value: float | None, overlap: int, all_ties: bool = False) -> str:
        return Agreement(criterion="c", statistic="cohen_kappa", value=value, annotators=2,
                         overlapping_items=overlap, all_ties=all_ties).shown

    assert shown(None, 3, all_ties=True) == "undefined: all ties"
    assert shown(None, 3) == "undefined: every answer the same"
    assert shown(None, 0) == "undefined: no item answered by two annotators"
    assert shown(0.5, 3) == "0.5000"
