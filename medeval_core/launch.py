"""The "New run" page's logic: the benchmark's form, a plan (validated params, effective settings and their hash,
an estimate of the work, the endpoints to check) and the launch itself, which stores the run and starts its
worker through ``medeval_core.workers`` (the run then lives outside the page).

Nothing here starts a case before the plan is valid and every configured endpoint has answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from medeval_core import registry, workers
from medeval_core.benchmark import BenchmarkError
from medeval_core.data import SOURCES
from medeval_core.endpoints import EndpointCheck, check_roles
from medeval_core.forms import FieldSpec, FormError, describe_validation_error, field_specs, form_variants
from medeval_core.forms import validate_form as validate_values
from medeval_core.settings import Settings


class LaunchError(ValueError):
    """The launch cannot go ahead; the message says what to change (a field, an endpoint, an input file)."""


def launchable_benchmarks() -> dict[str, str]:
    """Benchmark name -> title, for the page's first choice."""
    return {name: spec.title for name, spec in sorted(registry.specs().items())}


def _params_model(benchmark: str) -> type[BaseModel]:
    return registry.benchmark(benchmark).Params


def variants(benchmark: str) -> list[str]:
    """The kinds of run a benchmark's form offers (DDI: its stages); [] for a single form."""
    return form_variants(_params_model(benchmark))


def data_folders(benchmark: str, settings: Settings) -> list[Path]:
    """The folders of the benchmark's data sources under the data directory."""
    return [settings.data_dir / SOURCES[name].folder for name in registry.spec(benchmark).data_sources
            if name in SOURCES]


def form(benchmark: str, settings: Settings, variant: str | None = None) -> list[FieldSpec]:
    return field_specs(_params_model(benchmark), variant=variant, data_folders=data_folders(benchmark, settings))


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
    settings: dict[str, Any]
    settings_hash: str
    estimate: WorkEstimate


def _roles(benchmark: str, params: BaseModel, settings: Settings) -> list[str]:
    """The spec's declared roles and the roles this run binds, kept when a backend serves them."""
    declared = [role.name for role in registry.spec(benchmark).model_roles]
    bound = list(registry.benchmark(benchmark).models(params, settings))
    return [role for role in dict.fromkeys([*bound, *declared])
            if settings.role(role).backend in ("openai", "transformers")]


def plan(benchmark: str, values: Mapping[str, Any], settings: Settings, variant: str | None = None) -> LaunchPlan:
    """Validate the form's ``values`` into the benchmark's params, load its cases to count them, and estimate
    the work. ``LaunchError`` says what to fix; nothing is stored."""
    implementation = registry.benchmark(benchmark)
    specs = form(benchmark, settings, variant)
    try:
        params = validate_values(implementation.Params, values, variant=variant, specs=specs)
    except FormError as exc:
        raise LaunchError(str(exc)) from None
    try:
        cases = implementation.cases(params, settings)
    except BenchmarkError as exc:
        raise LaunchError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise LaunchError(f"The cases could not be loaded ({exc}); check the input files in the form.") from None
    repetitions = int(getattr(params, "repetitions", 1))
    roles = _roles(benchmark, params, settings)
    case_runs = len(cases) * repetitions
    return LaunchPlan(
        benchmark=benchmark, variant=variant, params=params.model_dump(mode="json"), settings=settings.effective(),
        settings_hash=settings.settings_hash(),
        estimate=WorkEstimate(cases=len(cases), repetitions=repetitions, case_runs=case_runs, model_roles=roles,
                              min_model_calls=case_runs * len(roles)),
    )


def check_endpoints(launch_plan: LaunchPlan, settings: Settings) -> list[EndpointCheck]:
    return check_roles(settings, launch_plan.estimate.model_roles)


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
    try:
        run_id = workers.create_run(settings, launch_plan.benchmark, launch_plan.params, label=label or None)
    except ValidationError as exc:
        raise LaunchError(describe_validation_error(exc)) from None
    except BenchmarkError as exc:
        raise LaunchError(str(exc)) from None
    pid = workers.start_worker(settings, run_id)
    return Launched(run_id=run_id, pid=pid, checks=checks)
