"""DDI on the benchmark interfaces: a model (or responses) run, judged by score runs over its stored outputs.

A ``ddi`` run has one stage in its parameters (``params``):
- ``model``: one case per image; the solver returns the tested model's response. Images are generated in fixed
  batches of ``batch_size`` over the case list (the first case of a batch to be reached generates the whole
  batch), so batch composition, and with the per-batch seed the sampled text, does not depend on thread timing.
  On resume a batch holds only its unfinished cases (the runner hands the solver ``todo``; finished responses are
  never generated again), so the batches a crash interrupted are the only ones whose composition differs from an
  uninterrupted run.
- ``responses``: one case per line of a responses file; the solver returns that line's response (an import).

Judging is a score run over such a run (``service.score_run``): ``ddi-judge`` (the LLM judge, or the offline rules)
for open-ended answers, ``exact-label`` for classification. Every judge attempt is stored as a ``Judgement`` and
every request as a ``ModelCall`` of the score run. Why separate runs: the GPU stage and the remote-judge stage fail
for different reasons and run at different speeds, and keeping the responses in their own run lets a second judge
(offline rules next to the LLM judge, say) score the very same responses without generating them again. A model
case that failed shows up in the score run as a failed case that says so, so expected = judged + failed + pending
always holds. ``resume RUN_ID`` continues any of these runs.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from medeval_core.benchmark import (
    Benchmark,
    BenchmarkError,
    CaseContext,
    RunActors,
    RunSummary,
    Score,
    ScoreParams,
    Scorer,
    Solver,
)
from medeval_core.benchmarks.ddi import VLM_ROLE
from medeval_core.benchmarks.ddi.cases import DDI_METADATA, SKIN_TONES, CaseSourceError, DdiCase, load_cases
from medeval_core.benchmarks.ddi.images import describe_refusals, load_image_file, refused_images
from medeval_core.benchmarks.ddi.judge import DdiJudge, DdiJudgeItem, make_ddi_judge
from medeval_core.benchmarks.ddi.params import DdiParams, GenerateParams, ResponsesParams, SessionParams
from medeval_core.benchmarks.ddi.sources import DDI, LESIONS
from medeval_core.benchmarks.ddi.summary import summarize_run
from medeval_core.benchmarks.ddi.tasks import canonical_label, open_prompt, score_label
from medeval_core.data.files import undecodable_line
from medeval_core.judges.base import attempt_recorder
from medeval_core.models import for_role
from medeval_core.models.vlm import VlmBackend
from medeval_core.records import CaseResult, InputFile, ModelCall
from medeval_core.settings import Settings

logger = logging.getLogger(__name__)

JUDGE_SCORER = "ddi-judge"
LABEL_SCORER = "exact-label"


class DdiOutput(BaseModel):
    """A case's output: the response (generated or imported), the image read, the backend that answered."""

    response: str
    image: dict[str, Any] | None = None
    backend: dict[str, Any] | None = None


def check_references(cases: Sequence[DdiCase], labels: Sequence[str]) -> None:
    """Classification is scored in the label space: every reference must be one of the candidate labels."""
    unknown = sorted({case.reference for case in cases if canonical_label(case.reference, labels) is None})
    if unknown:
        raise CaseSourceError(
            f"{len(unknown)} reference diagnoses are not among the {len(labels)} candidate labels "
            f"(e.g. {', '.join(unknown[:3])}); map them to the label vocabulary or use the open-ended mode."
        )


def default_images_dir(settings: Settings) -> Path:
    """The DDI folder when its metadata is there, else the shared lesion images (which always ship), so the form
    never starts from a folder that does not exist."""
    ddi = DDI.folder_in(settings.data_dir)
    return ddi if (ddi / DDI_METADATA).is_file() else LESIONS.folder_in(settings.data_dir)


class ResponseLine(BaseModel):
    """One line of a ``judge ddi --responses`` file."""

    model_config = ConfigDict(extra="ignore")

    image_id: str
    reference: str
    response: str
    skin_tone: int | None = None
    malignant: bool | None = None

    @field_validator("image_id", "reference")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @field_validator("skin_tone")
    @classmethod
    def _fitzpatrick_group(cls, value: int | None) -> int | None:
        if value is not None and value not in SKIN_TONES:
            raise ValueError("must be 12, 34 or 56 (Fitzpatrick groups)")
        return value


