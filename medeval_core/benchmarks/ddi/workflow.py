"""DDI's two-run workflows on the service: ``run ddi`` (a model run, then a judge score run over it, ``<id>-judge``)
and ``judge ddi`` (a responses run importing another system's answers, ``<id>-responses``, then a score run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from medeval_core.benchmarks.ddi import JUDGE_ROLE, VLM_ROLE
from medeval_core.benchmarks.ddi.benchmark import JUDGE_SCORER, LABEL_SCORER, load_responses
from medeval_core.benchmarks.ddi.cases import CaseSource
from medeval_core.benchmarks.ddi.judge import make_ddi_judge
from medeval_core.benchmarks.ddi.params import DdiParams, GenerateParams, ResponsesParams
from medeval_core.benchmarks.ddi.tasks import DEFAULT_LABELS, Mode, prompt_for
from medeval_core.models import choice_for_role, for_role, with_role
from medeval_core.models.vlm import greedy_settings
from medeval_core.prompts import load_labels
from medeval_core.records import RunStatus
from medeval_core.runs import service
from medeval_core.runs.runner import ProgressCallback, RunReport
from medeval_core.settings import BackendChoice, GenerationSettings, Settings
from medeval_core.store import Store, new_run_id

BENCHMARK = "ddi"


class RunRequest(BaseModel):
    """What ``run ddi`` asks for, before the settings fill in the rest."""

    images: str
    metadata: str | None = None
    image_column: str | None = None
    reference_column: str | None = None
    limit: int | None = None
    mode: Mode = "open"
    model_backend: Literal["transformers", "openai"] | None = None
    model: str | None = None
    base_url: str | None = None
    greedy: bool = False
    batch_size: int | None = None
    max_new_tokens: int | None = None
    concurrency: int | None = Field(default=None, ge=1)
    repetitions: int = Field(default=1, ge=1)


def effective_generation(settings: Settings, request: RunRequest) -> GenerationSettings:
    generation = greedy_settings(settings.generation) if request.greedy else settings.generation
    overrides = {k: v for k, v in {"batch_size": request.batch_size, "max_new_tokens": request.max_new_tokens}.items()
                 if v is not None}
    return generation.model_copy(update=overrides)


def labels_for(mode: Mode, settings: Settings) -> list[str] | None:
    return load_labels(DEFAULT_LABELS, settings.prompts_dir) if mode == "classification" else None


def vlm_choice(settings: Settings, request: RunRequest) -> BackendChoice:
    """The tested model: the ``vlm`` role's backend with the command line's choice over it."""
    return choice_for_role(VLM_ROLE, settings, {"backend": request.model_backend, "model": request.model,
                                                "base_url": request.base_url})


def judged_with(settings: Settings, stage: service.ScoreParams) -> Settings:
    """The settings a judge score run stores: the ``judge`` role as the stage's options chose it."""
    if stage.scorer != JUDGE_SCORER:
        return settings
    return with_role(settings, JUDGE_ROLE, choice_for_role(JUDGE_ROLE, settings, {
        key: stage.options.get(key) for key in ("backend", "base_url", "model")}))


def generate_params(settings: Settings, request: RunRequest) -> DdiParams:
    """The model run's parameters; the backend is validated now (a clear error before anything runs), and
    enough cases run at once to fill one batch on every model worker (constructing a backend loads nothing)."""
    labels = labels_for(request.mode, settings)
    generation = effective_generation(settings, request)
    backend = for_role(VLM_ROLE, settings, vlm_choice(settings, request), interface="vision")
    source = CaseSource(images_dir=request.images, metadata=request.metadata, image_column=request.image_column,
                        reference_column=request.reference_column, limit=request.limit)
    return DdiParams(GenerateParams(
        mode=request.mode, source=source, labels=labels,
        model_backend="openai" if backend.name == "openai" else "transformers",
        model=backend.model, base_url=getattr(backend, "base_url", None), generation=generation,
        prompt=prompt_for(request.mode, labels, settings.prompts_dir),
        concurrency=generation.batch_size * backend.parallel_batches, repetitions=request.repetitions,
    ))


def score_params(settings: Settings, mode: Mode, judge: dict[str, Any], labels: list[str] | None,
                 concurrency: int | None = None) -> service.ScoreParams:
    """The judge (open-ended) or exact-label (classification) score run over a model or responses run."""
    if mode == "classification":
        return service.ScoreParams(scorer=LABEL_SCORER, options={"labels": labels or []},
                                   concurrency=concurrency or 1)
    options = {key: judge.get(key) for key in ("backend", "base_url", "model")}
    judge_concurrency = judge.get("concurrency")
    built = make_ddi_judge(settings, backend=options["backend"], base_url=options["base_url"],
                           model=options["model"])
    # The options name the judge actually used, so a resume (or a second judge) is unambiguous.
    options = {"backend": "offline" if built.name.startswith("offline") else "openai",
               "base_url": getattr(built, "base_url", None), "model": None if built.name.startswith("offline")
               else built.model, "concurrency": judge_concurrency}
    return service.ScoreParams(scorer=JUDGE_SCORER, options=options,
                               concurrency=concurrency or judge_concurrency or built.concurrency)


def run_ddi(settings: Settings, store: Store, request: RunRequest, judge: dict[str, Any], run_id: str | None = None,
            label: str = "", on_progress: ProgressCallback | None = None) -> tuple[RunReport, RunReport | None]:
    """Generate responses for every image, then judge them. With an existing ``run_id`` both runs continue."""
    model_run_id = run_id or new_run_id(BENCHMARK)
    params = generate_params(settings, request)
    # The run's settings record the backend its vlm role used (a resume reads it back from there).
    model_settings = with_role(settings, VLM_ROLE, vlm_choice(settings, request))
    model_report = service.launch(BENCHMARK, params, model_settings, store, run_id=model_run_id,
                                  label=label or f"DDI {request.mode}: model run", concurrency=request.concurrency,
                                  on_progress=on_progress)
    if model_report.status != RunStatus.COMPLETED:
        return model_report, None
    stored = DdiParams.model_validate(store.get_run(model_run_id).config["params"])
    stage = score_params(settings, stored.mode, judge, stored.labels)
    judge_report = service.score_run(model_run_id, stage, judged_with(settings, stage), store,
                                     run_id=f"{model_run_id}-judge",
                                     label=f"DDI {stored.mode}: judge of {model_run_id}", on_progress=on_progress)
    return model_report, judge_report


def judge_responses(settings: Settings, store: Store, responses_file: Path, mode: Mode, judge: dict[str, Any],
                    run_id: str | None = None, label: str = "",
                    on_progress: ProgressCallback | None = None) -> RunReport:
    """Judge responses produced elsewhere (one JSON object per line: image_id, reference, response): the file is
    imported as a responses run (``<run_id>-responses``), which a score run (``run_id``) then judges."""
    load_responses(responses_file)  # a malformed file fails here, before a run is created
    judge_run_id = run_id or new_run_id(f"{BENCHMARK}-judge")
    params = DdiParams(ResponsesParams(mode=mode, responses_file=str(responses_file),
                                       labels=labels_for(mode, settings)))
    responses_run = f"{judge_run_id}-responses"
    service.launch(BENCHMARK, params, settings, store, run_id=responses_run,
                   label=label or f"DDI {mode}: responses from {responses_file.name}")
    stage = score_params(settings, mode, judge, params.labels)
    return service.score_run(responses_run, stage, judged_with(settings, stage), store, run_id=judge_run_id,
                             label=label or f"DDI {mode}: judge of {responses_file.name}",
                             on_progress=on_progress)
