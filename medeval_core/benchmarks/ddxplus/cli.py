"""``run ddxplus`` options and ``score ddxplus`` (outside predictions). Light at import: benchmark modules are
imported inside the handlers, so ``python -m medeval_core --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medeval_core.benchmark import BenchmarkError, RunSummary
from medeval_core.cli import BenchmarkCli, CommandError, CommandGroups, print_json, print_repetitions

if TYPE_CHECKING:
    from pydantic import BaseModel

    from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase
    from medeval_core.benchmarks.ddxplus.patients import PatientSet
    from medeval_core.runs.runner import RunReport
    from medeval_core.settings import Settings


class DDXPlusCli(BenchmarkCli):
    reads_line_files = True

    def add_run_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = (
            "Each patient is questioned by the agent (30 questions at most) and scored; the metrics print beside "
            "the published AARLC and BASD rows. Resume an interrupted run with `python -m medeval_core resume "
            "RUN_ID` or by passing the same --run-id.")
        parser.add_argument("--patients", type=Path, required=True,
                            help="DDXPlus patients CSV or release zip to question")
        parser.add_argument("--train", type=Path,
                            help="training patients (likelihoods and the learnt differential head)")
        parser.add_argument("--kb", type=Path, help="KB folder (default: MEDEVAL_DATA_DIR/ddxplus)")
        parser.add_argument("--agent", required=True,
                            help="kb-bayes, llm, or an import path package.module:Class of your own agent "
                                 "(interface: medeval_core/benchmarks/ddxplus/benchmark.py)")
        parser.add_argument("--no-kb", action="store_true",
                            help="kb-bayes: learn likelihoods from --train only, without the KB's condition lists")
        parser.add_argument("--confidence", type=float,
                            help="kb-bayes: stop once the top pathology reaches this posterior")
        parser.add_argument("--limit", type=int, help="question only the first N loaded patients")

    def run_params(self, args: argparse.Namespace, settings: Settings) -> BaseModel:
        from medeval_core.benchmarks.ddxplus.benchmark import build_params

        if args.limit is not None and args.limit < 1:
            raise CommandError("--limit must be at least 1.")
        if args.train is not None and args.patients.resolve() == args.train.resolve():
            print("warning: --train is the same file as --patients: the figures are optimistic (seen patients).",
                  file=sys.stderr)
        if args.agent == "kb-bayes" and args.train is None:
            print("note: without --train the KB-Bayes differential is its KB posterior (DDF1 near 31); give "
                  "training patients (e.g. the shared sample) for the learnt differential head.", file=sys.stderr)
        agent_params: dict[str, Any] = {}
        if args.no_kb:
            agent_params["use_kb"] = False
        if args.confidence is not None:
            agent_params["confidence"] = args.confidence
        return build_params(settings, args.patients, args.agent, train=args.train, kb=args.kb, limit=args.limit,
                            agent_params=agent_params, concurrency=args.concurrency)

    def json_payload(self, report: RunReport, summary: RunSummary) -> Any:
        return summary.extras["metrics"]

    def print_report(self, report: RunReport, summary: RunSummary) -> None:
        from medeval_core.benchmarks.ddxplus.scoring import format_table

        extras = summary.extras
        print()
        print(f"{report.run_id}: {report.status}; {extras['finished']} of {summary.counts.expected} consultations "
              f"({extras['patients']} patients x {max(len(summary.repetitions), 1)} repetitions) finished, "
              f"{extras['failed']} failed. Agent {extras['agent']} "
              f"({'read' if extras['reads_kb'] else 'did not read'} the KB).")
        if "skipped" in extras["load_report"]:
            print(f"warning: {extras['load_report']}", file=sys.stderr)
        rows = {"this run": extras["metrics"]} if extras["metrics"] else {}
        sources = list(dict.fromkeys(row.source for row in summary.reference))
        rows.update({f"{row.label} [{sources.index(row.source) + 1}]": row.values for row in summary.reference})
        print(format_table(rows))
        print_repetitions(summary)
        if extras["failed"]:
            print(f"{extras['failed']} failed consultation(s) are counted apart, not in this run's metrics.")
        for number, source in enumerate(sources, start=1):
            print(f"[{number}] {source}")
        print(f"Per-pathology figures: `python -m medeval_core runs show {report.run_id} --json`.")

    def register(self, groups: CommandGroups) -> None:
        score = groups.score.add_parser(
            "ddxplus",
            help="score DDXPlus predictions (JSON Lines) against a patients file",
            description="Print DDR, DDP, DDF1, GTPA, GTPA@1, PER and IL (design.md §3.2 semantics). One JSON line "
                        'per patient: {"index": 0, "differential": {"URTI": 0.7}, "inquired": ["E_91"]}.',
        )
        score.add_argument("--patients", type=Path, required=True, help="DDXPlus patients CSV or release zip")
        score.add_argument("--predictions", type=Path, required=True, help="JSON Lines, one prediction per patient")
        score.add_argument("--kb", type=Path, help="folder with release_evidences.json and release_conditions.json "
                                                    "(default: MEDEVAL_DATA_DIR/ddxplus)")
        score.add_argument("--json", action="store_true", help="print only the seven metrics as a JSON object")
        score.add_argument("--skip-bad-lines", action="store_true",
                           help="score the good patient rows and warn about the bad ones instead of refusing the file")
        score.set_defaults(handler=_score)


def _kb_dir(args: argparse.Namespace) -> Path:
    if args.kb is not None:
        return Path(args.kb)
    from medeval_core.benchmarks.ddxplus.sources import default_kb_dir
    from medeval_core.context import current_settings

    return default_kb_dir(current_settings().data_dir)


def load_inputs(args: argparse.Namespace) -> tuple[KnowledgeBase, PatientSet]:
    from medeval_core.benchmarks.ddxplus.kb import KnowledgeBaseError, load_kb
    from medeval_core.benchmarks.ddxplus.patients import PatientFileError, load_patients

    try:
        kb = load_kb(_kb_dir(args))
        patients = load_patients(args.patients, kb)
        if not args.skip_bad_lines:
            patients.report.refuse_skipped(args.patients)
    except (KnowledgeBaseError, PatientFileError) as exc:
        raise CommandError(str(exc)) from None
    if patients.report.n_skipped:
        print(f"warning: {patients.report.summary()}", file=sys.stderr)
    if not len(patients):
        raise CommandError(f"{args.patients} has no usable patient rows; check that it is a DDXPlus patients file.")
    return kb, patients


def _score(args: argparse.Namespace) -> int:
    from medeval_core.benchmarks.ddxplus.scoring import (
        PredictionFileError,
        lines_read_aside,
        read_predictions,
        score,
    )

    with lines_read_aside(args.predictions) as lines:
        _, patients = load_inputs(args)
        try:
            predictions = read_predictions(args.predictions, patients, lines)
        except PredictionFileError as exc:
            raise CommandError(str(exc)) from None
    for warning in predictions.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    report = score(patients, predictions)
    if args.json:
        print_json(report.metrics)
        return 0
    print(f"DDXPlus metrics over {report.n_patients} patients (percentages; IL in turns)")
    for key, value in report.metrics.items():
        print(f"  {key:<7} {value:10.4f}")
    return 0


CLI = DDXPlusCli("ddxplus")

__all__ = ["CLI", "BenchmarkError", "DDXPlusCli", "load_inputs"]
