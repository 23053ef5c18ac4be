"""An administrator's figures for a task, from the current answers (the newest row per annotator, item and
criterion): win rates with Wilson 95 % intervals (ties apart), inter-annotator agreement, judge-versus-clinician
agreement, mean truthfulness and relevance per patient system; and every answer row, unblinded, for export.

Units: each current answer of each annotator is one observation (an item annotated by two people counts twice);
agreement is computed on the items that at least two annotators answered.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlmodel import col, func, select

from medeval_core.annotation.answers import current_rows
from medeval_core.annotation.items import run_title
from medeval_core.annotation.tasks import (
    FLAG,
    NOT_CRITERIA,
    PATIENT_CRITERIA,
    SKIP,
    Task,
    TaskKind,
    get_task,
    task_items,
)
from medeval_core.metrics.stats import cohens_kappa, krippendorff_alpha, wilson_interval
from medeval_core.store import AnnotationRow, Store
from medeval_core.store.annotation_tables import AnnotationAssignmentRow

RATING_SCALE = (0.0, 2.0)


class WinRate(BaseModel):
    criterion: str
    system_a: str
    system_b: str
    a_wins: int
    b_wins: int
    ties: int
    a_win_rate: float | None
    """A's wins over the decisive answers (ties excluded); None without any."""
    interval: tuple[float, float] | None = None
    """Wilson 95 % interval of ``a_win_rate``."""
    label_a: str = ""
    label_b: str = ""
    """The runs' labels as the results page shows them (``run_title``; the system name once a run is deleted)."""


class Agreement(BaseModel):
    criterion: str
    statistic: Literal["cohen_kappa", "krippendorff_alpha"]
    value: float | None
    """None when undefined (no overlap, or every answer the same)."""
    annotators: int
    overlapping_items: int

    @property
    def shown(self) -> str:
        """The value as a person reads it, saying why when it is undefined."""
        if self.value is not None:
            return f"{self.value:.4f}"
        if not self.overlapping_items:
            return "undefined: no item answered by two annotators"
        return "undefined: all ties" if self.all_ties else "undefined: every answer the same"

    all_ties: bool = False
    """Every overlapping answer was a tie (pairwise), which leaves the statistic undefined."""


class JudgeAgreement(BaseModel):
    judge: str
    n: int
    kappa: float | None
    agree_share: float | None
    confusion: dict[str, dict[str, int]]
    """judge's call -> clinician's call -> answers."""


class RatingMean(BaseModel):
    patient_system: str
    criterion: str
    n: int
    mean: float | None
    interval: tuple[float, float] | None = None
    """Student-t 95 % interval of the mean, clipped to the 0-2 scale."""


class AnnotationReport(BaseModel):
    task_id: str
    kind: TaskKind
    title: str
    criteria: list[str]
    seed: int | None
    items: int
    assignments: int
    assignments_done: int
    annotation_rows: int
    current_answers: int
    win_rates: list[WinRate] = Field(default_factory=list)
    agreement: list[Agreement] = Field(default_factory=list)
    judge_agreement: list[JudgeAgreement] = Field(default_factory=list)
    ratings: list[RatingMean] = Field(default_factory=list)


class AnnotatorProgress(BaseModel):
    """One annotator's standing on one task. Each assigned item counts once: flagged (whatever else was given),
    else done (every criterion answered), else skipped, else remaining."""

    task_id: str
    annotator: str
    assigned: int
    done: int
    skipped: int
    flagged: int
    remaining: int


class ItemFlag(BaseModel):
    """An item an annotator flagged, with their reason (the newest, when they flagged it again)."""

    task_id: str
    item_id: str
    case_id: str
    annotator: str
    reason: str
    flagged_at: str


class ExportRow(BaseModel):
    annotation_id: int
    created_at: str
    task_id: str
    task_kind: str
    item_id: str
    case_id: str
    annotator: str
    criterion: str
    value: str
    resolved: str
    """pairwise: A, B or tie (the runs in ``system``); judge review: the clinician's call; ratings: the rating."""
    system: str
    """pairwise: the system preferred ("" for a tie); ratings: the patient system; judge review: the judge."""
    judge_call: str
    current: bool
    supersedes_id: int | None


def _resolved(task: Task, key: dict[str, Any], row: AnnotationRow) -> tuple[str, str, str]:
    """(resolved value, system, judge call) of one answer, from the item's hidden key."""
    if row.criterion in NOT_CRITERIA:
        return "", "", ""
    if task.kind == TaskKind.PAIRWISE:
        resolved = "tie" if row.value == "tie" else str(key[row.value])
        return resolved, "" if resolved == "tie" else str(task.config["systems"][resolved]), ""
    if task.kind == TaskKind.JUDGE_REVIEW:
        judge_correct = bool(key["judge_correct"])
        clinician_correct = judge_correct if row.value == "agree" else not judge_correct
        return _call(clinician_correct), str(key["judge"]), _call(judge_correct)
    return row.value, str(key["patient_system"]), ""


