"""``python -m medeval_core``: the headless entry point for batch runs, scoring, data and reported-result checks.

Each area adds its own subcommands through a ``register(groups)`` function listed in ``COMMAND_MODULES``, so this
file stays a thin dispatcher. Handlers return the process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from medeval_core.benchmarks import PlanError
from medeval_core.settings import SettingsError
from medeval_core.store import StoreError

COMMAND_MODULES = (
    "medeval_core.commands.reported",
    "medeval_core.commands.runs",
    "medeval_core.commands.data",
    "medeval_core.commands.ddxplus",
    "medeval_core.commands.ddi",
)


@dataclass(frozen=True)
class CommandGroups:
    """Where a command module adds its parsers: top-level commands, or per-benchmark under run/judge/score."""

    top: argparse._SubParsersAction
    run: argparse._SubParsersAction
    judge: argparse._SubParsersAction
    score: argparse._SubParsersAction


class CommandError(Exception):
    """A problem with the user's input: printed as one sentence, exit status 2."""


def print_json(payload: Any) -> None:
    json.dump(payload, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m medeval_core", description=__doc__.split("\n")[0])
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups = CommandGroups(
        top=top,
        run=top.add_parser("run", help="start a batch run of a benchmark").add_subparsers(
            dest="benchmark", required=True, metavar="BENCHMARK"
        ),
        judge=top.add_parser("judge", help="judge existing model responses").add_subparsers(
            dest="benchmark", required=True, metavar="BENCHMARK"
        ),
        score=top.add_parser("score", help="score predictions made elsewhere").add_subparsers(
            dest="benchmark", required=True, metavar="BENCHMARK"
        ),
    )
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (CommandError, SettingsError, StoreError, PlanError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished cases are saved; continue with `python -m medeval_core resume RUN_ID`.",
              file=sys.stderr)
        return 130