def _one_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "line"
    return f"{where} {first['msg'].removeprefix('Value error, ')}"


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
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_line = undecodable_line(data, exc)
        raise CaseSourceError(f"{path.name} line {bad_line} is not UTF-8 text; save the responses file as "
                              "UTF-8.") from None
    cases: list[DdiCase] = []
    responses: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise CaseSourceError(f"{path.name} line {number} is not a JSON object ({reason}); write one object "
                                  "with image_id, reference and response per line.") from None
        if not isinstance(record, dict):
            raise CaseSourceError(f"{path.name} line {number} is a JSON {type(record).__name__}, not an object with "
                                  "image_id, reference and response.")
        try:
            line = ResponseLine.model_validate(_canonical_keys(record))
        except ValidationError as exc:
            raise CaseSourceError(f"{path.name} line {number}: {_one_line(exc)}; fix that line.") from None
        if line.image_id in responses:
            raise CaseSourceError(f"{path.name} line {number} repeats image_id {line.image_id!r}.")
        cases.append(DdiCase(case_id=line.image_id, image_path="", reference=line.reference,
                             skin_tone=line.skin_tone, malignant=line.malignant))
        responses[line.image_id] = line.response
    if not cases:
        raise CaseSourceError(f"{path} has no response lines.")
    return cases, responses


@dataclass
class Generated:
    """One case's share of a batch: its output or the error it failed with, and the model calls made for it."""

    output: DdiOutput | None = None
    error: Exception | None = None
    calls: list[ModelCall] = field(default_factory=list)


Produce = Callable[[list[DdiCase], CaseContext], dict[str, Generated]]


class ChunkBatcher:
    """Fixed batches; a batch is generated once per repetition, when its first case is asked for.

    ``produce`` gets a batch (and the asking case's context, for the models) and returns, per case id, what that
    case gets. Threads asking for cases of the same batch wait for that one generation; different batches run in
    parallel.
    """

    def __init__(self, chunks: Sequence[Sequence[DdiCase]], produce: Produce) -> None:
        self._chunks = [list(chunk) for chunk in chunks if chunk]
        self._chunk_of = {case.case_id: index for index, chunk in enumerate(self._chunks) for case in chunk}
        self._locks = [threading.Lock() for _ in self._chunks]
        self._done: dict[tuple[int, int], dict[str, Generated]] = {}
        self._produce = produce

    @classmethod
    def over(cls, cases: Sequence[DdiCase], todo: Sequence[DdiCase], batch_size: int,
             produce: Produce) -> ChunkBatcher:
        """Batches of ``batch_size`` over the whole case list, each keeping only its cases in ``todo``."""
        wanted = {case.case_id for case in todo}
        chunks = [[case for case in cases[i:i + batch_size] if case.case_id in wanted]
                  for i in range(0, len(cases), batch_size)]
        return cls(chunks, produce)

    def get(self, case: DdiCase, ctx: CaseContext) -> Generated:
        index = self._chunk_of[case.case_id]
        key = (index, ctx.repetition)
        with self._locks[index]:
            if key not in self._done:
                self._done[key] = self._produce(self._chunks[index], ctx)
            return self._done[key].pop(case.case_id)


