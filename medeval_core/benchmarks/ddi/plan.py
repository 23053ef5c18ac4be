"""DDI batch scoring through the runner, as two linked runs that are each resumable.

A ``ddi`` run has a stage in its parameters:
- ``model``: one case per image; the case function returns the tested model's response. Images are generated in
  fixed batches of ``batch_size`` over the case list (the first case of a batch to be reached generates the whole
  batch), so batch composition, and with the per-batch seed the sampled text, does not depend on thread timing.
  On resume a batch holds only its unfinished cases (finished responses are never generated again), so the
  batches a crash interrupted are the only ones whose composition differs from an uninterrupted run.
- ``judge``: one case per image of a model run (or per line of a responses file); the case function judges the
  stored response (LLM or offline judge for open-ended answers; exact label mapping for classification). Every
  judge attempt is stored as a ``Judgement`` under this run.

Why two runs rather than one: the GPU stage and the remote-judge stage fail for different reasons and run at
different speeds, and keeping the responses in their own run lets a second judge (offline rules next to the LLM
judge, say) score the very same responses without generating them again. A judge run names its model run in
``model_run_id``; a model case that failed shows up in the judge run as a failed case that says so, so expected =
judged + failed + pending always holds. ``resume RUN_ID`` continues either run.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from medeval_core.backends.vlm import VlmBackend, VlmPrompt, make_vlm_backend
from medeval_core.benchmarks import BenchmarkPlan, PlanError
from medeval_core.benchmarks.ddi.cases import CaseSource, CaseSourceError, DdiCase, load_cases
from medeval_core.benchmarks.ddi.images import load_image_file
from medeval_core.benchmarks.ddi.summary import summarize_scores
from medeval_core.benchmarks.ddi.tasks import Mode, canonical_label, score_label
from medeval_core.judges.ddi import DdiJudge, DdiJudgeItem, make_ddi_judge, record_attempts
from medeval_core.records import CaseOutcome, CaseResult, CaseStatus, RunConfig
from medeval_core.runs import current_run_id
from medeval_core.settings import GenerationSettings, Settings
from medeval_core.store import open_store

Stage = Literal["model", "judge", "interactive"]


class DdiParams(BaseModel):
    """A ``ddi`` run's parameters: everything ``resume`` needs to rebuild the same plan in a new process."""

    model_config = ConfigDict(extra="forbid")

    stage: Stage
    mode: Mode = "open"
    source: CaseSource | None = None
    labels: list[str] | None = None
    # Model stage: which model, and the effective generation settings (greedy switch and overrides applied).
    model_backend: Literal["transformers", "openai"] | None = None
    model: str | None = None
    base_url: str | None = None
    generation: GenerationSettings | None = None
    prompt: VlmPrompt | None = None
    # Judge stage: what to judge, and with which judge.
    model_run_id: str | None = None
    responses_file: str | None = None
    judge_backend: Literal["offline", "openai"] | None = None
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_concurrency: int | None = Field(default=None, gt=0)
    # Lesion page: one evaluation per run.
    session_id: str | None = None


class DdiPlanError(PlanError):
    """The run's parameters do not describe a runnable plan; the message says what to fix."""


def parse_params(config: RunConfig) -> DdiParams:
    try:
        return DdiParams.model_validate(config.params)
    except ValidationError as exc:
        raise DdiPlanError(f"This ddi run has invalid parameters: {exc}") from exc


def this_run() -> str:
    """The id of the run whose case is being computed (the runner sets it for every case)."""
    run_id = current_run_id.get()
    if run_id is None:
        raise RuntimeError("DDI case functions run inside the batch runner, which names their run.")
    return run_id


def check_references(cases: Sequence[DdiCase], labels: Sequence[str]) -> None:
    """Classification is scored in the label space: every reference must be one of the candidate labels."""
    unknown = sorted({case.reference for case in cases if canonical_label(case.reference, labels) is None})
    if unknown:
        raise CaseSourceError(
            f"{len(unknown)} reference diagnoses are not among the {len(labels)} candidate labels "
            f"(e.g. {', '.join(unknown[:3])}); map them to the label vocabulary or use --mode open."
        )


