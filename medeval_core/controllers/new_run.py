"""The New run page's controller: the launchable benchmarks and their forms, the role choices, the plan (validated
and estimated), the launch into a worker process, and score runs over a stored run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from medeval_core.benchmark import BenchmarkError, ScoreParams
from medeval_core.catalog import RUNS
from medeval_core.context import current_settings
from medeval_core.controllers import Outcome
from medeval_core.forms import FieldSpec
from medeval_core.runs import launch
from medeval_core.runs.launch import LaunchPlan, RoleChoices, ScoreSource
from medeval_core.settings import BackendChoice, SettingsError
from medeval_core.store import open_store

__all__ = ["RUNS_PAGE", "BenchmarkError", "FieldSpec", "LaunchOutcome", "LaunchPlan", "NewRun", "PlanOutcome",
           "SettingsError"]

RUNS_PAGE = RUNS.path


class PlanOutcome(BaseModel):
    """The checked plan, else the sentence saying what to change."""

    plan: LaunchPlan | None = None
    error: str | None = None


class LaunchOutcome(Outcome):
    run_id: str | None = None
    checks: list[str] = Field(default_factory=list)
    """Each endpoint check's sentence (they all passed when the run was launched)."""


class NewRun:
    """The page's view of the settings and the store, read once per script run (``SettingsError`` when the
    settings cannot be loaded)."""

    def __init__(self) -> None:
        self.settings = current_settings()

    @staticmethod
    def benchmarks() -> dict[str, str]:
        """Name -> title of every benchmark a batch run can be launched for."""
        return launch.launchable_benchmarks()

    @staticmethod
    def variants(benchmark: str) -> list[str]:
        return launch.variants(benchmark)

    def form(self, benchmark: str, variant: str | None) -> list[FieldSpec]:
        """The launch form's fields (``BenchmarkError`` when the spec cannot give one, e.g. it names a data source
        no benchmark declares)."""
        return launch.form(benchmark, self.settings, variant)

    def role_choices(self, benchmark: str) -> list[RoleChoices]:
        return launch.role_choices(benchmark, self.settings, open_store(self.settings.db_url))

    def plan(self, benchmark: str, values: Mapping[str, Any], variant: str | None,
             roles: Mapping[str, BackendChoice]) -> PlanOutcome:
        """Validate the form's values and count the cases; nothing is stored."""
        try:
            return PlanOutcome(plan=launch.plan(benchmark, values, self.settings, variant, roles))
        except launch.LaunchError as exc:
            return PlanOutcome(error=f"Not launched: {exc}")

    def launch(self, plan: LaunchPlan, label: str) -> LaunchOutcome:
        """Check the endpoints, store the run and start its worker."""
        try:
            launched = launch.launch(plan, self.settings, label=label)
        except launch.LaunchError as exc:
            return LaunchOutcome(error=f"Not launched: {exc}")
        return LaunchOutcome(run_id=launched.run_id, checks=[check.message() for check in launched.checks],
                             notice=f"Launched run {launched.run_id} (worker pid {launched.pid}).")

    def score_sources(self) -> dict[str, ScoreSource]:
        """Stored batch runs with finished cases, by run id, each with its benchmark's scorers."""
        return {source.run_id: source for source in launch.score_sources(open_store(self.settings.db_url))}

    def launch_score(self, source: ScoreSource, scorer: str, options: str, concurrency: int,
                     label: str) -> LaunchOutcome:
        """Store a score run over ``source`` with ``scorer`` (options as a JSON object) and start its worker."""
        if scorer not in source.scorers:
            return LaunchOutcome(error=f"Not launched: the {source.benchmark} benchmark has no scorer {scorer}; "
                                       f"choose one of {', '.join(source.scorers)}.")
        try:
            parsed = json.loads(options or "{}")
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return LaunchOutcome(error="Not launched: the scorer options must be a JSON object, e.g. {}.")
        try:
            params = ScoreParams(scorer=scorer, options=parsed, concurrency=concurrency)
            launched = launch.launch_score(source.run_id, params, self.settings, label)
        except launch.LaunchError as exc:
            return LaunchOutcome(error=f"Not launched: {exc}")
        return LaunchOutcome(run_id=launched.run_id, notice=f"Launched score run {launched.run_id} over "
                                                            f"{source.run_id} (worker pid {launched.pid}).")
