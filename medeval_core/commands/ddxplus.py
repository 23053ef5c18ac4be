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
