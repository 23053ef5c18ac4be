"""One lesion evaluation from the page: image -> model response (or a pasted one) -> judge -> stored.

Each evaluation is a ``ddi`` session run (``sessions.Session``, kind ``session``, params stage ``interactive``)
with one case result, so it carries its own settings, model provenance, model calls and judge attempts exactly
like a batch run, and the page lists a browser session's evaluations by their run ids.

A local model takes tens of seconds per image, so the model and the judge run on a helper thread while the
caller's ``on_progress`` hears, every half second, which stage is running and for how long. Whatever
``on_progress`` raises cancels the evaluation at once (the page's Cancel button makes Streamlit raise there): the
session is stored as failed with "cancelled", and the helper thread's late answer is discarded.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from medeval_core.benchmark import CaseContext
from medeval_core.benchmarks.ddi import JUDGE_ROLE, VLM_ROLE
from medeval_core.benchmarks.ddi.images import UPLOAD_TYPES as UPLOAD_TYPES
from medeval_core.benchmarks.ddi.images import ImageRejected as ImageRejected
from medeval_core.benchmarks.ddi.images import ValidatedImage
from medeval_core.benchmarks.ddi.images import validate_image as validate_image
from medeval_core.benchmarks.ddi.judge import (
    DdiJudge,
    DdiJudgeItem,
    OfflineDdiJudge,
    make_ddi_judge,
    request_settings,
)
from medeval_core.benchmarks.ddi.params import DdiParams, SessionParams
from medeval_core.benchmarks.ddi.tasks import (
    DEFAULT_LABELS,
    NO_LABEL,
    LabelMatch,
    Mode,
    final_answer_segment,
    match_label,
    prompt_for,
    score_label,
)
from medeval_core.benchmarks.ddi.tasks import canonical_label as canonical_label
from medeval_core.context import current_settings as current_settings
from medeval_core.context import current_store as current_store
from medeval_core.judges.base import JudgeError, attempt_recorder
from medeval_core.models import for_role, is_served, not_configured
from medeval_core.models.vlm import VlmBackend, VlmBackendError, greedy_settings
from medeval_core.prompts import PromptError, load_labels
from medeval_core.records import CaseOutcome, utc_now
from medeval_core.sessions import Session
from medeval_core.settings import GenerationSettings, Settings, SettingsError
from medeval_core.store import Store, StoreError
from medeval_core.transcript import reasoned

CASE_ID = "lesion"
PROGRESS_INTERVAL_S = 0.5
CANCELLED = "The evaluation was cancelled before it finished."

Stage = Literal["loading", "generating", "judging"]
STAGE_TEXT: dict[Stage, str] = {"loading": "Loading the model", "generating": "Generating the answer",
                                "judging": "Judging the answer"}
EVALUATION_ERRORS = (ValueError, VlmBackendError, SettingsError, PromptError)
"""What ``evaluate_upload`` raises with one sentence for the page: the input, the model, the settings, the
prompts."""
T = TypeVar("T")
ProgressCallback = Callable[[Stage, float], None]
"""Called with the running stage and the seconds it has run; raising from it cancels the evaluation."""


def _with_progress(stage: Stage, work: Callable[[], T], on_progress: ProgressCallback | None) -> T:
    """``work()`` on a helper thread, reporting ``stage`` to ``on_progress`` until it is done."""
    if on_progress is None:
        return work()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, which raises it
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"lesion-{stage}", daemon=True)
    started = time.monotonic()
    thread.start()
    while True:  # reported at least once, however fast the stage
        on_progress(stage, time.monotonic() - started)
        thread.join(PROGRESS_INTERVAL_S)
        if not thread.is_alive():
            break
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class LesionEvaluation(BaseModel):
    """What the page shows and the store keeps for one evaluation."""

    run_id: str
    created_at: datetime
    mode: Mode
    image: dict[str, Any] | None
    response_source: Literal["model", "pasted"]
    model: dict[str, Any] | None
    model_warnings: list[str]
    response: str
    model_answer: str = ""
    """What the model itself wrote as its final answer (``model_final_answer``), shown beside the judge's reading."""
    final_diagnosis: str
    reference: str | None
    verdict: dict[str, Any] | None
    judge: str | None
    judge_error: str | None


EXACT_LABEL_RULE = (
    "The SkinGPT-R1 classification prompt ends \"Use the exact label spelling\", so an answer counts only when it "
    "names exactly one candidate label spelt exactly as listed, capitals included: \"melanoma\" for \"Melanoma\" is "
    "refused, and the label it nearly named is shown."
)
"""The protocol's rule for reading a classification answer (skingpt-r1-evaluation-settings.md), said on the page."""


