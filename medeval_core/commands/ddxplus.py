"""``score ddxplus`` and ``run ddxplus``: DDXPlus scoring of outside predictions, and batch runs of built-in agents."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from medeval_core.cli import CommandError, CommandGroups, print_json

if TYPE_CHECKING:
    from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase
    from medeval_core.benchmarks.ddxplus.patients import PatientSet

# Benchmark modules are imported inside the handlers: `python -m medeval_core --help` stays fast.


def register(groups: CommandGroups) -> None:
    score = groups.score.add_parser(
        "ddxplus",
        help="score DDXPlus predictions (JSON Lines) against a patients file",
        description="Print DDR, DDP, DDF1, GTPA, GTPA@1, PER and IL (design.md §3.2 semantics). One JSON line per "
                    'patient: {"index": 0, "differential": {"URTI": 0.7}, "inquired": ["E_91"]}.',
    )
    score.add_argument("--patients", type=Path, required=True, help="DDXPlus patients CSV or release zip")
    score.add_argument("--predictions", type=Path, required=True, help="JSON Lines, one prediction per patient")
    score.add_argument("--kb", type=Path, help="folder with release_evidences.json and release_conditions.json "
                                                "(default: MEDEVAL_DATA_DIR/ddxplus)")
    score.add_argument("--json", action="store_true", help="print only the seven metrics as a JSON object")
    score.set_defaults(handler=_score)

    run = groups.run.add_parser(
        "ddxplus",
        help="question simulated DDXPlus patients with a built-in agent (resumable batch run)",
        description="Each patient is questioned by the agent (30 questions at most) and scored; the metrics print "
                    "beside the published AARLC and BASD rows. Resume an interrupted run with "
                    "`python -m medeval_core resume RUN_ID` or by passing the same --run-id.",
    )
    run.add_argument("--patients", type=Path, required=True, help="DDXPlus patients CSV or release zip to question")
    run.add_argument("--train", type=Path, help="training patients (likelihoods and the learnt differential head)")
    run.add_argument("--kb", type=Path, help="KB folder (default: MEDEVAL_DATA_DIR/ddxplus)")
    run.add_argument("--agent", choices=("kb-bayes", "llm"), required=True)
    run.add_argument("--no-kb", action="store_true",
                     help="kb-bayes: learn likelihoods from --train only, without reading the KB's condition lists")
    run.add_argument("--confidence", type=float, help="kb-bayes: stop once the top pathology reaches this posterior")
    run.add_argument("--limit", type=int, help="question only the first N loaded patients")
    run.add_argument("--workers", type=int, default=1, help="patients questioned at once (useful for --agent llm)")
    run.add_argument("--run-id", help="name the run; an existing run with this id is resumed")
    run.add_argument("--label", default="", help="free text shown in run lists")
    run.add_argument("--json", action="store_true", help="print only the seven metrics as a JSON object")
    run.set_defaults(handler=_run)


def _kb_dir(args: argparse.Namespace) -> Path:
    if args.kb is not None:
        return args.kb
    from medeval_core.benchmarks.ddxplus import default_kb_dir
    from medeval_core.context import current_settings

    return default_kb_dir(current_settings().data_dir)


def load_inputs(args: argparse.Namespace) -> tuple[KnowledgeBase, PatientSet]:
    from medeval_core.benchmarks.ddxplus.kb import KnowledgeBaseError, load_kb
    from medeval_core.benchmarks.ddxplus.patients import PatientFileError, load_patients

    try:
        kb = load_kb(_kb_dir(args))
        patients = load_patients(args.patients, kb)
    except (KnowledgeBaseError, PatientFileError) as exc:
        raise CommandError(str(exc)) from None
    if patients.report.n_skipped:
        print(f"warning: {patients.report.summary()}", file=sys.stderr)
    if not len(patients):
        raise CommandError(f"{args.patients} has no usable patient rows; check that it is a DDXPlus patients file.")
    return kb, patients


def _score(args: argparse.Namespace) -> int:
    from medeval_core.benchmarks.ddxplus.scoring import PredictionFileError, read_predictions, score

    _, patients = load_inputs(args)
    try:
        predictions = read_predictions(args.predictions, patients)
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


def _run(args: argparse.Namespace) -> int:
    from medeval_core import jobs
    from medeval_core.backends.chat import ChatBackendError
    from medeval_core.benchmarks.ddxplus.kb import KnowledgeBaseError
    from medeval_core.benchmarks.ddxplus.patients import PatientFileError
    from medeval_core.benchmarks.ddxplus.plan import DDXPlusRunError, run_params
    from medeval_core.benchmarks.ddxplus.scoring import format_table
    from medeval_core.commands.runs import ThrottledProgress
    from medeval_core.context import current_settings, current_store

    if args.limit is not None and args.limit < 1:
        raise CommandError("--limit must be at least 1.")
    if args.train is not None and args.patients.resolve() == args.train.resolve():
        print("warning: --train is the same file as --patients: the figures are optimistic (seen patients).",
              file=sys.stderr)
    if args.agent == "kb-bayes" and args.train is None:
        print("note: without --train the KB-Bayes differential is its KB posterior (DDF1 near 31); give training "
              "patients (e.g. the shared sample) for the learnt differential head.", file=sys.stderr)
    agent_params: dict[str, object] = {}
    if args.no_kb:
        agent_params["use_kb"] = False
    if args.confidence is not None:
        agent_params["confidence"] = args.confidence
    settings = current_settings()
    try:
        params = run_params(settings, args.patients, args.agent, train=args.train, kb=args.kb, limit=args.limit,
                            agent_params=agent_params)
    except (KnowledgeBaseError, PatientFileError, DDXPlusRunError, ChatBackendError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    config = jobs.new_run_config("ddxplus", settings, params, label=args.label)
    store = current_store()
    try:
        report = jobs.launch(config, settings, store, workers=args.workers, run_id=args.run_id,
                             on_progress=None if args.json else ThrottledProgress())
    except (KnowledgeBaseError, PatientFileError, DDXPlusRunError, ChatBackendError) as exc:
        raise CommandError(str(exc)) from None
    summary = store.get_run(report.run_id).summary
    if args.json:
        print_json(summary["metrics"])
        return 0
    print()
    print(f"{report.run_id}: {report.status}; {summary['finished']} of {summary['patients']} patients finished, "
          f"{summary['failed']} failed. Agent {summary['agent']} "
          f"({'read' if summary['reads_kb'] else 'did not read'} the KB).")
    if "skipped" in summary["load_report"]:
        print(f"warning: {summary['load_report']}", file=sys.stderr)
    print(format_table({"this run": summary["metrics"], **summary["reference"]}))
    print("Reference rows: published test-set figures (134,529 patients). Per-pathology figures: "
          f"`python -m medeval_core runs show {report.run_id} --json`.")
    return 0
