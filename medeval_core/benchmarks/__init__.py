"""One package per benchmark. Each registers a plan factory so that runs can be launched and resumed by name.

The registry maps a benchmark name to ``"module:function"``; the module is imported only when that benchmark is
used, so the CLI and the app start without importing torch or a benchmark's data.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from medeval_core.records import Case, CaseResult, RunConfig
from medeval_core.runs import CaseFunction
from medeval_core.settings import Settings


@dataclass(frozen=True)
class BenchmarkPlan:
    """What the runner needs for one run: the cases, the per-case function and the run-level summary."""

    cases: Sequence[Case]
    run_case: CaseFunction
    summarize: Callable[[list[CaseResult]], dict[str, Any]]
    # Concurrency used when the caller does not choose one (e.g. ``resume``): a judge stage wants its 16 requests.
    workers: int = 1


PlanFactory = Callable[[RunConfig, Settings], BenchmarkPlan]

# Benchmarks add themselves here as their packages land: name -> "module:factory".
REGISTRY: dict[str, str] = {
    "ddi": "medeval_core.benchmarks.ddi.plan:build_plan",
}


class PlanError(ValueError):
    """A run's plan cannot be built from its parameters (cases missing, a run that cannot resume); the message
    says what to fix."""


class UnknownBenchmarkError(KeyError):
    pass


def plan_for(config: RunConfig, settings: Settings) -> BenchmarkPlan:
    """Rebuild a run's plan from its stored config; this is how ``resume`` continues a run in a new process."""
    try:
        target = REGISTRY[config.benchmark]
    except KeyError:
        known = ", ".join(sorted(REGISTRY)) or "none yet"
        raise UnknownBenchmarkError(
            f"No benchmark called {config.benchmark!r} is available (known: {known})."
        ) from None
    module_name, _, function_name = target.partition(":")
    factory: PlanFactory = getattr(importlib.import_module(module_name), function_name)
    return factory(config, settings)