def _call(correct: bool) -> str:
    return "correct" if correct else "incorrect"


def export_rows(store: Store, task_id: str) -> list[ExportRow]:
    """Every answer row of a task (superseded ones too, marked), unblinded: what the CSV export holds."""
    task = get_task(store, task_id)
    items = {item.id: item for item in task_items(store, task_id)}
    with store.session() as session:
        rows = list(session.exec(select(AnnotationRow).where(AnnotationRow.task == task_id)
                                 .order_by(col(AnnotationRow.id))))
    current = {row.id for row in current_rows(rows).values()}
    out = []
    for row in rows:
        item = items[row.item_id]
        resolved, system, judge_call = _resolved(task, item.key, row)
        out.append(ExportRow(annotation_id=row.id or 0, created_at=row.created_at.isoformat(), task_id=task.id,
                             task_kind=task.kind, item_id=row.item_id, case_id=item.case_id,
                             annotator=row.annotator, criterion=row.criterion, value=row.value, resolved=resolved,
                             system=system, judge_call=judge_call, current=row.id in current,
                             supersedes_id=row.supersedes_id))
    return out


def write_csv(rows: Sequence[ExportRow], path: Path | None = None) -> str:
    """The rows as CSV text (also written to ``path`` when given)."""
    import pandas as pd

    frame = pd.DataFrame([row.model_dump() for row in rows], columns=list(ExportRow.model_fields))
    text = frame.to_csv(index=False)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return text


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _kappa(first: Sequence[str], second: Sequence[str]) -> float:
    """Cohen's kappa; NaN (undefined, chance agreement 1) when every answer is the same one label, which
    scikit-learn would also return, with warnings on stderr."""
    if len(set(first) | set(second)) < 2:
        return math.nan
    return cohens_kappa(first, second)


def win_rates(store: Store, task: Task, answers: Sequence[ExportRow]) -> list[WinRate]:
    labels = {side: run_title(run) if (run := store.find_run(run_id)) is not None else task.config["systems"][side]
              for side, run_id in task.config["runs"].items()}
    out = []
    for criterion in task.criteria:
        counts = Counter(row.resolved for row in answers if row.criterion == criterion)
        a, b, ties = counts["A"], counts["B"], counts["tie"]
        out.append(WinRate(criterion=criterion, system_a=task.config["systems"]["A"],
                           system_b=task.config["systems"]["B"], label_a=labels["A"], label_b=labels["B"],
                           a_wins=a, b_wins=b, ties=ties,
                           a_win_rate=a / (a + b) if a + b else None,
                           interval=wilson_interval(a, a + b) if a + b else None))
    return out


def agreement(task: Task, answers: Sequence[ExportRow]) -> list[Agreement]:
    """Cohen's kappa when two annotators answered a criterion, Krippendorff's alpha (ordinal for 0-2 ratings,
    nominal otherwise) when more did; over the items at least two of them answered."""
    out = []
    for criterion in task.criteria:
        by_item: dict[str, dict[str, str]] = defaultdict(dict)
        for row in answers:
            if row.criterion == criterion:
                by_item[row.item_id][row.annotator] = row.resolved if task.kind == TaskKind.PAIRWISE else row.value
        annotators = sorted({name for ratings in by_item.values() for name in ratings})
        shared = [ratings for ratings in by_item.values() if len(ratings) >= 2]
        if len(annotators) < 2:
            continue
        if len(annotators) == 2:
            first, second = annotators
            value = _kappa([r[first] for r in shared], [r[second] for r in shared])
            statistic: Literal["cohen_kappa", "krippendorff_alpha"] = "cohen_kappa"
        else:
            statistic = "krippendorff_alpha"
            value = _alpha(task, shared, annotators)
        given = {answer for ratings in shared for answer in ratings.values()}
        out.append(Agreement(criterion=criterion, statistic=statistic, value=_finite(value),
                             annotators=len(annotators), overlapping_items=len(shared),
                             all_ties=task.kind == TaskKind.PAIRWISE and given == {"tie"}))
    return out


def _alpha(task: Task, shared: Sequence[dict[str, str]], annotators: Sequence[str]) -> float:
    if not shared:
        return math.nan
    ordinal = task.kind == TaskKind.PATIENT_ANSWERS
    categories = sorted({value for ratings in shared for value in ratings.values()})
    if len(categories) < 2:
        return math.nan  # every answer the same: alpha is undefined (0/0)
    code = {value: float(value) if ordinal else float(i) for i, value in enumerate(categories)}
    matrix = [[code[ratings[name]] if name in ratings else None for ratings in shared] for name in annotators]
    return krippendorff_alpha(matrix, level="ordinal" if ordinal else "nominal")