def model_final_answer(response: str) -> str:
    """The model's own final answer: its ``<answer>`` part when it has one, narrowed to the line after its last
    final-answer marker (else its last line), as the label matcher reads it."""
    parts = reasoned(response)
    return final_answer_segment(parts.answer if parts is not None else response)


def label_reason(match: LabelMatch, labels: Sequence[str], answer: str) -> str:
    """Why a classification answer (the model's final ``answer``) was read as it was: the label taken, or why none
    was."""
    if match.label is not None:
        return f"The answer selects {match.label!r}."
    if match.status == "ambiguous":
        return f"{answer!r} names more than one of the candidate labels, so none is taken."
    if match.lenient_label is not None:
        return (f"{answer!r} names {match.lenient_label!r} but not with its exact spelling, which the "
                "protocol requires: refused, counted as no label.")
    return f"{answer!r} names none of the {len(labels)} candidate labels."


def final_diagnosis(response: str, mode: Mode, settings: Settings, labels: Sequence[str] | None) -> str:
    """The diagnosis the response settles on, for display (the judge's own extraction is shown when it ran)."""
    if mode == "classification" and labels is not None:
        return match_label(response, labels).label or NO_LABEL
    found = OfflineDdiJudge.from_settings(settings).rules.extract(response)
    return found.text if found is not None else ""


def _verdict(mode: Mode, reference: str, response: str, labels: Sequence[str] | None, judge: DdiJudge | None,
             ctx: CaseContext, on_progress: ProgressCallback | None = None) -> tuple[dict[str, Any], str]:
    if mode == "classification":
        assert labels is not None
        score = score_label(response, reference, labels)
        if score.reference_label is None:
            raise ValueError(f"{reference!r} is not one of the {len(labels)} candidate labels; choose one of them "
                             "as the reference, or use open-ended mode.")
        return {"predicted_diagnosis": score.match.label or "", "correct": score.correct,
                "reason": label_reason(score.match, labels, model_final_answer(response))}, "exact-label"
    assert judge is not None
    verdict = _with_progress("judging", lambda: judge.judge(
        DdiJudgeItem(case_id=CASE_ID, reference=reference, response=response),
        on_attempt=attempt_recorder(judge, ctx.record_judgement), on_call=ctx.record_model_call), on_progress)
    return verdict.model_dump(), judge.name


def evaluate_lesion(
    settings: Settings,
    store: Store,
    mode: Mode,
    session_id: str,
    image: ValidatedImage | None = None,
    backend: VlmBackend | None = None,
    generation: GenerationSettings | None = None,
    pasted_response: str | None = None,
    reference: str | None = None,
    judge: DdiJudge | None = None,
    on_progress: ProgressCallback | None = None,
) -> LesionEvaluation:
    """Generate (with ``backend`` and ``image``) or take ``pasted_response``; judge when a reference is given."""
    reference = (reference or "").strip() or None
    labels = load_labels(DEFAULT_LABELS, settings.prompts_dir) if mode == "classification" else None
    prompt = prompt_for(mode, labels, settings.prompts_dir)
    generation = generation or settings.generation
    pasted = pasted_response is not None and bool(pasted_response.strip())
    if not pasted and (backend is None or image is None):
        raise ValueError("Upload an image and configure a model, or paste a model response to judge.")
    if reference is not None and mode == "open" and judge is None:
        raise ValueError("A judge is needed to score an open-ended answer against the reference.")

    from_model = not pasted and backend is not None
    params = DdiParams(SessionParams(
        mode=mode, labels=labels, session_id=session_id,
        model_backend=("openai" if backend.name == "openai" else "transformers") if from_model and backend else None,
        model=backend.model if from_model and backend else None,
        generation=generation if from_model else None, prompt=prompt if from_model else None,
    ))
    session = Session.open(store, settings, "ddi", params, CASE_ID, label=f"Lesion page ({mode})")
    ctx = session.context()
    source: Literal["model", "pasted"] = "pasted"
    model: dict[str, Any] | None = None
    try:
        if pasted:
            response = pasted_response or ""
        else:
            assert backend is not None and image is not None
            one = generation.model_copy(update={"batch_size": 1})
            response = _with_progress("generating", lambda: backend.generate(
                [image.image], [prompt], one, recorders=[ctx.record_model_call])[0], on_progress)
            source, model = "model", backend.describe()
        ctx.record_turn(source, "response", {"chars": len(response)})
    except Exception as exc:
        session.fail(f"{type(exc).__name__}: {exc}")
        raise
    except BaseException:
        session.fail(CANCELLED)
        raise

    verdict: dict[str, Any] | None = None
    judge_name: str | None = None
    judge_error: str | None = None
    if reference is not None:
        try:
            verdict, judge_name = _verdict(mode, reference, response, labels, judge, ctx, on_progress)
        except (JudgeError, ValueError) as exc:
            judge_error = str(exc)
            judge_name = judge.name if judge is not None and mode == "open" else None
        except BaseException:
            session.fail(CANCELLED)
            raise
    evaluation = LesionEvaluation(
        run_id=session.run_id, created_at=utc_now(), mode=mode, image=image.provenance() if image else None,
        response_source=source, model=model, model_warnings=(model or {}).get("warnings", []),
        response=response, model_answer=model_final_answer(response),
        final_diagnosis=(verdict or {}).get("predicted_diagnosis") or final_diagnosis(response, mode, settings, labels),
        reference=reference, verdict=verdict, judge=judge_name, judge_error=judge_error,
    )
    # A judge that gave no verdict leaves the evaluation without a score (the page shows the error).
    session.finish(CaseOutcome(output=evaluation.model_dump(mode="json"),
                               metrics={"correct": verdict["correct"]} if verdict else {}),
                   summary={"correct": verdict["correct"] if verdict else None, "judge": judge_name,
                            "judge_error": judge_error})
    return evaluation


