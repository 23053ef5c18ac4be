"""``python -m medeval_core runs report RUN_ID --html FILE``: a run's self-contained HTML report.

Light at import (the store and plotly are imported in the handler), so ``--help`` stays fast. Added to the
``runs`` group by ``commands.runs``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from medeval_core.cli import CommandError


def add_report_command(runs: argparse._SubParsersAction) -> None:
    report = runs.add_parser("report", help="write a run's self-contained HTML report (opens offline)")
    report.add_argument("run_id")
    report.add_argument("--html", type=Path, required=True, metavar="FILE", help="the report file to write")
    report.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    from medeval_core.context import current_store
    from medeval_core.results.reports import write_run_report

    if args.html.suffix.lower() not in (".html", ".htm"):
        raise CommandError(f"Cannot write a report to {args.html.name}: give a file name ending in .html.")
    store = current_store()
    store.get_run(args.run_id)  # an unknown run fails here with a StoreError that names it
    path = write_run_report(store, args.run_id, args.html)
    print(f"wrote {path}")
    return 0
