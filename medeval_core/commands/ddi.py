"""``run ddi`` (model stage, then judge stage) and ``judge ddi`` (judge responses produced elsewhere)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from medeval_core.backends.vlm import VlmBackendError
from medeval_core.benchmarks.ddi.batch import DdiBatchReport, JudgeChoice, ModelChoice, judge_responses, run_ddi
from medeval_core.benchmarks.ddi.cases import CaseSource, CaseSourceError
from medeval_core.benchmarks.ddi.plan import DdiPlanError
from medeval_core.benchmarks.ddi.tasks import MODES
from medeval_core.cli import CommandError, CommandGroups, print_json
from medeval_core.commands.runs import print_progress
from medeval_core.context import current_settings, current_store
from medeval_core.prompts import PromptError
from medeval_core.runs import Progress


def _judge_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=MODES, default="open",
                        help="open: DDI prompts, LLM/offline judge; classification: 23 candidate labels, exact match")
    parser.add_argument("--judge", choices=("offline", "openai"), default=None,
                        help="judge backend (default: settings; offline when no judge endpoint is configured)")
    parser.add_argument("--judge-base-url", help="OpenAI-compatible judge endpoint (implies --judge openai)")
    parser.add_argument("--judge-model", help="judge model name (default: configs/ddi_judge.json)")
    parser.add_argument("--concurrency", type=int, help="concurrent judge requests (protocol: 16)")
    parser.add_argument("--run-id", help="id for the run; an existing id continues that run with its stored settings")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")


def register(groups: CommandGroups) -> None:
    run = groups.run.add_parser("ddi", help="DDI lesion diagnosis: tested model, then judge (two resumable runs)")
    run.add_argument("--images", type=Path, required=True, help="folder with the images (and ddi_metadata.csv)")
    run.add_argument("--metadata", type=Path, help="CSV of image file and reference (default: IMAGES/ddi_metadata.csv)")
    run.add_argument("--image-column", help="CSV column with the image file name (DDI: DDI_file)")
    run.add_argument("--reference-column", help="CSV column with the reference diagnosis (DDI: disease)")
    run.add_argument("--limit", type=int, help="only the first N cases")
    run.add_argument("--model-backend", choices=("transformers", "openai"), help="default: settings")
    run.add_argument("--model", help="checkpoint folder or hub id (transformers), model name (openai)")
    run.add_argument("--base-url", help="OpenAI-compatible vision endpoint, e.g. http://127.0.0.1:8000/v1")
    run.add_argument("--greedy", action="store_true", help="greedy decoding instead of the protocol's sampling")
    run.add_argument("--batch-size", type=int, help="images per batch per GPU (protocol: 16)")
    run.add_argument("--max-new-tokens", type=int, help="protocol: 4096")
    _judge_options(run)
    run.set_defaults(handler=_run)

    judge = groups.judge.add_parser("ddi", help="judge existing responses (JSON Lines: image_id, reference, response)")
    judge.add_argument("--responses", type=Path, required=True, help="the .jsonl file of responses")
    _judge_options(judge)
    judge.set_defaults(handler=_judge)


def _progress(args: argparse.Namespace):  # noqa: ANN202 - returns a ProgressCallback or None
    if args.json:
        return None
    every = current_settings().judge.batch_evaluator_defaults.progress_every

    def report(progress: Progress) -> None:
        finished = progress.done + progress.failed
        if finished % every == 0 or progress.pending == 0:
            print_progress(progress)

    return report


def _judge_choice(args: argparse.Namespace) -> JudgeChoice:
    if args.concurrency is not None and args.concurrency < 1:
        raise CommandError("--concurrency must be at least 1.")
    return JudgeChoice(backend=args.judge, base_url=args.judge_base_url, model=args.judge_model,
                       concurrency=args.concurrency)


def _print(report: DdiBatchReport, as_json: bool) -> None:
    if as_json:
        print_json(report.model_dump(mode="json"))
        return
    print(file=sys.stderr)
    for stage, run in (("model", report.model_run), ("judge", report.judge_run)):
        if run is not None:
            print(f"{stage} stage {run.run_id}: {run.status}; done {run.done}, failed {run.failed}, "
                  f"pending {run.pending}")
    summary = report.summary
    if "accuracy_expected" in summary:
        def pct(value: float | None) -> str:
            return "n/a" if value is None else f"{100 * value:.2f}%"

        print(f"accuracy_expected {pct(summary['accuracy_expected'])} ({summary['correct']}/{summary['expected']}), "
              f"accuracy_judged {pct(summary['accuracy_judged'])} ({summary['correct']}/{summary['judged']}); "
              f"pending {summary['pending']}, failed {summary['failed']}")
        for group, values in {**summary.get("by_skin_tone", {}), **summary.get("by_malignancy", {})}.items():
            print(f"  {group:<10} {pct(values['accuracy_judged'])} ({values['correct']}/{values['judged']})")
    elif report.judge_run is None and report.model_run is not None:
        print(f"The judge stage did not start; continue with `python -m medeval_core resume {report.model_run.run_id}`"
              " and run this command again with the same --run-id.")


_USER_ERRORS = (CaseSourceError, DdiPlanError, VlmBackendError, PromptError)


def _run(args: argparse.Namespace) -> int:
    source = CaseSource(images_dir=str(args.images.resolve()),
                        metadata=str(args.metadata.resolve()) if args.metadata else None,
                        image_column=args.image_column, reference_column=args.reference_column, limit=args.limit)
    model = ModelChoice(backend=args.model_backend, model=args.model, base_url=args.base_url, greedy=args.greedy,
                        batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    try:
        report = run_ddi(current_settings(), current_store(), source, mode=args.mode, model=model,
                         judge=_judge_choice(args), run_id=args.run_id, on_progress=_progress(args))
    except _USER_ERRORS as exc:
        raise CommandError(str(exc)) from exc
    _print(report, args.json)
    return 0


def _judge(args: argparse.Namespace) -> int:
    try:
        report = judge_responses(current_settings(), current_store(), args.responses.resolve(), mode=args.mode,
                                 judge=_judge_choice(args), run_id=args.run_id, on_progress=_progress(args))
    except _USER_ERRORS as exc:
        raise CommandError(str(exc)) from exc
    _print(report, args.json)
    return 0