class ChunkBatcher:
    """Fixed batches over the plan's case order; a batch is generated once, when its first case is asked for.

    ``produce`` gets a batch and returns, per case id, the case's output or the exception that case failed with.
    Threads asking for cases of the same batch wait for that one generation; different batches run in parallel.
    """

    def __init__(self, cases: Sequence[DdiCase], batch_size: int,
                 produce: Callable[[list[DdiCase]], dict[str, dict[str, Any] | Exception]]) -> None:
        self._chunks = [list(cases[i:i + batch_size]) for i in range(0, len(cases), batch_size)]
        self._chunk_of = {case.case_id: index for index, chunk in enumerate(self._chunks) for case in chunk}
        self._locks = [threading.Lock() for _ in self._chunks]
        self._done: dict[int, dict[str, dict[str, Any] | Exception]] = {}
        self._produce = produce

    def output(self, case: DdiCase) -> dict[str, Any]:
        index = self._chunk_of[case.case_id]
        with self._locks[index]:
            if index not in self._done:
                self._done[index] = self._produce(self._chunks[index])
            outcome = self._done[index].pop(case.case_id)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def _model_plan(params: DdiParams, settings: Settings) -> BenchmarkPlan:
    if params.source is None or params.generation is None or params.prompt is None:
        raise DdiPlanError("A ddi model-stage run needs a case source, generation settings and a prompt.")
    cases = load_cases(params.source)
    generation, prompt = params.generation, params.prompt
    loaded: list[VlmBackend] = []

    @functools.cache
    def backend() -> VlmBackend:
        # Built on first use: resuming a finished run, or summarising it, never loads the model.
        instance = make_vlm_backend(settings, backend=params.model_backend, model=params.model,
                                    base_url=params.base_url)
        loaded.append(instance)
        return instance

    store = open_store(settings.db_url)

    def produce(chunk: list[DdiCase]) -> dict[str, dict[str, Any] | Exception]:
        outcomes: dict[str, dict[str, Any] | Exception] = {}
        valid = []
        # On resume a batch holds only its unfinished cases: finished responses are never generated twice.
        finished = store.finished_keys(this_run())
        for case in (case for case in chunk if (case.case_id, 0) not in finished):
            try:
                valid.append((case, load_image_file(Path(case.image_path))))
            except Exception as exc:  # noqa: BLE001 - a bad image fails its own case, not the batch
                outcomes[case.case_id] = exc
        if valid:
            try:
                texts = backend().generate([image.image for _, image in valid], [prompt] * len(valid), generation)
            except Exception as exc:  # noqa: BLE001 - every case of the batch fails with the same recorded error
                outcomes.update({case.case_id: exc for case, _ in valid})
            else:
                for (case, image), text in zip(valid, texts, strict=True):
                    outcomes[case.case_id] = {"response": text, "image": image.provenance()}
        return outcomes

    batcher = ChunkBatcher(cases, generation.batch_size, produce)

    def run_case(case: DdiCase, repetition: int) -> CaseOutcome:  # type: ignore[override]
        output = batcher.output(case)
        return CaseOutcome(output=output, metrics={"response_chars": len(output["response"])})

    def summarize(results: list[CaseResult]) -> dict[str, Any]:
        ok = sum(r.status == CaseStatus.OK for r in results)
        failed = sum(r.status == CaseStatus.FAILED for r in results)
        return {
            "stage": "model",
            "mode": params.mode,
            "expected": len(cases),
            "responses": ok,
            "failed": failed,
            "pending": len(cases) - ok - failed,
            "backend": loaded[0].describe() if loaded else None,
        }

    # Enough cases in flight to fill one batch on every model worker (constructing a backend loads nothing).
    workers = generation.batch_size * make_vlm_backend(
        settings, backend=params.model_backend, model=params.model, base_url=params.base_url
    ).parallel_batches
    return BenchmarkPlan(cases=cases, run_case=run_case, summarize=summarize, workers=workers)  # type: ignore[arg-type]


class ResponseLine(BaseModel):
    """One line of a ``judge ddi --responses`` file."""

    model_config = ConfigDict(extra="ignore")

    image_id: str
    reference: str
    response: str
    skin_tone: int | None = None
    malignant: bool | None = None


# Other tools write the same three fields under DDI's column names or as case ids / model outputs.
RESPONSE_KEY_ALIASES = {
    "image_id": ("image_id", "case_id", "DDI_file", "id"),
    "reference": ("reference", "disease"),
    "response": ("response", "model_output"),
}


def _canonical_keys(record: object) -> object:
    if not isinstance(record, dict):
        return record
    canonical = dict(record)
    for key, aliases in RESPONSE_KEY_ALIASES.items():
        found = next((record[alias] for alias in aliases if alias in record), None)
        if found is not None:
            canonical[key] = found
    return canonical


