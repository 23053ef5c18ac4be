"""Run management: list, show, resume, cancel and export stored runs.

Light at import (the store, the runner and the service are imported inside the handlers), so building the
parser for ``--help`` does not import SQLAlchemy.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from medeval_core.cli import (
    CommandError,
    CommandGroups,
    ThrottledProgress,
    add_concurrency_option,
    exit_status,
    print_json,
    print_summary,
)
from medeval_core.cli.reports import add_report_command
from medeval_core.data.files import json_value

if TYPE_CHECKING:
    from collections.abc import Callable

    from medeval_core.settings import Settings
    from medeval_core.store import Store


def current_store() -> Store:
    from medeval_core.context import current_store as store

    return store()


def current_settings() -> Settings:
    from medeval_core.context import current_settings as settings

    return settings()


def register(groups: CommandGroups) -> None:
    runs = groups.top.add_parser("runs", help="list and inspect stored runs").add_subparsers(
        dest="runs_command", required=True, metavar="ACTION"
    )
    listing = runs.add_parser("list", help="list runs, newest first")
    listing.add_argument("--benchmark")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)

    show = runs.add_parser("show", help="status, counts and summary of one run")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_show)

    compare = runs.add_parser("compare", help="compare two runs on their shared cases (McNemar / paired bootstrap)")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--json", action="store_true")
    compare.set_defaults(handler=_compare)

    export = runs.add_parser("export", help="write a run's case results to .csv or .jsonl")
    export.add_argument("run_id")
    export.add_argument("--out", type=Path, required=True)
    export.set_defaults(handler=_export)
    add_report_command(runs)

    close = runs.add_parser("close", help="close an open interactive session (it stays listed as closed)")
    close.add_argument("run_id")
    close.set_defaults(handler=_close_session)
    delete = runs.add_parser("delete", help="delete an interactive session and all it recorded")
    delete.add_argument("run_id")
    delete.set_defaults(handler=_delete_session)

    resume = groups.top.add_parser("resume", help="continue a run: finished cases are skipped, failed ones retried")
    resume.add_argument("run_id")
    add_concurrency_option(resume, "cases run at once (default: the benchmark's own, e.g. 16 judge requests)")
    resume.add_argument("--json", action="store_true")
    resume.set_defaults(handler=_resume)

    rescore = groups.top.add_parser(
        "rescore", help="apply a scorer to a stored run's outputs, as a score run of its own (a judge, re-costing, "
                        "a second judge beside the first)")
    rescore.add_argument("source_run_id", help="the run whose outputs are scored")
    rescore.add_argument("--scorer", required=True, help="the name of one of the benchmark's scorers")
    rescore.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                         help="a scorer option (VALUE is read as JSON when it parses, else as text); repeatable")
    add_concurrency_option(rescore, "cases scored at once", default=1)
    rescore.add_argument("--run-id", help="name the score run; an existing score run with this id continues")
    rescore.add_argument("--label", default="")
    rescore.add_argument("--json", action="store_true")
    rescore.set_defaults(handler=_rescore)

    worker = groups.top.add_parser(
        "worker", help="execute a stored run's remaining cases, holding case leases (start several, on one host or "
                       "many pointed at one database, to share a run)")
    worker.add_argument("run_id")
    add_concurrency_option(worker, "cases run at once in this process (default: the run's own)")
    worker.add_argument("--lease-seconds", type=float, default=None,
                        help="how long this worker's case claims last without a heartbeat (default 30); another "
                             "worker takes them over after that")
    worker.add_argument("--json", action="store_true")
    worker.set_defaults(handler=_resume)

    cancel = groups.top.add_parser("cancel", help="ask a running run to stop after its in-flight cases")
    cancel.add_argument("run_id")
    cancel.set_defaults(handler=_cancel)


def _list(args: argparse.Namespace) -> int:
    from medeval_core.runs.workers import run_states

    store = current_store()
    rows = store.list_runs(benchmark=args.benchmark)
    states = run_states(store, rows)  # "interrupted" where a running run's workers are gone
    if args.json:
        print_json([{**row.model_dump(mode="json", exclude={"config"}), "state": states[row.id]} for row in rows])
        return 0
    if not rows:
        print("No runs stored yet.")
    for row in rows:
        print(f"{row.id}  {row.benchmark:<10} {states[row.id]:<11} {row.created_at:%Y-%m-%d %H:%M}  {row.label}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from medeval_core.runs import service

    store = current_store()
    overview = service.run_overview(store, args.run_id)
    if args.json:
        print_json(overview.model_dump(mode="json"))
        return 0
    source = f" scoring {overview.source_run_id}" if overview.source_run_id else ""
    print(f"{overview.id}: {overview.benchmark} {overview.kind} run{source}, {overview.state}")
    if overview.state == "interrupted":
        print(f"Its workers stopped; continue with `python -m medeval_core resume {overview.id}`.")
    elif overview.eta_s is not None and overview.rate_per_s is not None:
        print(f"{overview.live_workers} worker(s), {overview.rate_per_s:.2f} cases/s, eta {overview.eta_s:.0f}s")
    summary = service.stored_summary(store, args.run_id)
    if summary is None:
        print(f"expected {overview.expected_cases}, done {overview.done}, failed {overview.failed}, "
              f"pending {overview.pending}; no summary stored yet (resume the run to finish it).")
    else:
        print_summary(summary)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from medeval_core.results.compare import run_comparison

    # An unknown run is a StoreError naming it; a session or another dataset a BenchmarkError.
    comparison = run_comparison(current_store(), args.run_a, args.run_b)
    if args.json:
        print_json(comparison.model_dump(mode="json"))
        return 0
    for label, summaries in ((args.run_a, comparison.summaries_a), (args.run_b, comparison.summaries_b)):
        print(label)
        for item in summaries:
            print(f"  {item.metric:<20} {item.value:.4f}  95% CI {item.ci_low:.4f}-{item.ci_high:.4f}  (n={item.n})")
    for pair in comparison.paired:
        test = (f"p={pair.p_value:.4g} ({pair.only_a_correct} vs {pair.only_b_correct} discordant)"
                if pair.p_value is not None else f"95% CI {pair.difference_ci_low:.4f}-{pair.difference_ci_high:.4f}")
        print(f"{pair.metric}: {pair.value_a:.4f} vs {pair.value_b:.4f} on {pair.shared_cases} shared cases, "
              f"difference {pair.difference:+.4f}, {pair.test} {test}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from medeval_core.runs import service

    path = service.export_results(current_store(), args.run_id, args.out)
    print(f"wrote {path}")
    return 0


def _resume(args: argparse.Namespace) -> int:
    from medeval_core.runs import service

    store = current_store()
    try:
        report = service.resume(args.run_id, current_settings(), store, concurrency=args.concurrency,
                                on_progress=None if args.json else ThrottledProgress(), freeze_inputs=True,
                                lease_s=getattr(args, "lease_seconds", None))
    except Exception as exc:
        service.record_worker_error(store, args.run_id, exc)  # the page shows it; the log keeps the traceback
        raise
    if args.json:
        print_json(report.model_dump(mode="json"))
    else:
        print(f"\n{report.run_id}: {report.status}; done {report.done}, failed {report.failed}, "
              f"pending {report.pending}")
    return exit_status(report)


def _option(text: str) -> tuple[str, object]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise CommandError(f"--option {text!r} is not KEY=VALUE.")
    try:
        return key, json_value(raw)
    except ValueError:
        return key, raw


def _rescore(args: argparse.Namespace) -> int:
    from medeval_core.runs import service

    settings, store = current_settings(), current_store()
    params = service.ScoreParams(scorer=args.scorer, options=dict(_option(o) for o in args.option),
                                 concurrency=max(args.concurrency, 1))
    report = service.score_run(args.source_run_id, params, settings, store, run_id=args.run_id, label=args.label,
                               on_progress=None if args.json else ThrottledProgress())
    summary = service.stored_summary(store, report.run_id)
    if args.json:
        print_json({"run": report.model_dump(mode="json"),
                    "summary": summary.model_dump(mode="json") if summary else None})
    elif summary is not None:
        print_summary(summary, report)
    return 0


def _close_session(args: argparse.Namespace) -> int:
    from medeval_core.sessions import close_session

    return _end_session(args, close_session, f"Closed {args.run_id}.")


def _delete_session(args: argparse.Namespace) -> int:
    from medeval_core.sessions import delete_session

    return _end_session(args, delete_session, f"Deleted {args.run_id} and everything it recorded.")


def _end_session(args: argparse.Namespace, end: Callable[[Store, str], object], done: str) -> int:
    """Close or delete a walkthrough; a refusal (a batch run, an unknown id) is the command's one-line error."""
    from medeval_core.sessions import SessionError

    try:
        end(current_store(), args.run_id)
    except SessionError as exc:
        raise CommandError(str(exc)) from None
    print(done)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    current_store().request_cancel(args.run_id)
    print(f"Cancellation requested for {args.run_id}; it stops after the cases in flight.")
    return 0
