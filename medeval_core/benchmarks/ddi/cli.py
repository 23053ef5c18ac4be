"""``run ddi`` (the model run, then a judge score run over it) and ``judge ddi`` (responses made elsewhere imported
as a run, then judged by a score run). Light at import: the benchmark's modules load when a command runs."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medeval_core.benchmark import RunSummary
from medeval_core.benchmarks.ddi import reported_cli
from medeval_core.cli import (
    BenchmarkCli,
    CommandError,
    CommandGroups,
    exit_status,
    print_json,
    print_progress,
    print_summary,
)

if TYPE_CHECKING:
    from medeval_core.runs.runner import Progress, ProgressCallback, RunReport
    from medeval_core.settings import Settings
    from medeval_core.store import Store

MODES = ("open", "classification")
NAME = "ddi"


def _judge_options(parser: argparse.ArgumentParser, concurrency_flag: str) -> None:
    """The judge's options; its requests at once are ``concurrency_flag``: ``--concurrency`` of ``judge ddi`` (the
    judge run's cases at once), ``--judge-concurrency`` of ``run ddi``, whose ``--concurrency`` is the model run's."""
    parser.add_argument("--mode", choices=MODES, default="open",
                        help="open: DDI prompts, LLM/offline judge; classification: 23 candidate labels, exact match")
    parser.add_argument("--judge", choices=("offline", "openai"), default=None,
                        help="judge backend (default: settings; offline when no judge endpoint is configured)")
    parser.add_argument("--judge-base-url", help="OpenAI-compatible judge endpoint (implies --judge openai)")
    parser.add_argument("--judge-model", help="judge model name (default: configs/ddi_judge.json)")
    parser.add_argument(concurrency_flag, dest="judge_concurrency", type=int,
                        help="concurrent judge requests (protocol: 16)")


class EveryNCases:
    """The protocol's progress: a line each time another ``every`` cases have finished, and one at completion
    (finished cases are committed in groups, so a line is printed when a multiple of ``every`` is crossed)."""

    def __init__(self, every: int) -> None:
        self.every = max(1, every)
        self._last: tuple[str, int] | None = None

    def __call__(self, progress: Progress) -> None:
        finished = progress.done + progress.failed
        step = (progress.run_id, finished // self.every if progress.pending else -1)
        fresh = self._last is None or self._last[0] != step[0]
        if step != self._last and (fresh or step[1] == -1 or step[1] > (self._last or step)[1]):
            self._last = step
            print_progress(progress)


def _progress(settings: Settings, wanted: bool) -> ProgressCallback | None:
    return EveryNCases(settings.judge_settings("ddi").batch_evaluator_defaults.progress_every) if wanted else None


def _user_errors() -> tuple[type[Exception], ...]:
    from medeval_core.models.vlm import VlmBackendError
    from medeval_core.prompts import PromptError

    return (VlmBackendError, PromptError)


class DdiCli(BenchmarkCli):
    def __init__(self) -> None:
        super().__init__(NAME)
        # run id returned by ``run`` -> (model run report, judge run report or None when it did not start).
        self._pairs: dict[str, tuple[RunReport | None, RunReport | None]] = {}

    def add_run_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--images", type=Path, required=True, help="folder with the images (and ddi_metadata.csv)")
        parser.add_argument("--metadata", type=Path,
                            help="CSV of image file and reference (default: IMAGES/ddi_metadata.csv)")
        parser.add_argument("--image-column", help="CSV column with the image file name (DDI: DDI_file)")
        parser.add_argument("--reference-column", help="CSV column with the reference diagnosis (DDI: disease)")
        parser.add_argument("--limit", type=int, help="only the first N cases")
        parser.add_argument("--model-backend", choices=("transformers", "openai"), help="default: settings")
        parser.add_argument("--model", help="checkpoint folder or hub id (transformers), model name (openai)")
        parser.add_argument("--base-url", help="OpenAI-compatible vision endpoint, e.g. http://127.0.0.1:8000/v1")
        parser.add_argument("--greedy", action="store_true", help="greedy decoding instead of the protocol's sampling")
        parser.add_argument("--batch-size", type=int, help="images per batch per GPU (protocol: 16)")
        parser.add_argument("--max-new-tokens", type=int, help="protocol: 4096")
        _judge_options(parser, "--judge-concurrency")

    def register(self, groups: CommandGroups) -> None:
        judge = groups.judge.add_parser(NAME, help="judge existing responses (JSON Lines: image_id, reference, "
                                                   "response): imported as a run, then judged by a score run")
        judge.add_argument("--responses", type=Path, required=True, help="the .jsonl file of responses")
        _judge_options(judge, "--concurrency")
        judge.add_argument("--run-id", help="id of the judge run; an existing id continues that run with its stored "
                                            "settings (the imported responses are run RUN_ID-responses)")
        judge.add_argument("--label", default="", help="free text shown in run lists")
        judge.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
        judge.set_defaults(handler=self._judge_command)
        reported_cli.register(groups)

    # run ddi -------------------------------------------------------------------------------------------------

    def run(self, args: argparse.Namespace, settings: Settings, store: Store,
            on_progress: ProgressCallback | None) -> RunReport:
        from medeval_core.benchmarks.ddi import workflow

        try:
            model, judge = workflow.run_ddi(
                settings, store, workflow.RunRequest(
                    images=str(args.images.resolve()), metadata=str(args.metadata.resolve()) if args.metadata else None,
                    image_column=args.image_column, reference_column=args.reference_column, limit=args.limit,
                    mode=args.mode, model_backend=args.model_backend, model=args.model, base_url=args.base_url,
                    greedy=args.greedy, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                    concurrency=args.concurrency, repetitions=args.repetitions or 1),
                self._judge_choice(args, "--judge-concurrency"), run_id=args.run_id, label=args.label,
                on_progress=_progress(settings, on_progress is not None))
        except _user_errors() as exc:
            raise CommandError(str(exc)) from exc
        report = judge or model
        self._pairs[report.run_id] = (model, judge)
        return report

    def json_payload(self, report: RunReport, summary: RunSummary) -> Any:
        """Today's shape: ``{model_run, judge_run, summary}``, the summary with its flat keys."""
        model, judge = self._pairs.get(report.run_id, (None, report))
        return {"model_run": model.model_dump(mode="json") if model is not None else None,
                "judge_run": judge.model_dump(mode="json") if judge is not None else None,
                "summary": summary.extras}

    def print_report(self, report: RunReport, summary: RunSummary) -> None:
        print(file=sys.stderr)
        model, judge = self._pairs.get(report.run_id, (None, report))
        if model is not None and judge is not None:
            print(f"model run {model.run_id}: {model.status}; done {model.done}, failed {model.failed}, "
                  f"pending {model.pending}")
        print_summary(summary, report)
        if judge is None:
            print(f"The judge did not start; continue with `python -m medeval_core resume {report.run_id}` and run "
                  "this command again with the same --run-id.")

    def command_status(self, report: RunReport, summary: RunSummary) -> int:
        """1 when the model stage refused any image (its cases failed; the others ran and were judged)."""
        from medeval_core.benchmarks.ddi.images import describe_refusals
        from medeval_core.context import current_settings, current_store
        from medeval_core.runs import service

        status = super().command_status(report, summary)
        model, _ = self._pairs.get(report.run_id, (None, report))
        store = current_store()
        model_summary = summary if model is None or model.run_id == report.run_id else (
            service.stored_summary(store, model.run_id) or service.summarize_run(store, model.run_id,
                                                                                 current_settings()))
        refused = model_summary.extras.get("images_refused") or {}
        if not refused:
            return status
        expected = int(model_summary.extras.get("expected") or model_summary.counts.expected)
        print(f"error: {describe_refusals(Counter(refused), expected)}; their cases failed with the reason "
              f"(`python -m medeval_core runs show {(model or report).run_id}` lists them): fix or remove those "
              "files and resume the run.", file=sys.stderr)
        return max(status, 1)

    def _judge_choice(self, args: argparse.Namespace, concurrency_flag: str) -> dict[str, Any]:
        if args.judge_concurrency is not None and args.judge_concurrency < 1:
            raise CommandError(f"{concurrency_flag} must be at least 1.")
        return {"backend": args.judge, "base_url": args.judge_base_url, "model": args.judge_model,
                "concurrency": args.judge_concurrency}

    # judge ddi -----------------------------------------------------------------------------------------------

    def _judge_command(self, args: argparse.Namespace) -> int:
        from medeval_core.benchmarks.ddi import workflow
        from medeval_core.context import current_settings, current_store
        from medeval_core.runs import service

        settings, store = current_settings(), current_store()
        choice = self._judge_choice(args, "--concurrency")
        try:
            report = workflow.judge_responses(settings, store, args.responses.resolve(), args.mode, choice,
                                              run_id=args.run_id, label=args.label,
                                              on_progress=_progress(settings, not args.json))
        except _user_errors() as exc:
            raise CommandError(str(exc)) from exc
        summary = service.stored_summary(store, report.run_id) or service.summarize_run(store, report.run_id,
                                                                                         settings)
        if args.json:
            print_json({"model_run": None, "judge_run": report.model_dump(mode="json"), "summary": summary.extras})
        else:
            print(file=sys.stderr)
            print_summary(summary, report)
        return exit_status(report)


CLI = DdiCli()
