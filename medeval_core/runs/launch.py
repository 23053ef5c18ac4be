"""The "New run" page's logic: the benchmark's form, a plan (validated params, effective settings and their hash,
an estimate of the work, the endpoints to check) and the launch itself, which stores the run and starts its
worker through ``medeval_core.runs.workers`` (the run then lives outside the page).

Nothing here starts a case before the plan is valid and every configured endpoint has answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from medeval_core import registry
from medeval_core.benchmark import BenchmarkError, ScoreParams
from medeval_core.errors import StoreError
from medeval_core.forms import FieldSpec, FormError, describe_validation_error, field_specs, form_variants
from medeval_core.forms import validate_form as validate_values
from medeval_core.models.endpoints import EndpointCheck, check_roles
from medeval_core.records import CaseStatus, RunKind
from medeval_core.runs import service, workers
from medeval_core.settings import BackendChoice, Settings, overriding_variables
from medeval_core.store import Store, open_store
from medeval_core.store.model_backends import list_backends


class LaunchError(ValueError):
    """The launch cannot go ahead; the message says what to change (a field, an endpoint, an input file)."""


def launchable_benchmarks() -> dict[str, str]:
    """Benchmark name -> title, for the page's first choice."""
    return {name: spec.title for name, spec in sorted(registry.specs().items())}


def _params_model(benchmark: str) -> type[BaseModel]:
    return registry.benchmark(benchmark).Params


def variants(benchmark: str) -> list[str]:
    """The kinds of run a benchmark's form offers (its stages); [] for a single form."""
    return form_variants(_params_model(benchmark))


def data_folders(benchmark: str, settings: Settings) -> list[Path]:
    """The folders of the benchmark's data sources under the data directory."""
    return [source.folder_in(settings.data_dir) for source in registry.benchmark_sources(benchmark)]


def form(benchmark: str, settings: Settings, variant: str | None = None) -> list[FieldSpec]:
    return field_specs(_params_model(benchmark), variant=variant, data_folders=data_folders(benchmark, settings),
                       defaults=registry.benchmark(benchmark).form_defaults(settings, variant))


class RoleOption(BaseModel):
    """One backend the launcher offers for a role: as the settings resolve it now, or a registered one."""

    label: str
    choice: BackendChoice


class RoleChoices(BaseModel):
    role: str
    options: list[RoleOption]
    fixed_by: list[str]
    """``MEDEVAL_<ROLE>_*`` variables set on the server: they win, so the role offers only what they set."""


def role_choices(benchmark: str, settings: Settings, store: Store) -> list[RoleChoices]:
    """For each model role the benchmark declares: the backend the settings give it now first, then every
    backend registered for it on the Models page (the run stores the one chosen and keeps it on resume)."""
    choices = []
    for role in (r.name for r in registry.spec(benchmark).model_roles):
        current = settings.role(role)
        described = " ".join(part for part in (current.backend, current.model, current.base_url or "") if part)
        options = [RoleOption(label=f"as configured now ({described})", choice=current)]
        fixed_by = overriding_variables(role)
        if not fixed_by:
            options += [RoleOption(label=f"{b.name}: {b.model}" + (f" at {b.base_url}" if b.base_url else ""),
                                   choice=b.choice())
                        for b in list_backends(store) if b.role == role and b.choice() != current]
        choices.append(RoleChoices(role=role, options=options, fixed_by=fixed_by))
    return choices


def settings_with_roles(settings: Settings, roles: Mapping[str, BackendChoice]) -> Settings:
    """The settings a run is launched with: ``roles`` (the launcher's choices) in place of the current ones."""
    return settings.model_copy(update={"roles": {**settings.roles, **roles}}) if roles else settings


class WorkEstimate(BaseModel):
    cases: int
    repetitions: int
    case_runs: int
    model_roles: list[str]
    """Roles with a configured model backend that the run may call."""
    min_model_calls: int
    """At least one call per case run and role; an episode (a dialogue) makes one per turn."""


class LaunchPlan(BaseModel):
    """What will be launched, shown before the launch."""

    benchmark: str
    variant: str | None
    params: dict[str, Any]
    score_stages: list[ScoreParams] = []
    """Score runs the worker does once the cases are done (a judge over the responses), in order."""
    roles: dict[str, BackendChoice]
    """The backends chosen for this run's roles (the run stores them with its settings)."""
    settings: dict[str, Any]
    settings_hash: str
    estimate: WorkEstimate

    def run_settings(self, settings: Settings) -> Settings:
        return settings_with_roles(settings, self.roles)


def _roles(benchmark: str, params: BaseModel, settings: Settings) -> list[str]:
    """The spec's declared roles and the roles this run binds, kept when a backend serves them."""
    declared = [role.name for role in registry.spec(benchmark).model_roles]
    bound = list(registry.benchmark(benchmark).models(params, settings))
    return [role for role in dict.fromkeys([*bound, *declared])
            if settings.role(role).backend in ("openai", "transformers")]


