"""Judging a list of items concurrently outside a run (the judge's own tests and the throughput bench).

Runs judge items through the batch runner as a score run (``ddi-judge``); these helpers exercise the judge alone:
its retries, its rate limiter shared by threads, and its attempts stored as ``Judgement`` rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from medeval_core.benchmarks.ddi.judge import DdiJudge, DdiJudgeItem, DdiVerdict
from medeval_core.judges.base import JudgeError, judgement_of
from medeval_core.store import Store


@dataclass
class Judged:
    verdicts: dict[str, DdiVerdict] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def judge_all(judge: DdiJudge, items: Iterable[DdiJudgeItem], store: Store | None = None, run_id: str | None = None,
              concurrency: int | None = None) -> Judged:
    """Every item judged with ``concurrency`` (default: the judge's) threads; with a store, each attempt is stored
    under ``run_id`` the moment it happens."""
    judged = Judged()

    def one(item: DdiJudgeItem) -> None:
        def record(attempt):
            if store is not None:
                store.add_judgement(judgement_of(judge, attempt).model_copy(
                    update={"run_id": run_id, "case_id": item.case_id}))

        try:
            judged.verdicts[item.case_id] = judge.judge(item, on_attempt=record)
        except JudgeError as exc:
            judged.errors[item.case_id] = str(exc)

    with ThreadPoolExecutor(max_workers=concurrency or judge.concurrency) as pool:
        list(pool.map(one, list(items)))
    return judged


def worst_window(times: list[float], weights: list[int], window_s: float) -> tuple[int, int]:
    """The most requests, and the most weight (tokens), that any window of ``window_s`` seconds holds: what a
    provider counting arrivals in a sliding window sees."""
    pairs = sorted(zip(times, weights, strict=True))
    most_requests = most_weight = 0
    start = weight = 0
    for end, (t, w) in enumerate(pairs):
        weight += w
        while t - pairs[start][0] >= window_s:
            weight -= pairs[start][1]
            start += 1
        most_requests = max(most_requests, end - start + 1)
        most_weight = max(most_weight, weight)
    return most_requests, most_weight


def windows_over_budget(times: list[float], window_s: float, budget: int) -> int:
    """How many arrivals end a window of ``window_s`` seconds holding more than ``budget`` arrivals."""
    ordered = sorted(times)
    start = over = 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= window_s:
            start += 1
        over += end - start + 1 > budget
    return over