def judge_agreement(answers: Sequence[ExportRow]) -> list[JudgeAgreement]:
    out = []
    for judge in sorted({row.system for row in answers}):
        pairs = [(row.judge_call, row.resolved) for row in answers if row.system == judge]
        confusion: dict[str, dict[str, int]] = {call: dict.fromkeys(("correct", "incorrect"), 0)
                                                for call in ("correct", "incorrect")}
        for judge_call, clinician_call in pairs:
            confusion[judge_call][clinician_call] += 1
        kappa = _kappa([p[0] for p in pairs], [p[1] for p in pairs])
        agree = sum(a == b for a, b in pairs)
        out.append(JudgeAgreement(judge=judge, n=len(pairs), kappa=_finite(kappa),
                                  agree_share=agree / len(pairs) if pairs else None, confusion=confusion))
    return out


def mean_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """Student-t 95 % interval of a mean (statsmodels), clipped to the rating scale; None below two values."""
    from statsmodels.stats.weightstats import DescrStatsW

    if len(values) < 2:
        return None
    low, high = DescrStatsW(list(values)).tconfint_mean(alpha=0.05)
    if not math.isfinite(low):  # all values equal: no spread, the interval is the point
        return float(values[0]), float(values[0])
    return max(RATING_SCALE[0], float(low)), min(RATING_SCALE[1], float(high))


def rating_means(answers: Sequence[ExportRow]) -> list[RatingMean]:
    out = []
    for system in sorted({row.system for row in answers}):
        for criterion in PATIENT_CRITERIA:
            values = [float(row.value) for row in answers if row.system == system and row.criterion == criterion]
            out.append(RatingMean(patient_system=system, criterion=criterion, n=len(values),
                                  mean=sum(values) / len(values) if values else None,
                                  interval=mean_interval(values)))
    return out


def task_report(store: Store, task_id: str) -> AnnotationReport:
    task = get_task(store, task_id)
    rows = export_rows(store, task_id)
    answers = [row for row in rows if row.current and row.criterion not in NOT_CRITERIA]
    with store.session() as session:
        assignments = session.exec(select(func.count()).select_from(AnnotationAssignmentRow)
                                   .where(AnnotationAssignmentRow.task_id == task_id)).one()
    answered = Counter((row.annotator, row.item_id) for row in answers)
    report = AnnotationReport(
        task_id=task.id, kind=task.kind, title=task.title, criteria=task.criteria, seed=task.config.get("seed"),
        items=len(task_items(store, task_id)), assignments=int(assignments),
        assignments_done=sum(count == len(task.criteria) for count in answered.values()),
        annotation_rows=len(rows), current_answers=len(answers), agreement=agreement(task, answers))
    if task.kind == TaskKind.PAIRWISE:
        report.win_rates = win_rates(store, task, answers)
    elif task.kind == TaskKind.JUDGE_REVIEW:
        report.judge_agreement = judge_agreement(answers)
    else:
        report.ratings = rating_means(answers)
    return report


def annotator_progress(store: Store, task_id: str) -> list[AnnotatorProgress]:
    """Done, skipped, flagged and remaining items per annotator of a task, by annotator name."""
    task = get_task(store, task_id)
    with store.session() as session:
        assigned = list(session.exec(select(AnnotationAssignmentRow.annotator, AnnotationAssignmentRow.item_id)
                                     .where(AnnotationAssignmentRow.task_id == task_id)))
        rows = list(session.exec(select(AnnotationRow).where(AnnotationRow.task == task_id)))
    given: dict[tuple[str, str], set[str]] = defaultdict(set)
    for annotator, item_id, criterion in current_rows(rows):
        given[(annotator, item_id)].add(criterion)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for annotator, item_id in assigned:
        criteria = given[(annotator, item_id)]
        state = ("flagged" if FLAG in criteria else "done" if set(task.criteria) <= criteria
                 else "skipped" if SKIP in criteria else "remaining")
        counts[annotator][state] += 1
    return [AnnotatorProgress(task_id=task_id, annotator=name, assigned=counts[name].total(),
                              done=counts[name]["done"], skipped=counts[name]["skipped"],
                              flagged=counts[name]["flagged"], remaining=counts[name]["remaining"])
            for name in sorted(counts)]


def item_flags(store: Store, task_id: str) -> list[ItemFlag]:
    """Every item flagged on a task with the annotator's reason, oldest first."""
    return [ItemFlag(task_id=task_id, item_id=row.item_id, case_id=row.case_id, annotator=row.annotator,
                     reason=row.value, flagged_at=row.created_at)
            for row in export_rows(store, task_id) if row.current and row.criterion == FLAG]
