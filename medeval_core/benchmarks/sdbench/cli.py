"""``run sdbench`` options, and the SDBench commands ``cases import`` and ``recost``. Light at import: the
benchmark's modules are imported inside the handlers, so ``python -m medeval_core --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from medeval_core.cli import BenchmarkCli, CommandError, CommandGroups, print_json
from medeval_core.data.files import json_value

if TYPE_CHECKING:
    from pydantic import BaseModel

    from medeval_core.settings import Settings


def _json_object(text: str, flag: str) -> dict[str, Any]:
    try:
        value = json_value(text)
    except ValueError as exc:
        raise CommandError(f"{flag} must be a JSON object, e.g. '{{\"temperature\": 0.2}}' ({exc}).") from None
    if not isinstance(value, dict):
        raise CommandError(f"{flag} must be a JSON object, e.g. '{{\"temperature\": 0.2}}'.")
    return value


def _existing(path: Path | None, what: str) -> str | None:
    if path is None:
        return None
    if not path.is_file():
        raise CommandError(f"{path} does not exist; give the path of {what}.")
    return str(path.resolve())


class SDBenchCli(BenchmarkCli):
    reads_line_files = True

    def add_run_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = (
            "Each case is played by the agent against the gatekeeper until it commits a diagnosis, which the judge "
            "scores 1-5 (4-5 correct); visits ($300) and tests are priced. Resume with `python -m medeval_core "
            "resume RUN_ID` or the same --run-id; re-price with `python -m medeval_core recost RUN_ID`.")
        parser.add_argument("--cases", type=Path, required=True,
                            help="SDBench case file (JSON Lines; `python -m medeval_core cases import` makes one)")
        parser.add_argument("--agent", choices=("llm", "replay"), required=True,
                            help="llm: the tag baseline on the chat role; replay: the actions of --actions")
        parser.add_argument("--actions", type=Path, help="JSON Lines of actions per case (--agent replay)")
        parser.add_argument("--gatekeeper", choices=("llm", "offline"),
                            help="default: llm when a model serves the gatekeeper role, else offline")
        parser.add_argument("--interpretation", choices=("withhold", "keep"), default="withhold",
                            help="withhold (default, the paper's rule) or keep the interpretive clauses of real "
                                 "results that name the case's diagnosis; recorded with the run")
        parser.add_argument("--judge", choices=("llm", "offline"),
                            help="default: llm when a model serves the sdbench-judge role, else offline")
        parser.add_argument("--prices", type=Path,
                            help="price table CSV of code and price (default: MEDEVAL_DATA_DIR/costing/cms_prices.csv)")
        parser.add_argument("--split", help="only the cases of this split")
        selection = parser.add_mutually_exclusive_group()
        selection.add_argument("--limit", type=int, help="only the first N selected cases")
        selection.add_argument("--case-ids", nargs="+", metavar="ID", help="only these case ids")
        parser.add_argument("--max-turns", type=int, help="question and test turns allowed before the diagnosis")
        parser.add_argument("--max-cost", type=float, help="budget in dollars before the diagnosis")
        parser.add_argument("--model-args", default="{}", help="JSON object merged into each agent request")

    def run_params(self, args: argparse.Namespace, settings: Settings) -> BaseModel:
        from medeval_core.benchmarks.sdbench import AGENT_ROLE, GATEKEEPER_ROLE, JUDGE_ROLE
        from medeval_core.benchmarks.sdbench.benchmark import SDBenchParams, default_prices
        from medeval_core.models import is_served, require_served

        if args.limit is not None and args.limit < 1:
            raise CommandError("--limit must be at least 1.")
        if args.agent == "replay" and args.actions is None:
            raise CommandError("--agent replay needs --actions FILE (one JSON line of actions per case).")
        gatekeeper: Literal["llm", "offline"] = args.gatekeeper or (
            "llm" if is_served(settings.role(GATEKEEPER_ROLE)) else "offline")
        judge: Literal["llm", "offline"] = args.judge or ("llm" if is_served(settings.role(JUDGE_ROLE)) else "offline")
        require_served(settings, [role for role, used in ((AGENT_ROLE, args.agent == "llm"),
                                                          (GATEKEEPER_ROLE, gatekeeper == "llm"),
                                                          (JUDGE_ROLE, judge == "llm")) if used], error=CommandError)
        prices = _existing(args.prices, "a price table CSV") or str(default_prices(settings).resolve())
        return SDBenchParams(
            cases=_existing(args.cases, "an SDBench case file") or "", agent=args.agent,
            actions=_existing(args.actions, "an actions JSON Lines file"), gatekeeper=gatekeeper,
            interpretation=args.interpretation, judge=judge,
            prices=prices, split=args.split, limit=args.limit, case_ids=args.case_ids, max_turns=args.max_turns,
            max_cost=args.max_cost, model_args=_json_object(args.model_args, "--model-args"),
            repetitions=args.repetitions or 1, **({"concurrency": args.concurrency} if args.concurrency else {}))

    def register(self, groups: CommandGroups) -> None:
        register(groups)


def register(groups: CommandGroups) -> None:
    """``cases import`` and ``recost`` (registered by ``SDBenchCli.register``)."""
    cases = groups.top.add_parser("cases", help="convert case files into the SDBench case format").add_subparsers(
        dest="cases_command", required=True, metavar="ACTION")
    importer = cases.add_parser(
        "import", help="write an SDBench case file (JSON Lines) from AgentClinic rows or your own cases",
        description="AgentClinic rows that cannot be converted are skipped and counted with their line numbers; "
                    "a bad line of a jsonl file refuses the file (one line naming the line and what is wrong) "
                    "unless --skip-bad-lines. The output is written only when the import is complete (never "
                    "half-written).")
    importer.add_argument("format", choices=("agentclinic", "jsonl"),
                          help="agentclinic: AgentClinic MedQA / MedQA-extended rows; jsonl: cases already in the "
                               "SDBench format (checked line by line)")
    importer.add_argument("file", type=Path)
    importer.add_argument("--out", type=Path, required=True, help="the case file to write")
    importer.add_argument("--split", default="test", help="split of the imported AgentClinic cases")
    importer.add_argument("--json", action="store_true", help="print the import report as JSON")
    importer.add_argument("--skip-bad-lines", action="store_true",
                          help="jsonl: write the good lines and list the bad ones instead of refusing the file")
    importer.set_defaults(handler=_import)

    recost = groups.top.add_parser(
        "recost", help="re-price a finished SDBench run without rerunning it",
        description="Prices every ordered test of the run again (as a score run of its own) and reports how many "
                    "were priced by code and how many estimated. Prices already found are reused from the store.")
    recost.add_argument("run_id")
    recost.add_argument("--prices", type=Path, help="price table CSV of code and price (default: the data "
                                                    "folder's costing/cms_prices.csv)")
    recost.add_argument("--json", action="store_true")
    recost.set_defaults(handler=_recost)


def _import(args: argparse.Namespace) -> int:
    from medeval_core.benchmarks.sdbench.cases import CaseFileError, import_agentclinic, read_case_rows, write_cases

    if not args.file.is_file():
        raise CommandError(f"{args.file} does not exist; give the path of the file to import.")
    if args.out.resolve() == args.file.resolve():
        raise CommandError("--out is the input file; write the cases to another file.")
    try:
        report = import_agentclinic(args.file, args.split) if args.format == "agentclinic" else \
            read_case_rows(args.file, args.skip_bad_lines)
    except CaseFileError as exc:
        raise CommandError(str(exc)) from None
    if not report.cases:
        raise CommandError(f"{args.file} has no usable rows ({report.summary()}); nothing was written.")
    write_cases(report.cases, args.out)
    if args.json:
        print_json({"out": str(args.out), "kept": len(report.cases),
                    "skipped": [item.model_dump() for item in report.skipped]})
        return 0
    print(f"{args.out}: {report.summary()}.")
    for item in report.skipped:
        print(f"skipped line {item.line}: {item.reason}", file=sys.stderr)
    return 0


def _recost(args: argparse.Namespace) -> int:
    from medeval_core.benchmarks.sdbench.benchmark import COST_SCORER
    from medeval_core.context import current_settings, current_store
    from medeval_core.records import RunConfig, RunKind
    from medeval_core.runs import service

    settings, store = current_settings(), current_store()
    config = RunConfig.model_validate(store.get_run(args.run_id).config)
    if config.benchmark != "sdbench" or config.kind == RunKind.SCORE:
        raise CommandError(f"Run {args.run_id} is not an SDBench run; give the id of an SDBench batch run or "
                           "walkthrough.")
    prices = _existing(args.prices, "a price table CSV") or config.params.get("prices")
    report = service.score_run(args.run_id, service.ScoreParams(scorer=COST_SCORER, options={"prices": prices}),
                               settings, store)
    results = [r for r in store.results(report.run_id) if r.ok]
    by_code = sum(int(r.metrics.get("tests_priced_by_code") or 0) for r in results)
    estimated = sum(int(r.metrics.get("tests_estimated") or 0) for r in results)
    costs = [float(r.metrics["cost"]) for r in results if not r.output.get("incomplete")]
    payload = {"run_id": report.run_id, "source_run_id": args.run_id, "prices": prices, "cases": len(results),
               "failed": report.failed, "tests": by_code + estimated, "priced_by_code": by_code,
               "estimated": estimated, "mean_cost_per_case": sum(costs) / len(costs) if costs else None,
               "total_cost": sum(costs)}
    if args.json:
        print_json(payload)
        return 0
    total = by_code + estimated
    share = (lambda n: f"{100 * n / total:5.1f}%") if total else (lambda n: "  n/a")
    print(f"Re-costed run {args.run_id} as {report.run_id} with {prices}")
    print(f"  Cases costed:       {len(results)}" + (f" ({report.failed} failed)" if report.failed else ""))
    print(f"  Total tests costed: {total}")
    print(f"  Priced by code:     {by_code:>5}  ({share(by_code)})")
    print(f"  Estimated:          {estimated:>5}  ({share(estimated)})")
    if costs:
        print(f"  Mean cost per case: ${sum(costs) / len(costs):,.2f}")
    return 0


CLI = SDBenchCli("sdbench")