class ModelSetup(BaseModel):
    """What the page says about the tested model and the judge before anything runs."""

    configured: bool
    backend: str
    model: str
    message: str
    judge: str


def model_setup(settings: Settings) -> ModelSetup:
    choice = settings.role(VLM_ROLE)
    configured = is_served(choice, "vision")
    where = f" at {choice.base_url}" if choice.backend == "openai" else ""
    judge = settings.role(JUDGE_ROLE)
    judge_text = ("offline rules (no judge endpoint configured)" if judge.backend in ("offline", "none")
                  else f"{judge.model} at {judge.base_url or request_settings(settings).base_url}")
    return ModelSetup(
        configured=configured, backend=choice.backend, model=choice.model,
        message=(f"{choice.backend} model {choice.model}{where}" if configured
                 else not_configured(VLM_ROLE, choice, "vision")),
        judge=judge_text,
    )


def _loaded_backend(settings: Settings) -> VlmBackend:
    backend = for_role(VLM_ROLE, settings, interface="vision")
    backend.describe()  # a local checkpoint loads here (then stays cached), so "loading" is its own stage
    return backend


def evaluate_upload(
    settings: Settings,
    store: Store,
    session_id: str,
    mode: Mode,
    image: ValidatedImage | None,
    reference: str | None = None,
    pasted_response: str | None = None,
    greedy: bool = False,
    on_progress: ProgressCallback | None = None,
) -> LesionEvaluation:
    """The page's Run button: the configured model (or the pasted response), then the configured judge; stages
    reported to ``on_progress``, which cancels the evaluation by raising."""
    pasted = pasted_response if pasted_response and pasted_response.strip() else None
    if pasted is None and image is None:
        raise ValueError("Upload a lesion image first, or paste a model response to judge.")
    backend = _with_progress("loading", lambda: _loaded_backend(settings), on_progress) if pasted is None else None
    needs_judge = bool(reference and reference.strip()) and mode == "open"
    judge = make_ddi_judge(settings) if needs_judge else None
    generation = greedy_settings(settings.generation) if greedy else settings.generation
    return evaluate_lesion(settings, store, mode, session_id, image=image, backend=backend, generation=generation,
                           pasted_response=pasted, reference=reference, judge=judge, on_progress=on_progress)


def session_evaluations(store: Store, run_ids: Sequence[str]) -> list[LesionEvaluation]:
    """The stored evaluations of these runs, newest first (runs deleted meanwhile are skipped)."""
    evaluations: list[LesionEvaluation] = []
    for run_id in run_ids:
        try:
            results = store.results(run_id)
        except StoreError:
            continue
        evaluations.extend(LesionEvaluation.model_validate(r.output) for r in results if r.case_id == CASE_ID)
    return sorted(evaluations, key=lambda e: e.created_at, reverse=True)


def candidate_labels(settings: Settings) -> list[str]:
    """The classification task's label space (the 23 candidate labels of the prompts folder)."""
    return load_labels(prompts_dir=settings.prompts_dir)


def new_session_id() -> str:
    return uuid.uuid4().hex
