"""Run-level DDI summaries as ``RunSummary``.

A model (or responses) run: how many responses there are, and the backend that produced them. A score run (the
judge, or exact labels): ``accuracy_expected`` over expected cases and ``accuracy_judged`` over judged ones, with
Wilson 95 % intervals, by skin tone and by malignancy, and for classification a confusion matrix in the label
space. ``extras`` keeps the flat keys the CLI's ``--json`` has always printed (expected, judged, correct, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from medeval_core.benchmark import Metric, MetricGroup, RunCounts, RunSummary
from medeval_core.benchmarks.ddi.cases import SKIN_TONES, DdiCase
from medeval_core.benchmarks.ddi.images import describe_refusals, refusal_counts
from medeval_core.benchmarks.ddi.judge import accuracy_summary
from medeval_core.benchmarks.ddi.params import DdiParams
from medeval_core.benchmarks.ddi.tasks import NO_LABEL, canonical_label
from medeval_core.records import CaseResult

TITLE = "DDI lesion diagnosis"


def _provenance(result: CaseResult) -> dict[str, Any]:
    score = result.scores.get("correct")
    return dict(score.get("provenance") or {}) if isinstance(score, dict) else {}


def _accuracy(cases: Sequence[DdiCase], results: Sequence[CaseResult], repetitions: int) -> dict[str, Any]:
    ids = {case.case_id for case in cases}
    mine = [r for r in results if r.case_id in ids]
    judged = [r for r in mine if r.ok]
    correct = sum(bool(r.metrics.get("correct")) for r in judged)
    return accuracy_summary(len(cases) * repetitions, len(judged), correct, len(mine) - len(judged))


def _groups(cases: Sequence[DdiCase], results: Sequence[CaseResult], repetitions: int,
            key: Callable[[DdiCase], Any], names: dict[Any, str]) -> dict[str, Any]:
    return {
        name: _accuracy([case for case in cases if key(case) == value], results, repetitions)
        for value, name in names.items()
        if any(key(case) == value for case in cases)
    }


def label_confusion(results: Sequence[CaseResult], labels: Sequence[str]) -> dict[str, Any]:
    """Rows: reference label; columns: predicted label, plus a column for answers without one exact label."""
    from sklearn.metrics import confusion_matrix

    pairs = [(_provenance(r).get("reference_label"), _provenance(r).get("predicted_label") or NO_LABEL)
             for r in results if r.ok]
    columns = [*labels, NO_LABEL]
    matrix = confusion_matrix([p[0] for p in pairs], [p[1] for p in pairs], labels=columns) if pairs else None
    return {
        "rows": list(labels),
        "columns": columns,
        "matrix": [[int(v) for v in row[: len(columns)]] for row in matrix[: len(labels)]] if matrix is not None
        else [[0] * len(columns) for _ in labels],
    }


def _metrics(values: dict[str, Any]) -> list[Metric]:
    return [
        Metric(name="accuracy_expected", value=values["accuracy_expected"],
               interval=tuple(values["accuracy_expected_wilson95"]) if values["accuracy_expected_wilson95"] else None,
               n=values["expected"], denominator="expected cases", method="Wilson 95%"),
        Metric(name="accuracy_judged", value=values["accuracy_judged"],
               interval=tuple(values["accuracy_judged_wilson95"]) if values["accuracy_judged_wilson95"] else None,
               n=values["judged"], denominator="judged cases", method="Wilson 95%", role="accuracy"),
    ]


def is_scored(results: Sequence[CaseResult]) -> bool:
    """Whether these are a score run's results (a verdict per case) rather than a model run's responses."""
    if any("correct" in r.metrics for r in results):
        return True
    return not any("response_chars" in r.metrics for r in results)


def summarize_run(params: DdiParams, cases: Sequence[DdiCase], results: Sequence[CaseResult],
                  counts: RunCounts) -> RunSummary:
    repetitions = params.repetitions
    if not is_scored(results):
        backend = next((r.output.get("backend") for r in results if r.ok and r.output.get("backend")), None)
        refused = refusal_counts(r.error for r in results)
        notes = [f"{describe_refusals(refused, len(cases))}: their cases failed with the reason; fix or remove those "
                 "files and resume the run."] if refused else []
        return RunSummary(
            benchmark="ddi", title=f"{TITLE} ({params.mode}): responses", counts=counts,
            headline=[Metric(name="responses", value=float(counts.done), n=counts.expected,
                             denominator="expected cases", unit="count")],
            extras={"stage": params.root.stage, "mode": params.mode, "expected": counts.expected,
                    "responses": counts.done, "failed": counts.failed, "pending": counts.pending,
                    "backend": backend, "images_refused": dict(refused)},
            notes=notes,
        )
    provenance = next((_provenance(r) for r in results if r.ok), {})
    scorer = ({"judge": provenance["judge"], "judge_model": provenance.get("judge_model")} if "judge" in provenance
              else {"scorer": provenance.get("scorer", "exact-label")} if provenance else {})
    overall = _accuracy(cases, results, repetitions)
    by_tone = _groups(cases, results, repetitions, lambda c: c.skin_tone, {tone: str(tone) for tone in SKIN_TONES})
    by_malignancy = _groups(cases, results, repetitions, lambda c: c.malignant, {True: "malignant", False: "benign"})
    extras: dict[str, Any] = {"stage": "judge", "mode": params.mode, **scorer, **overall,
                              "by_skin_tone": by_tone, "by_malignancy": by_malignancy}
    if params.mode == "classification" and params.labels:
        extras["confusion_matrix"] = label_confusion(results, params.labels)
        extras["answers_without_exact_label"] = sum(
            1 for r in results if r.ok and _provenance(r).get("predicted_label") is None)
    groups = [MetricGroup(dimension="skin tone", label=name, metrics=_metrics(values)[1:])
              for name, values in by_tone.items()]
    groups += [MetricGroup(dimension="malignancy", label=name, metrics=_metrics(values)[1:])
               for name, values in by_malignancy.items()]
    judge = scorer.get("judge") or scorer.get("scorer")
    notes = [f"scored by {judge}; pending and failed cases are not in accuracy_judged"] if judge else []
    if params.mode == "classification" and params.labels:
        notes += mapped_references(cases, params.labels)
    return RunSummary(benchmark="ddi", title=f"{TITLE} ({params.mode})", counts=counts, headline=_metrics(overall),
                      groups=groups, extras=extras, notes=notes)


def mapped_references(cases: Sequence[DdiCase], labels: Sequence[str]) -> list[str]:
    """A note when references were read as candidate labels spelt otherwise ("melanoma" as "Melanoma")."""
    mapped = {case.reference: label for case in cases
              if (label := canonical_label(case.reference, labels)) is not None and label != case.reference}
    if not mapped:
        return []
    examples = ", ".join(f"{reference!r} as {label!r}" for reference, label in list(mapped.items())[:3])
    return [f"{len(mapped)} reference spelling(s) were read as the candidate label they name ({examples}); the "
            "answers must still spell the label exactly."]
