"""``data status`` and ``data fetch``: what the data directory holds, and downloading the public releases."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, get_args, get_origin

from medeval_core.cli import CommandError, CommandGroups, print_json
from medeval_core.data import (
    DataError,
    FetchProgress,
    SourceStatus,
    data_status,
    fetch,
    fetch_options,
    fetch_options_model,
    fetch_plans,
)
from medeval_core.settings import load_settings

_SHOWN_FILES = 4


def register(groups: CommandGroups) -> None:
    parser = groups.top.add_parser(
        "data", help="find and download the data releases",
        description="Show which data sources MEDEVAL_DATA_DIR holds, and fetch the public ones.",
    )
    actions = parser.add_subparsers(dest="data_action", required=True, metavar="ACTION")

    status = actions.add_parser("status", help="report each source as found, partial or missing")
    status.add_argument("--json", action="store_true", help="print JSON instead of text")
    status.set_defaults(handler=_status)

    fetch_parser = actions.add_parser(
        "fetch", help="download a public release (needs internet)",
        description="Download a public release into its folder under the data directory, checking sizes and "
        "checksums; files already present and intact are kept, so an interrupted fetch can simply be rerun.",
    )
    plans = fetch_plans()
    fetch_parser.add_argument("name", choices=sorted(plans), help="the release to download")
    fetch_parser.add_argument("--dest", type=Path, default=None, metavar="DIR",
                              help="data directory to fill (default: MEDEVAL_DATA_DIR)")
    offered: set[str] = set()
    for name, source in plans.items():
        assert source.fetch is not None  # every source of fetch_plans() has one
        options = fetch_options_model(source.fetch)
        for field, info in (options.model_fields if options else {}).items():
            if field in offered:  # two plans with an option of the same name share its flag
                continue
            offered.add(field)
            listed = _is_list(info.annotation)
            default = ",".join(info.default) if listed else info.default
            fetch_parser.add_argument(
                f"--{field.replace('_', '-')}", dest=field, metavar=field.upper(),
                help=f"{info.description or field}" + (", comma-separated" if listed else "")
                + f", for `data fetch {name}` (default: {default})")
    fetch_parser.add_argument("--json", action="store_true", help="print the report as JSON")
    fetch_parser.set_defaults(handler=_fetch)


def _is_list(annotation: Any) -> bool:
    """Whether a fetch option holds several values (given on the command line separated by commas)."""
    return get_origin(annotation) in (tuple, list) or any(get_origin(arg) in (tuple, list)
                                                          for arg in get_args(annotation))


def _fetch_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of the chosen source's plan given on the command line, lists split at commas."""
    plan = fetch_plans()[args.name].fetch
    options = fetch_options_model(plan) if plan else None
    given = {}
    for field, info in (options.model_fields if options else {}).items():
        value = getattr(args, field, None)
        if value is not None:
            given[field] = [part.strip() for part in value.split(",") if part.strip()] if _is_list(info.annotation) \
                else value
    return given


def _describe(status: SourceStatus) -> list[str]:
    files = ", ".join(status.files[:_SHOWN_FILES])
    if len(status.files) > _SHOWN_FILES:
        files += f", ... ({len(status.files)} files)"
    lines = [f"{status.source.name:<12} {status.state:<8} {status.source.title}" + (f": {files}" if files else "")]
    if status.state != "found":
        lines.append(f"{'':<21} missing: {'; '.join(status.missing)}")
        lines.append(f"{'':<21} to get it: {status.how_to_get}")
    return lines


def _status(args: argparse.Namespace) -> int:
    data_dir = load_settings().data_dir
    statuses = data_status(data_dir)
    if args.json:
        print_json({"data_dir": str(data_dir), "sources": [s.model_dump(mode="json") for s in statuses]})
        return 0
    print(f"Data directory: {data_dir} (set MEDEVAL_DATA_DIR to change it)")
    for status in statuses:
        print("\n".join(_describe(status)))
    return 0


class _ProgressPrinter:
    """Prints one line per tenth of each file (and one when it completes), so logs stay short on big files."""

    def __init__(self) -> None:
        self._last_tenth: dict[str, int] = {}

    def __call__(self, event: FetchProgress) -> None:
        if event.stage != "downloading":
            print(f"  {event.file}: {event.stage} ({event.done_bytes:,} bytes)", file=sys.stderr)
            return
        if not event.total_bytes:
            return
        tenth = event.done_bytes * 10 // event.total_bytes
        if tenth != self._last_tenth.get(event.file) and tenth < 10:
            self._last_tenth[event.file] = tenth
            print(f"  {event.file}: {tenth * 10} % of {event.total_bytes:,} bytes", file=sys.stderr)


def _fetch(args: argparse.Namespace) -> int:
    options = _fetch_options(args)
    try:
        fetch_options(args.name, options)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    data_dir = (args.dest or load_settings().data_dir).resolve()
    print(f"Fetching {args.name} into {data_dir}", file=sys.stderr)
    try:
        report = fetch(args.name, data_dir, on_progress=_ProgressPrinter(), **options)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json(report.model_dump(mode="json"))
        return 0
    downloaded = sum(f.action == "downloaded" for f in report.files)
    print(f"{report.source}: {len(report.files)} files from {report.origin} in {report.folder} "
          f"({downloaded} downloaded, {len(report.files) - downloaded} already present)")
    for item in report.files:
        checks = " and ".join(item.checks) or "nothing published to check against"
        licence = f", licence {item.licence}" if item.licence else ""
        print(f"  {item.name}  {item.size:,} bytes  sha256 {item.sha256[:12]}  checked: {checks}{licence}")
    return 0