def plan(benchmark: str, values: Mapping[str, Any], settings: Settings, variant: str | None = None,
         roles: Mapping[str, BackendChoice] | None = None) -> LaunchPlan:
    """Validate the form's ``values`` into the benchmark's params, load its cases to count them, and estimate
    the work with the backends ``roles`` chose. ``LaunchError`` says what to fix; nothing is stored."""
    implementation = registry.benchmark(benchmark)
    chosen = dict(roles or {})
    settings = settings_with_roles(settings, chosen)
    specs = form(benchmark, settings, variant)
    try:
        params = validate_values(implementation.Params, values, variant=variant, specs=specs)
    except FormError as exc:
        raise LaunchError(str(exc)) from None
    try:
        # What the run will store (absolute paths, the agent's full settings): a bad agent fails here, before
        # anything is stored.
        params = implementation.prepare_params(params, settings)
        cases = implementation.cases(params, settings)
    except BenchmarkError as exc:
        raise LaunchError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise LaunchError(f"The cases could not be loaded ({exc}); check the input files in the form.") from None
    repetitions = int(getattr(params, "repetitions", 1))
    checked_roles = _roles(benchmark, params, settings)
    case_runs = len(cases) * repetitions
    try:
        stages = implementation.score_stages(params, settings)
    except BenchmarkError as exc:
        raise LaunchError(str(exc)) from None
    return LaunchPlan(
        benchmark=benchmark, variant=variant, params=params.model_dump(mode="json"), roles=chosen,
        score_stages=stages,
        settings=settings.effective(),
        settings_hash=settings.settings_hash(),
        estimate=WorkEstimate(cases=len(cases), repetitions=repetitions, case_runs=case_runs, model_roles=checked_roles,
                              min_model_calls=case_runs * len(checked_roles)),
    )


def check_endpoints(launch_plan: LaunchPlan, settings: Settings) -> list[EndpointCheck]:
    return check_roles(launch_plan.run_settings(settings), launch_plan.estimate.model_roles)


class Launched(BaseModel):
    run_id: str
    pid: int
    checks: list[EndpointCheck]


def launch(launch_plan: LaunchPlan, settings: Settings, label: str = "") -> Launched:
    """Check every configured endpoint (one request each), then store the run and start its worker. A failing
    endpoint stops here with its own error and what to set: no run is stored."""
    checks = check_endpoints(launch_plan, settings)
    failed = [check for check in checks if not check.ok]
    if failed:
        raise LaunchError(" ".join(check.message() for check in failed))
    run_settings = launch_plan.run_settings(settings)
    try:
        run_id = workers.create_run(run_settings, launch_plan.benchmark, launch_plan.params, label=label or None)
        store = open_store(settings.db_url)
        # Stored now as pending: the run's worker does them once its cases are done (service.run_score_stages).
        for number, stage in enumerate(launch_plan.score_stages, start=1):
            service.create_score_run(run_id, stage, run_settings, store, run_id=stage_run_id(run_id, stage, number),
                                     label=f"{label or run_id}: {stage.scorer}")
    except ValidationError as exc:
        raise LaunchError(describe_validation_error(exc)) from None
    except BenchmarkError as exc:
        raise LaunchError(str(exc)) from None
    pid = workers.start_worker(settings, run_id)
    return Launched(run_id=run_id, pid=pid, checks=checks)


def stage_run_id(run_id: str, stage: ScoreParams, number: int) -> str:
    """A planned score stage's run id: ``RUN-judge`` for a judge, as a benchmark's own ``run`` command names it."""
    suffix = "judge" if "judge" in stage.scorer else stage.scorer
    return f"{run_id}-{suffix}" if number == 1 else f"{run_id}-{suffix}-{number}"


class ScoreSource(BaseModel):
    """A stored run whose outputs a score run can score, as the New run page lists it."""

    run_id: str
    label: str
    benchmark: str
    scorers: list[str]


def score_sources(store: Store) -> list[ScoreSource]:
    """Batch runs with finished cases, newest first, each with the scorers its benchmark offers for score runs."""
    sources = []
    for row in store.list_runs():
        if row.kind != RunKind.BATCH or row.benchmark not in registry.specs():
            continue
        scorers = list(registry.benchmark(row.benchmark).score_run_scorers)
        if scorers and store.result_counts(row.id).get(CaseStatus.OK):
            sources.append(ScoreSource(run_id=row.id, label=row.label or row.id, benchmark=row.benchmark,
                                       scorers=scorers))
    return sources


def launch_score(source_run_id: str, params: ScoreParams, settings: Settings, label: str = "") -> Launched:
    """Store a score run over a stored run (a second judge, another scorer: what ``rescore`` does) and start its
    worker. ``LaunchError`` says what to change (an unknown scorer, bad options, a source that cannot be scored)."""
    try:
        run_id = service.create_score_run(source_run_id, params, settings, open_store(settings.db_url),
                                          label=label)
    except (BenchmarkError, StoreError) as exc:
        raise LaunchError(str(exc)) from None
    return Launched(run_id=run_id, pid=workers.start_worker(settings, run_id), checks=[])
