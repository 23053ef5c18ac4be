"""``run mediq`` options and ``score mediq --results`` (result files of the MediQ benchmark code itself).
Light at import: benchmark modules are imported inside the handlers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medeval_core.cli import BenchmarkCli, CommandError, CommandGroups, add_old_name, print_json, print_summary

if TYPE_CHECKING:
    from pydantic import BaseModel

    from medeval_core.benchmark import RunSummary
    from medeval_core.runs.runner import RunReport
    from medeval_core.settings import Settings


class MediqCli(BenchmarkCli):
    reads_line_files = True

    def add_run_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = (
            "Each case: the expert sees the initial information, the question and the options, asks the patient "
            "one question at a time and chooses an option (at the budget it must choose). Patient answers are "
            "stored as turns. Resume with `python -m medeval_core resume RUN_ID` or the same --run-id.")
        parser.add_argument("--cases", type=Path, required=True,
                            help="MEDIQ JSON Lines (e.g. MEDEVAL_DATA_DIR/mediq/imedqa_sample200.jsonl)")
        parser.add_argument("--expert", choices=("llm", "replay"), required=True,
                            help="llm (the expert role's chat model) or replay of --actions")
        parser.add_argument("--actions", type=Path,
                            help='replay: JSON Lines {"case_id", "actions": [{"kind": "question", "text"} | '
                                 '{"kind": "choice", "option": "C"}]}')
        parser.add_argument("--patient", choices=("offline", "llm"), default="offline",
                            help="offline fact-select patient (default) or the patient role's chat model")
        parser.add_argument("--withhold-answer-facts", action="store_true",
                            help="the patient never gives a fact containing the correct option's text (MediQ's "
                                 "patient gives them; recorded with the run)")
        parser.add_argument("--max-turns", type=int, default=None, help="question budget (default 10)")
        add_old_name(parser, "--max-questions", "--max-turns")
        parser.add_argument("--abstention", choices=("fixed", "binary", "scale"), default=None,
                            help="llm expert: when to stop asking (default scale, threshold 4)")
        parser.add_argument("--threshold", type=int, default=None, help="scale abstention: choose at >= this (1-5)")
        parser.add_argument("--limit", type=int, help="only the first N valid cases")
        parser.add_argument("--no-baseline", action="store_true",
                            help="do not ask the expert for its choice without questions")

    def run_params(self, args: argparse.Namespace, settings: Settings) -> BaseModel:
        from medeval_core.benchmarks.mediq.benchmark import build_params

        if args.expert == "replay" and args.actions is None:
            raise CommandError("--expert replay needs --actions FILE (JSON Lines of actions per case).")
        if args.max_turns is not None and args.max_turns < 0:
            raise CommandError("--max-turns must be 0 or more.")
        if args.limit is not None and args.limit < 1:
            raise CommandError("--limit must be at least 1.")
        return build_params(settings, args.cases, args.expert, args.actions, patient=args.patient,
                            max_turns=args.max_turns, abstention=args.abstention,
                            threshold=args.threshold, limit=args.limit, baseline=not args.no_baseline,
                            withhold_answer_facts=args.withhold_answer_facts,
                            concurrency=args.concurrency)

    def json_payload(self, report: RunReport, summary: RunSummary) -> Any:
        return {"run_id": report.run_id, "status": report.status, **summary.extras["metrics"],
                "counts": summary.counts.model_dump()}

    def register(self, groups: CommandGroups) -> None:
        score = groups.score.add_parser(
            "mediq", help="score a MediQ result file (the MediQ benchmark code's output JSON Lines)",
            description="Accuracy (Wilson 95%), Ave-Q, timeout rate, MediQ's Avg. Turns (Ave-Q + 1) and the accuracy "
                        "without asking (the first intermediate choice) of a result file written by stellalisy/mediQ's "
                        "mediQ_benchmark.py.")
        score.add_argument("--results", type=Path, required=True, help="MediQ output JSON Lines")
        score.add_argument("--cases", type=Path,
                           help="score against this MEDIQ cases file's answer_idx instead of the file's own")
        score.add_argument("--max-questions", type=int, default=30,
                           help="the --max_questions the MediQ run used (MediQ's default: 30); as MediQ counts, a "
                                "case with more intermediate choices than this timed out")
        score.add_argument("--json", action="store_true", help="print the figures as one JSON object")
        score.set_defaults(handler=_score)


def _score(args: argparse.Namespace) -> int:
    from medeval_core.benchmark import RunCounts, RunSummary
    from medeval_core.benchmarks.mediq.cases import MediqFileError, load_cases
    from medeval_core.benchmarks.mediq.scoring import ResultFileError, headline, score_result_file

    answers = None
    if args.cases is not None:
        try:
            answers = {case.case_id: case.answer_idx for case in load_cases(args.cases).cases}
        except MediqFileError as exc:
            raise CommandError(str(exc)) from None
    try:
        scores = score_result_file(args.results, answers, max_questions=args.max_questions)
    except ResultFileError as exc:
        raise CommandError(str(exc)) from None
    metrics = headline(scores, "result lines")
    if args.json:
        print_json({**{m.name: m.value for m in metrics}, "n": len(scores)})
        return 0
    print_summary(RunSummary(benchmark="mediq", title=f"MEDIQ result file {args.results.name}",
                             counts=RunCounts(expected=len(scores), done=len(scores), failed=0, pending=0),
                             headline=metrics))
    return 0


CLI = MediqCli("mediq")
