"""Run management: list, show, resume, cancel and export stored runs."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from medeval_core import jobs
from medeval_core.cli import CommandGroups, print_json
from medeval_core.compare import compare_runs
from medeval_core.context import current_settings, current_store
from medeval_core.runs import Progress


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

    resume = groups.top.add_parser("resume", help="continue a run: finished cases are skipped, failed ones retried")
    resume.add_argument("run_id")
    resume.add_argument("--workers", type=int, help="concurrent cases (default: the benchmark's own, e.g. 16 judge "
                        "requests)")
    resume.add_argument("--json", action="store_true")
    resume.set_defaults(handler=_resume)

    cancel = groups.top.add_parser("cancel", help="ask a running run to stop after its in-flight cases")
    cancel.add_argument("run_id")
    cancel.set_defaults(handler=_cancel)


def print_progress(progress: Progress) -> None:
    """One status line on stderr (so --json output on stdout stays clean), redrawn in place on a terminal."""
    eta = f"{progress.eta_s:.0f}s" if progress.eta_s is not None else "?"
    line = (f"[{progress.run_id}] done {progress.done}  failed {progress.failed}  pending {progress.pending}  "
            f"{progress.rate_per_s:.2f}/s  eta {eta}")
    if sys.stderr.isatty():
        print(f"\r{line}   ", end="", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


class ThrottledProgress:
    """``print_progress`` at most every ``interval_s`` seconds (and always for the first and last event), so a run
    of thousands of fast cases does not flood a log."""

    def __init__(self, interval_s: float | None = None) -> None:
        self.interval_s = interval_s if interval_s is not None else (0.5 if sys.stderr.isatty() else 10.0)
        self._last = float("-inf")
        self._last_counts: tuple[int, int, int] | None = None

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        counts = (progress.done, progress.failed, progress.pending)
        if counts == self._last_counts:
            return
        if progress.pending == 0 or now - self._last >= self.interval_s:
            self._last, self._last_counts = now, counts
            print_progress(progress)


def _list(args: argparse.Namespace) -> int:
    rows = current_store().list_runs(benchmark=args.benchmark)
    if args.json:
        print_json([row.model_dump(mode="json", exclude={"config"}) for row in rows])
        return 0
    if not rows:
        print("No runs stored yet.")
    for row in rows:
        print(f"{row.id}  {row.benchmark:<10} {row.status:<10} {row.created_at:%Y-%m-%d %H:%M}  {row.label}")
    return 0


def _show(args: argparse.Namespace) -> int:
    overview = jobs.run_overview(current_store(), args.run_id)
    if args.json:
        print_json(overview.model_dump(mode="json"))
        return 0
    print(f"{overview.id}: {overview.benchmark}, {overview.status}; expected {overview.expected_cases}, "
          f"done {overview.done}, failed {overview.failed}, pending {overview.pending}")
    print_json(overview.summary)
    return 0


def _compare(args: argparse.Namespace) -> int:
    store = current_store()
    comparison = compare_runs(args.run_a, store.results(args.run_a), args.run_b, store.results(args.run_b))
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
    path = jobs.export_results(current_store(), args.run_id, args.out)
    print(f"wrote {path}")
    return 0


def _resume(args: argparse.Namespace) -> int:
    report = jobs.resume(args.run_id, current_settings(), current_store(), workers=args.workers,
                         on_progress=None if args.json else ThrottledProgress())
    if args.json:
        print_json(report.model_dump(mode="json"))
    else:
        print(f"\n{report.run_id}: {report.status}; done {report.done}, failed {report.failed}, pending {report.pending}")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    current_store().request_cancel(args.run_id)
    print(f"Cancellation requested for {args.run_id}; it stops after the cases in flight.")
    return 0
