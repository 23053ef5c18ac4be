"""Launching DDI scoring: the model stage then the judge stage (``run ddi``), or the judge stage alone over a
responses file (``judge ddi``). The CLI and the pages call these; each stage is a ``ddi`` run (see ``plan``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from medeval_core import jobs
from medeval_core.backends.vlm import greedy_settings, make_vlm_backend
from medeval_core.benchmarks.ddi.cases import CaseSource, load_cases
from medeval_core.benchmarks.ddi.plan import DdiParams, check_references, load_responses, parse_params
from medeval_core.benchmarks.ddi.tasks import DEFAULT_LABELS, Mode, prompt_for
from medeval_core.judges.ddi import make_ddi_judge
from medeval_core.prompts import load_labels
from medeval_core.records import RunConfig, RunStatus
from medeval_core.runs import ProgressCallback, RunReport
from medeval_core.settings import GenerationSettings, Settings
from medeval_core.store import Store, StoreError, new_run_id

BENCHMARK = "ddi"


class JudgeChoice(BaseModel):
    backend: Literal["offline", "openai"] | None = None
    base_url: str | None = None
    model: str | None = None
    concurrency: int | None = Field(default=None, gt=0)


class ModelChoice(BaseModel):
    backend: Literal["transformers", "openai"] | None = None
    model: str | None = None
    base_url: str | None = None
    greedy: bool = False
    batch_size: int | None = None
    max_new_tokens: int | None = None


class DdiBatchReport(BaseModel):
    model_run: RunReport | None
    judge_run: RunReport | None
    summary: dict[str, Any]


def effective_generation(settings: Settings, choice: ModelChoice) -> GenerationSettings:
    generation = greedy_settings(settings.generation) if choice.greedy else settings.generation
    overrides = {k: v for k, v in {"batch_size": choice.batch_size, "max_new_tokens": choice.max_new_tokens}.items()
                 if v is not None}
    return generation.model_copy(update=overrides)


def _config_for(store: Store, run_id: str, fresh: RunConfig) -> RunConfig:
    """An existing run keeps its stored configuration: continuing it with other settings would mix protocols."""
    existing = store.find_run(run_id)
    if existing is None:
        return fresh
    if existing.benchmark != BENCHMARK:
        raise StoreError(f"Run {run_id!r} is a {existing.benchmark} run; choose another --run-id.")
    return RunConfig.model_validate(existing.config)


def judge_stage(
    settings: Settings,
    store: Store,
    run_id: str,
    mode: Mode,
    judge: JudgeChoice,
    model_run_id: str | None = None,
    responses_file: Path | None = None,
    labels: list[str] | None = None,
    on_progress: ProgressCallback | None = None,
) -> RunReport:
    params = DdiParams(
        stage="judge", mode=mode, model_run_id=model_run_id,
        responses_file=str(responses_file.resolve()) if responses_file else None, labels=labels,
        judge_backend=judge.backend, judge_base_url=judge.base_url, judge_model=judge.model,
        judge_concurrency=judge.concurrency,
    )
    config = _config_for(store, run_id, jobs.new_run_config(
        BENCHMARK, settings, params.model_dump(mode="json"), label=f"DDI {mode}: judge stage"))
    return jobs.launch(config, settings, store, run_id=run_id, on_progress=on_progress)


def run_ddi(
    settings: Settings,
    store: Store,
    source: CaseSource,
    mode: Mode = "open",
    model: ModelChoice | None = None,
    judge: JudgeChoice | None = None,
    run_id: str | None = None,
    on_progress: ProgressCallback | None = None,
) -> DdiBatchReport:
    """Generate responses for every image, then judge them. With an existing ``run_id`` both stages continue."""
    model = model or ModelChoice()
    judge = judge or JudgeChoice()
    model_run_id = run_id or new_run_id(BENCHMARK)
    labels = load_labels(DEFAULT_LABELS, settings.prompts_dir) if mode == "classification" else None
    cases = load_cases(source)
    if labels is not None:
        check_references(cases, labels)
    generation = effective_generation(settings, model)
    # Validate the choice now (a clear error before anything runs); the plan builds its own, lazily loaded one.
    backend = make_vlm_backend(settings, backend=model.backend, model=model.model, base_url=model.base_url)
    params = DdiParams(
        stage="model", mode=mode, source=source, labels=labels,
        model_backend=backend.name, model=backend.model, base_url=getattr(backend, "base_url", None),
        generation=generation, prompt=prompt_for(mode, labels, settings.prompts_dir),
    )
    config = _config_for(store, model_run_id, jobs.new_run_config(
        BENCHMARK, settings, params.model_dump(mode="json"), label=f"DDI {mode}: model stage"))
    stored = parse_params(config)
    model_report = jobs.launch(config, settings, store, run_id=model_run_id, on_progress=on_progress)
    if model_report.status != RunStatus.COMPLETED:
        return DdiBatchReport(model_run=model_report, judge_run=None, summary=store.get_run(model_run_id).summary)
    judge_report = judge_stage(settings, store, f"{model_run_id}-judge", stored.mode, judge,
                               model_run_id=model_run_id, labels=stored.labels, on_progress=on_progress)
    return DdiBatchReport(model_run=model_report, judge_run=judge_report,
                          summary=store.get_run(judge_report.run_id).summary)


def judge_responses(
    settings: Settings,
    store: Store,
    responses_file: Path,
    mode: Mode = "open",
    judge: JudgeChoice | None = None,
    run_id: str | None = None,
    on_progress: ProgressCallback | None = None,
) -> DdiBatchReport:
    """Judge responses produced elsewhere (one JSON object per line: image_id, reference, response)."""
    load_responses(responses_file)  # a malformed file fails here, before a run is created
    labels = load_labels(DEFAULT_LABELS, settings.prompts_dir) if mode == "classification" else None
    report = judge_stage(settings, store, run_id or new_run_id(f"{BENCHMARK}-judge"), mode, judge or JudgeChoice(),
                         responses_file=responses_file, labels=labels, on_progress=on_progress)
    return DdiBatchReport(model_run=None, judge_run=report, summary=store.get_run(report.run_id).summary)