class _GenerateSolver:
    def __init__(self, params: GenerateParams, cases: Sequence[DdiCase], todo: Sequence[DdiCase]) -> None:
        self.params = params
        self.batcher = ChunkBatcher.over(cases, todo, params.generation.batch_size, self._produce)
        self._batch_of = {case.case_id: index // params.generation.batch_size for index, case in enumerate(cases)}
        self.refused = refused_images([(case.case_id, Path(case.image_path)) for case in todo])
        if self.refused:
            # Python's last-resort handler puts this on stderr for the command line; the run's summary says it too.
            logger.warning("%s; their cases fail with the reason and the others run.",
                           describe_refusals(Counter(exc.kind for exc in self.refused.values()), len(todo)))

    def claim_group(self, case_id: str) -> int | None:
        """The fixed batch a case is generated in: workers sharing the run claim whole batches."""
        return self._batch_of.get(case_id)

    def _produce(self, chunk: list[DdiCase], ctx: CaseContext) -> dict[str, Generated]:
        shares = {case.case_id: Generated() for case in chunk}
        valid = []
        for case in chunk:
            if case.case_id in self.refused:
                shares[case.case_id].error = self.refused[case.case_id]
                continue
            try:
                valid.append((case, load_image_file(Path(case.image_path))))
            except Exception as exc:  # noqa: BLE001 - a bad image fails its own case, not the batch
                shares[case.case_id].error = exc
        if not valid:
            return shares
        try:
            backend: VlmBackend = ctx.model(VLM_ROLE)
            texts = backend.generate([image.image for _, image in valid], [self.params.prompt] * len(valid),
                                     self.params.generation,
                                     recorders=[shares[case.case_id].calls.append for case, _ in valid])
            described = backend.describe()
        except Exception as exc:  # noqa: BLE001 - every case of the batch fails with the same recorded error
            for case, _ in valid:
                shares[case.case_id].error = exc
            return shares
        for (case, image), text in zip(valid, texts, strict=True):
            shares[case.case_id].output = DdiOutput(response=text, image=image.provenance(), backend=described)
        return shares

    def __call__(self, case: DdiCase, ctx: CaseContext) -> DdiOutput:
        share = self.batcher.get(case, ctx)
        for call in share.calls:
            ctx.record_model_call(call)
        if share.error is not None:
            raise share.error
        assert share.output is not None
        return share.output


class _ResponsesSolver:
    def __init__(self, params: ResponsesParams) -> None:
        self.params = params
        _, self.responses = load_responses(Path(params.responses_file))

    def __call__(self, case: DdiCase, ctx: CaseContext) -> DdiOutput:
        response = self.responses.get(case.case_id)
        if response is None:
            raise LookupError(f"No model response for {case.case_id} in {self.params.responses_file}.")
        return DdiOutput(response=response)


class ResponseLength:
    name = "response"

    def __call__(self, case: DdiCase, output: DdiOutput, ctx: CaseContext) -> dict[str, Score]:
        return {"response_chars": Score(value=float(len(output.response)))}


class DdiJudgeScorer:
    """The DDI judge (LLM or offline rules) as a scorer: ``correct``, with the verdict in its provenance."""

    name = JUDGE_SCORER

    def __init__(self, judge: DdiJudge) -> None:
        self.judge = judge

    def __call__(self, case: DdiCase, output: DdiOutput, ctx: CaseContext) -> dict[str, Score]:
        verdict = self.judge.judge(DdiJudgeItem(case_id=case.case_id, reference=case.reference,
                                                response=output.response),
                                   on_attempt=attempt_recorder(self.judge, ctx.record_judgement),
                                   on_call=ctx.record_model_call)
        return {"correct": Score(value=verdict.correct, explanation=verdict.reason, provenance={
            "judge": self.judge.name, "judge_model": self.judge.model,
            "predicted_diagnosis": verdict.predicted_diagnosis})}


class ExactLabelScorer:
    """Classification in the label space: correct only for exactly one label, spelt exactly, the reference's."""

    name = LABEL_SCORER

    def __init__(self, labels: Sequence[str]) -> None:
        if not labels:
            raise BenchmarkError("The exact-label scorer needs the candidate labels (options: labels).")
        self.labels = list(labels)

    def __call__(self, case: DdiCase, output: DdiOutput, ctx: CaseContext) -> dict[str, Score]:
        score = score_label(output.response, case.reference, self.labels)
        return {"correct": Score(value=score.correct, provenance={
            "scorer": LABEL_SCORER, "reference_label": score.reference_label, "predicted_label": score.match.label,
            "match": score.match.model_dump()})}


class DdiBenchmark(Benchmark[DdiParams, DdiCase, DdiOutput]):
    name = "ddi"
    Params = DdiParams
    Output = DdiOutput
    score_run_scorers = (JUDGE_SCORER, LABEL_SCORER)

    def cases(self, params: DdiParams, settings: Settings) -> Sequence[DdiCase]:
        root = params.root
        if isinstance(root, GenerateParams):
            cases = load_cases(root.source)
        elif isinstance(root, ResponsesParams):
            cases, _ = load_responses(Path(root.responses_file))
        else:
            return [DdiCase(case_id="lesion", image_path="", reference="")]
        if root.mode == "classification":
            if not root.labels:
                raise BenchmarkError("Classification needs the candidate labels.")
            check_references(cases, root.labels)
        return cases

    def solver(self, params: DdiParams, settings: Settings, todo: Sequence[DdiCase]) -> Solver[DdiCase, DdiOutput]:
        root = params.root
        if isinstance(root, GenerateParams):
            return _GenerateSolver(root, self.cases(params, settings), todo)
        if isinstance(root, ResponsesParams):
            return _ResponsesSolver(root)
        raise BenchmarkError("This run is a single lesion-page evaluation; there is nothing to resume.")

    def scorers(self, params: DdiParams, settings: Settings) -> Sequence[Scorer[DdiCase, DdiOutput]]:
        return (ResponseLength(),)

    def scorer(self, name: str, options: Mapping[str, Any], settings: Settings) -> Scorer[DdiCase, DdiOutput]:
        if name == JUDGE_SCORER:
            return DdiJudgeScorer(make_ddi_judge(settings, backend=options.get("backend"),
                                                 base_url=options.get("base_url"), model=options.get("model")))
        if name == LABEL_SCORER:
            return ExactLabelScorer(options.get("labels") or [])
        raise BenchmarkError(f"The ddi benchmark has no scorer called {name!r}; it has {JUDGE_SCORER} and "
                             f"{LABEL_SCORER}.")

    def score_stages(self, params: DdiParams, settings: Settings) -> list[ScoreParams]:
        """A model or responses run is judged once its responses are in (open-ended: the judge the settings
        configure, offline when none; classification: exact labels), as ``run ddi`` does."""
        from medeval_core.benchmarks.ddi.workflow import score_params

        if isinstance(params.root, SessionParams):
            return []
        return [score_params(settings, params.mode, {}, params.labels)]

    def actors(self, params: DdiParams) -> RunActors:
        """A model run's agent is its vision model; imported responses are their own agent."""
        model = getattr(params.root, "model", None)
        if model:
            return RunActors(agent=model, models={"vlm": model})
        return RunActors(agent=params.root.stage)

    def summarize(self, params: DdiParams, cases: Sequence[DdiCase], results: Sequence[CaseResult]) -> RunSummary:
        return summarize_run(params, cases, results, self.run_counts(params, cases, results))

    def comparison_key(self, params: DdiParams, inputs: Mapping[str, InputFile]) -> dict[str, Any]:
        """Case ids are DDI image ids whether the outputs were generated here or imported from a responses file;
        the task (open-ended or classification, and its label list) must be the same."""
        return {"task": params.mode, "labels": params.root.labels}

    def input_files(self, params: DdiParams) -> dict[str, str]:
        root = params.root
        if isinstance(root, GenerateParams):
            source = root.source
            return {"metadata": source.metadata or str(Path(source.images_dir) / DDI_METADATA)}
        if isinstance(root, ResponsesParams):
            return {"responses": root.responses_file}
        return {}

    def form_defaults(self, settings: Settings, variant: str | None = None) -> dict[str, Any]:
        """The model stage starts from the protocol: the generation settings of configs/evaluation.json, the
        open-ended prompts, the DDI folder under the data directory and the vlm role's backend."""
        if variant != "model":
            return {}
        vlm = settings.role(VLM_ROLE)
        backend = {"model_backend": vlm.backend, "model": vlm.model, "base_url": vlm.base_url} \
            if vlm.backend in ("openai", "transformers") else {}
        return {"source": {"images_dir": str(default_images_dir(settings))},
                "generation": settings.generation.model_dump(mode="json"),
                "prompt": open_prompt(settings.prompts_dir).model_dump(mode="json"), **backend}

    def models(self, params: DdiParams, settings: Settings) -> dict[str, Callable[[], Any]]:
        root = params.root
        if not isinstance(root, GenerateParams):
            return {}

        def vlm() -> VlmBackend:
            # Built on first use: resuming a finished run, or summarising it, never loads the model.
            return for_role(VLM_ROLE, settings, {"backend": root.model_backend, "model": root.model,
                                                "base_url": root.base_url}, interface="vision")

        return {VLM_ROLE: vlm}


def session_params(params: SessionParams) -> DdiParams:
    return DdiParams(params)
