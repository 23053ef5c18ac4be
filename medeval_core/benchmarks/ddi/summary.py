"""Run-level DDI scores: accuracy over expected and over judged cases with Wilson intervals, by skin tone and by
malignancy, and for classification a confusion matrix in the label space."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sklearn.metrics import confusion_matrix

from medeval_core.benchmarks.ddi.cases import SKIN_TONES, DdiCase
from medeval_core.judges.ddi import accuracy_summary
from medeval_core.records import CaseResult, CaseStatus

NO_LABEL = "(no single label)"


def _accuracy(cases: Sequence[DdiCase], by_id: dict[str, CaseResult]) -> dict[str, Any]:
    results = [by_id[case.case_id] for case in cases if case.case_id in by_id]
    judged = [r for r in results if r.status == CaseStatus.OK]
    failed = [r for r in results if r.status == CaseStatus.FAILED]
    correct = sum(bool(r.metrics.get("correct")) for r in judged)
    return accuracy_summary(len(cases), len(judged), correct, len(failed))


def _groups(cases: Sequence[DdiCase], by_id: dict[str, CaseResult], key: Callable[[DdiCase], Any],
            names: dict[Any, str]) -> dict[str, Any]:
    return {
        name: _accuracy([case for case in cases if key(case) == value], by_id)
        for value, name in names.items()
        if any(key(case) == value for case in cases)
    }


def label_confusion(cases: Sequence[DdiCase], by_id: dict[str, CaseResult], labels: Sequence[str]) -> dict[str, Any]:
    """Rows: reference label; columns: predicted label, plus a column for answers without one exact label."""
    pairs = [
        (by_id[case.case_id].output["reference_label"], by_id[case.case_id].output["predicted_label"] or NO_LABEL)
        for case in cases
        if case.case_id in by_id and by_id[case.case_id].status == CaseStatus.OK
    ]
    columns = [*labels, NO_LABEL]
    matrix = confusion_matrix([p[0] for p in pairs], [p[1] for p in pairs], labels=columns) if pairs else None
    return {
        "rows": list(labels),
        "columns": columns,
        "matrix": [[int(v) for v in row[: len(columns)]] for row in matrix[: len(labels)]] if matrix is not None
        else [[0] * len(columns) for _ in labels],
    }


def summarize_scores(cases: Sequence[DdiCase], results: Sequence[CaseResult], mode: str,
                     labels: Sequence[str] | None = None, scorer: dict[str, Any] | None = None) -> dict[str, Any]:
    by_id = {result.case_id: result for result in results}
    summary: dict[str, Any] = {
        "stage": "judge",
        "mode": mode,
        **(scorer or {}),
        **_accuracy(cases, by_id),
        "by_skin_tone": _groups(cases, by_id, lambda c: c.skin_tone, {tone: str(tone) for tone in SKIN_TONES}),
        "by_malignancy": _groups(cases, by_id, lambda c: c.malignant, {True: "malignant", False: "benign"}),
    }
    if mode == "classification" and labels is not None:
        summary["confusion_matrix"] = label_confusion(cases, by_id, labels)
        summary["answers_without_exact_label"] = sum(
            1 for r in by_id.values() if r.status == CaseStatus.OK and r.output.get("predicted_label") is None
        )
    return summary