def load_responses(path: Path) -> tuple[list[DdiCase], dict[str, str]]:
    """Cases and responses from JSON Lines with an image id, a reference and a response (see RESPONSE_KEY_ALIASES)."""
    if not path.is_file():
        raise CaseSourceError(f"Responses file {path} does not exist.")
    cases: list[DdiCase] = []
    responses: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = ResponseLine.model_validate(_canonical_keys(json.loads(raw)))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise CaseSourceError(
                f"{path.name} line {number} is not a JSON object with image_id, reference and response ({exc})."
            ) from exc
        if line.image_id in responses:
            raise CaseSourceError(f"{path.name} line {number} repeats image_id {line.image_id!r}.")
        cases.append(DdiCase(case_id=line.image_id, image_path="", reference=line.reference,
                             skin_tone=line.skin_tone, malignant=line.malignant))
        responses[line.image_id] = line.response
    if not cases:
        raise CaseSourceError(f"{path} has no response lines.")
    return cases, responses


def _judge_inputs(params: DdiParams, settings: Settings) -> tuple[list[DdiCase], dict[str, str], list[str] | None]:
    if params.responses_file:
        cases, responses = load_responses(Path(params.responses_file))
        return cases, responses, params.labels
    if not params.model_run_id:
        raise DdiPlanError("A ddi judge-stage run needs model_run_id or responses_file.")
    store = open_store(settings.db_url)
    model_params = parse_params(RunConfig.model_validate(store.get_run(params.model_run_id).config))
    if model_params.source is None:
        raise DdiPlanError(f"Run {params.model_run_id} is not a ddi model-stage run.")
    cases = load_cases(model_params.source)
    responses = {r.case_id: r.output["response"] for r in store.results(params.model_run_id, CaseStatus.OK)}
    return cases, responses, model_params.labels


def _judge_plan(params: DdiParams, settings: Settings) -> BenchmarkPlan:
    cases, responses, labels = _judge_inputs(params, settings)
    store = open_store(settings.db_url)
    judge: DdiJudge | None = None
    if params.mode == "classification":
        if not labels:
            raise DdiPlanError("Classification scoring needs the candidate labels.")
        check_references(cases, labels)
        scorer = {"scorer": "exact-label"}
    else:
        judge = make_ddi_judge(settings, backend=params.judge_backend, base_url=params.judge_base_url,
                               model=params.judge_model)
        scorer = {"judge": judge.name, "judge_model": judge.model}

    def missing_response(case: DdiCase) -> Exception:
        where = f"model run {params.model_run_id}" if params.model_run_id else params.responses_file
        return LookupError(f"No model response for {case.case_id} in {where}; resume that run first, then this one.")

    def run_case(case: DdiCase, repetition: int) -> CaseOutcome:  # type: ignore[override]
        response = responses.get(case.case_id)
        if response is None:
            raise missing_response(case)
        context = {"reference": case.reference, "skin_tone": case.skin_tone, "malignant": case.malignant}
        if judge is None:
            assert labels is not None
            score = score_label(response, case.reference, labels)
            return CaseOutcome(
                output={**context, "reference_label": score.reference_label, "predicted_label": score.match.label,
                        "match": score.match.model_dump()},
                metrics={"correct": score.correct},
            )
        verdict = judge.judge(
            DdiJudgeItem(case_id=case.case_id, reference=case.reference, response=response),
            on_attempt=record_attempts(store, this_run(), judge, case.case_id, repetition),
        )
        return CaseOutcome(output={**context, **verdict.model_dump(), "judge": judge.name,
                                   "judge_model": judge.model},
                           metrics={"correct": verdict.correct})

    def summarize(results: list[CaseResult]) -> dict[str, Any]:
        return summarize_scores(cases, results, params.mode, labels=labels,
                                scorer={**scorer, "model_run_id": params.model_run_id})

    workers = params.judge_concurrency or (judge.concurrency if judge is not None else 1)
    return BenchmarkPlan(cases=cases, run_case=run_case, summarize=summarize, workers=workers)  # type: ignore[arg-type]


def build_plan(config: RunConfig, settings: Settings) -> BenchmarkPlan:
    params = parse_params(config)
    if params.stage == "model":
        return _model_plan(params, settings)
    if params.stage == "judge":
        return _judge_plan(params, settings)
    raise DdiPlanError("This run is a single lesion-page evaluation; there is nothing to resume.")
