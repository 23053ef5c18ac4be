"""Interleaved timing for the bench scripts: the sides of a comparison run in turn, repetition by repetition, so
that the load of a shared machine falls on every side alike; each side's min and median, the ratio of the
figure to its baseline, and the load average the figures were taken at."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Timing:
    """The times of one side (seconds, or whatever ``measure`` returns) and its last result."""

    times: list[float] = field(default_factory=list)
    result: Any = None

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def wall_time(run: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def interleaved(sides: dict[str, Callable[[], Any]], repeats: int,
                measure: Callable[[Callable[[], Any]], tuple[float, Any]] = wall_time) -> dict[str, Timing]:
    """Each side run ``repeats`` times, one of each in turn (the order alternates, so neither side always runs
    first after the other); ``measure`` times one run and returns (time, result)."""
    timings = {name: Timing() for name in sides}
    names = list(sides)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else reversed(names):
            spent, result = measure(sides[name])
            timings[name].times.append(spent)
            timings[name].result = result
    return timings


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def print_comparison(title: str, figure: tuple[str, Timing], baseline: tuple[str, Timing], unit: str = "s",
                     scale: float = 1.0) -> float:
    """Both sides' min and median and the ratio baseline / figure of the medians (above 1: the figure is faster);
    returns that ratio. ``scale`` converts the times for printing (1000 with unit ``ms``)."""
    print(f"{title} (load average {load_average()}; {len(figure[1].times)} runs each, interleaved)")
    width = max(len(figure[0]), len(baseline[0]))
    for label, timing in (figure, baseline):
        print(f"  {label:<{width}}  min {timing.min * scale:9.3f} {unit}  median {timing.median * scale:9.3f} {unit}")
    ratio = baseline[1].median / figure[1].median
    print(f"  ratio baseline / figure: {ratio:.2f}x on medians, {baseline[1].min / figure[1].min:.2f}x on minima")
    return ratio
