"""medeval from the command line: batch runs, score runs, run management, data and reported-result checks.

Generic verbs live here and in the modules beside it; ``run NAME`` exists for every benchmark the registry
finds, with the options of that benchmark's ``cli`` extension (or options generated from its ``Params``). Every
run ends with the one ``RunSummary`` printer. Only light modules are imported to build the parser, so
``--help`` stays fast; a benchmark's heavy modules are imported when its command runs.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, get_args, get_origin

from medeval_core.errors import (
    BenchmarkError,
    DatabaseUnavailable,
    SettingsError,
    StoreError,
    StoreFullError,
    one_line,
)
from medeval_core.redaction import redact

# Only for annotations: pydantic, the registry (every spec) and the settings are imported by the commands that use
# them, so a command that needs none of them (``score hitk``) starts without them.
if TYPE_CHECKING:
    from pydantic import BaseModel

    from medeval_core.benchmark import RunSummary
    from medeval_core.runs.runner import Progress, ProgressCallback, RunReport
    from medeval_core.settings import Settings
    from medeval_core.store import Store

# Each core command module with the top-level commands it adds, in the order ``--help`` lists them: a command
# builds the parsers of its own module only (a benchmark's package names its commands the same way, in ``COMMANDS``).
COMMAND_MODULES = {
    "medeval_core.cli.runs": ("runs", "resume", "rescore", "worker", "cancel"),
    "medeval_core.cli.data": ("data",),
    "medeval_core.cli.annotation": ("annotators", "annotations"),
    "medeval_core.cli.serve": ("serve",),
}
# The commands whose second word names a benchmark's parser (``run ddxplus``, ``score hitk``).
BENCHMARK_GROUPS = ("run", "judge", "score")


class CommandGroups(NamedTuple):
    """Where a command module adds its parsers: top-level commands, or per-benchmark under run/judge/score.
    (A NamedTuple, not a dataclass: ``dataclasses`` imports ``inspect``, 20 ms of every command's start.)"""

    top: argparse._SubParsersAction
    run: argparse._SubParsersAction
    judge: argparse._SubParsersAction
    score: argparse._SubParsersAction


class CommandError(Exception):
    """A problem with the user's input: printed as one sentence, exit status 2."""


def print_json(payload: Any) -> None:
    json.dump(payload, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def print_summary(summary: RunSummary, report: RunReport | None = None, file: Any = None) -> None:
    """The one human-readable rendering of any benchmark's ``RunSummary``."""
    out = file or sys.stdout
    counts = summary.counts
    head = f"{report.run_id}: {report.status}; " if report is not None else ""
    print(f"{head}{summary.title or summary.benchmark}: expected {counts.expected}, done {counts.done}, "
          f"failed {counts.failed}, pending {counts.pending}", file=out)
    for metric in summary.headline:
        interval = f"  95% CI {metric.formatted_interval()}" if metric.interval else ""
        print(f"  {metric.name:<20} {metric.format(metric.value):>10}{interval}  (n={metric.n}, "
              f"{metric.denominator})", file=out)
    print_repetitions(summary, out)
    for group in summary.groups:
        figures = ", ".join(f"{m.name} {m.format(m.value)} (n={m.n})" for m in group.metrics)
        print(f"  [{group.dimension}] {group.label}: {figures}", file=out)
    if summary.reference:
        print("Reference rows:", file=out)
        for row in summary.reference:
            values = "  ".join(f"{key} {value:g}" for key, value in row.values.items())
            print(f"  {row.label:<28} {values}  ({row.source})", file=out)
    for note in summary.notes:
        print(f"note: {note}", file=out)


def print_repetitions(summary: RunSummary, file: Any = None) -> None:
    """Each headline metric's spread over the repetitions, then each repetition's metrics (nothing for one)."""
    out = file or sys.stdout
    if not summary.repetitions:
        return
    print(f"Across {len(summary.repetitions)} repetitions (mean ± SD, range):", file=out)
    for spread in summary.spread:
        print(f"  {spread.name:<20} {spread.formatted()}", file=out)
    for repetition in summary.repetitions:
        figures = ", ".join(f"{m.name} {m.format(m.value)}" for m in repetition.metrics) or "no metric"
        print(f"  repetition {repetition.repetition}: {figures} (done {repetition.counts.done})", file=out)


def exit_status(report: RunReport) -> int:
    """0, or 1 for a run that ended *failed* (every case failed), with the run's error as one line on stderr."""
    from medeval_core.context import current_store
    from medeval_core.records import RunStatus

    if report.status != RunStatus.FAILED:
        return 0
    error = current_store().get_run(report.run_id).error or "it failed"
    print(f"error: run {report.run_id} failed: {error}", file=sys.stderr)
    return 1


def _field_type(annotation: Any) -> tuple[Any, tuple[Any, ...] | None]:
    """(argparse type, choices) for a simple pydantic field annotation."""
    if get_origin(annotation) is not None and type(None) in get_args(annotation):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if str(get_origin(annotation)).endswith("Literal"):
        return str, get_args(annotation)
    if annotation in (int, float, str):
        return annotation, None
    return str, None


COMMON_RUN_OPTIONS = ("run_id", "label", "json", "concurrency", "repetitions", "skip_bad_lines")


class _RenamedOption(argparse.Action):
    """An option's old name, hidden from --help: it sets the new option and says the new name on stderr.
    (argparse's own ``deprecated=`` needs Python 3.13.)"""

    def __init__(self, option_strings: Sequence[str], dest: str, new_name: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.new_name = new_name

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"note: {option_string} is now called {self.new_name}; the old name will go.", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_old_name(parser: argparse.ArgumentParser, old: str, new: str, kind: type = int) -> None:
    """``old``, the name option ``new`` had before, kept as a hidden alias that says the new name."""
    parser.add_argument(old, type=kind, dest=new.lstrip("-").replace("-", "_"), action=_RenamedOption, new_name=new)


def add_concurrency_option(parser: argparse.ArgumentParser, description: str, default: int | None = None) -> None:
    """``--concurrency N`` (cases run at once in this process), with ``--workers``, its name before a worker
    meant a process holding leases, kept as a hidden alias."""
    parser.add_argument("--concurrency", type=int, default=default, help=description)
    add_old_name(parser, "--workers", "--concurrency")


class BenchmarkCli:
    """A benchmark's command-line options. The default builds ``run NAME`` options from the ``Params`` fields;
    a benchmark's ``cli`` module subclasses it for friendlier options or extra commands (``judge``, ``score``)."""

    # Whether the benchmark's Params are LineFileParams (a class attribute: reading the Params would import the
    # benchmark, and the parser is built without importing any).
    reads_line_files = False

    def __init__(self, name: str) -> None:
        self.name = name

    def params_model(self) -> type[BaseModel]:
        from medeval_core import registry

        return registry.benchmark(self.name).Params

    def add_run_arguments(self, parser: argparse.ArgumentParser) -> None:
        for field_name, info in self.params_model().model_fields.items():
            if field_name in COMMON_RUN_OPTIONS:
                continue
            flag = f"--{field_name.replace('_', '-')}"
            if info.annotation is bool:
                parser.add_argument(flag, action="store_true", help=info.description)
                continue
            kind, choices = _field_type(info.annotation)
            parser.add_argument(flag, type=kind, choices=choices, required=info.is_required(),
                                help=info.description)

    def run_params(self, args: argparse.Namespace, settings: Settings) -> BaseModel:
        fields = self.params_model().model_fields
        values = {name: getattr(args, name) for name in fields if getattr(args, name, None) is not None}
        return self.params_model().model_validate(values)

    def params(self, args: argparse.Namespace, settings: Settings) -> BaseModel:
        """``run_params`` with the options every benchmark's ``run`` has (``--repetitions``) applied."""
        params = self.run_params(args, settings)
        if getattr(args, "repetitions", None) is None:
            return params
        return type(params).model_validate({**params.model_dump(mode="json"), "repetitions": args.repetitions})

    def run(self, args: argparse.Namespace, settings: Settings, store: Store,
            on_progress: ProgressCallback | None) -> RunReport:
        from medeval_core.runs import service

        params = self.params(args, settings)
        if getattr(args, "skip_bad_lines", False):
            params = params.model_copy(update={"skip_bad_lines": True})
        return service.launch(self.name, params, settings, store, run_id=args.run_id,
                              label=args.label, concurrency=args.concurrency, on_progress=on_progress,
                              freeze_inputs=True)

    def json_payload(self, report: RunReport, summary: RunSummary) -> Any:
        return {"run": report.model_dump(mode="json"), "summary": summary.model_dump(mode="json")}

    def print_report(self, report: RunReport, summary: RunSummary) -> None:
        print(file=sys.stderr)
        print_summary(summary, report)

    def command_status(self, report: RunReport, summary: RunSummary) -> int:
        """The exit status of ``run NAME``: ``exit_status`` unless the benchmark has more to say."""
        return exit_status(report)

    def register(self, groups: CommandGroups) -> None:
        """Extra commands of this benchmark (``judge NAME``, ``score NAME``); none by default."""


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
    """``print_progress`` at most every ``interval_s`` seconds (and always for the last event), so a run of
    thousands of fast cases does not flood a log."""

    def __init__(self, interval_s: float | None = None) -> None:
        import time

        self._clock = time.monotonic
        self.interval_s = interval_s if interval_s is not None else (0.5 if sys.stderr.isatty() else 10.0)
        self._last = float("-inf")
        self._last_counts: tuple[int, int, int] | None = None

    def __call__(self, progress: Progress) -> None:
        now = self._clock()
        counts = (progress.done, progress.failed, progress.pending)
        if counts == self._last_counts:
            return
        if progress.pending == 0 or now - self._last >= self.interval_s:
            self._last, self._last_counts = now, counts
            print_progress(progress)


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def extension(name: str) -> BenchmarkCli:
    from medeval_core import registry

    found = registry.cli_extension(name)
    return found if isinstance(found, BenchmarkCli) else BenchmarkCli(name)


def _run_handler(name: str) -> Any:
    def handle(args: argparse.Namespace) -> int:
        from medeval_core.context import current_settings, current_store
        from medeval_core.runs import service

        cli = extension(name)
        settings, store = current_settings(), current_store()
        report = cli.run(args, settings, store, None if args.json else ThrottledProgress())
        summary = service.stored_summary(store, report.run_id) or service.summarize_run(store, report.run_id,
                                                                                         settings)
        if args.json:
            print_json(cli.json_payload(report, summary))
        else:
            cli.print_report(report, summary)
        return cli.command_status(report, summary)

    return handle


def _add_benchmark_commands(groups: CommandGroups) -> None:
    from medeval_core import registry

    for name, item in sorted(registry.specs().items()):
        _add_run_command(groups, name, item.description).register(groups)


def _add_run_command(groups: CommandGroups, name: str, description: str) -> BenchmarkCli:
    """``run NAME``; returns the benchmark's CLI extension, whose ``register`` adds its other commands."""
    parser = groups.run.add_parser(name, help=description, description=description)
    cli = extension(name)
    cli.add_run_arguments(parser)
    add_concurrency_option(parser, "cases run at once (default: the benchmark's own; a resume keeps the stored "
                                   "number)")
    parser.add_argument("--repetitions", type=_at_least_one,
                        help="times each case is run (default 1); the summary gives each repetition's metrics "
                             "and their spread")
    parser.add_argument("--run-id", help="name the run; an existing run with this id continues with its stored "
                                         "parameters (other parameters are refused)")
    parser.add_argument("--label", default="", help="free text shown in run lists")
    if cli.reads_line_files:
        parser.add_argument("--skip-bad-lines", action="store_true",
                            help="run the good lines of the input file and record the bad ones (line number "
                                 "and reason) with the run; without it a bad line refuses the file")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.set_defaults(handler=_run_handler(name))
    return cli


class CommandLineError(Exception):
    """argparse's refusal of a command line, raised instead of exiting so ``main`` can first name a mistyped option
    that argparse hid behind "the following arguments are required" (``--patinets`` for ``--patients``)."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser (and, through ``add_subparsers``, every subcommand's) whose errors reach ``main``."""

    every_command = False
    """Whether this top-level parser holds every command (``build_parser`` without a command) or only one's."""

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(self, message)


def command_named(given: Sequence[str]) -> str | None:
    """The command the words ``given`` run, as ``COMMAND_MODULES`` and a benchmark's ``COMMANDS`` name it: the first
    word (``runs`` of ``runs show X``), or a benchmark group's two (``score hitk``); None for none (``--help``, a
    group alone)."""
    words = list(itertools.takewhile(lambda word: not word.startswith("-"), given))[:2]
    if words and words[0] in BENCHMARK_GROUPS:
        return " ".join(words) if len(words) == 2 else None
    return words[0] if words else None


def _add_command(groups: CommandGroups, command: str) -> bool:
    """The parsers of the one module that adds ``command`` (``command_named``); False, with nothing added, when that
    module is not known without building every command (a mistyped command, one of a benchmark outside the
    checkout)."""
    module = next((module for module, commands in COMMAND_MODULES.items() if command in commands), None)
    if module is not None:
        importlib.import_module(module).register(groups)
        return True
    group, _, name = command.partition(" ")
    if group == "run":  # the run parser needs the benchmark's spec (its description, its Params)
        from medeval_core import registry

        if name not in registry.specs():
            return False
        _add_run_command(groups, name, registry.spec(name).description)
        return True
    from medeval_core import benchmarks

    cli = benchmarks.cli_adding(command)
    if cli is None:
        return False
    cli.register(groups)
    return True


def build_parser(command: str | None = None) -> CommandParser:
    """The parser of every command or, given one command (``command_named``), of the module that adds it only (so
    ``score hitk`` imports neither the registry nor another benchmark), where that module is known."""
    parser = CommandParser(prog="python -m medeval_core", description=(__doc__ or "").split("\n")[0])
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups = CommandGroups(
        top=top,
        run=top.add_parser("run", help="start a batch run of a benchmark").add_subparsers(
            dest="benchmark", required=True, metavar="BENCHMARK"
        ),
        judge=top.add_parser("judge", help="judge existing model responses").add_subparsers(
            dest="benchmark", required=True, metavar="BENCHMARK"
        ),
        score=top.add_parser("score", help="score a stored run again, or predictions made elsewhere").add_subparsers(
            dest="benchmark", required=True, metavar="BENCHMARK"
        ),
    )
    if command is not None and _add_command(groups, command):
        return parser
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(groups)
    _add_benchmark_commands(groups)
    parser.every_command = True
    return parser


def chosen_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command parser the parsed ``args`` went to, so an unknown option is matched against its options."""
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return chosen_command(action.choices[chosen], args)
    return parser


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of all its subcommands."""
    options = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                options |= options_of(sub)
    return options


def unknown_options_message(command: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """``unknown option --patinets; did you mean --patients?`` for each unknown option (difflib's closest)."""
    import difflib  # only a refused command line comes here

    known = [option for action in command._actions for option in action.option_strings]
    options = [given for given in unknown if given.startswith("-")]
    if not options:  # only stray values
        return f"unexpected arguments: {' '.join(unknown)}; see `{command.prog} --help`"
    parts = []
    for given in options:
        name = given.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        parts.append(f"unknown option {name}" + (f"; did you mean {close[0]}?" if close else
                                                  f"; see `{command.prog} --help`"))
    return "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_named(given))
    try:
        args, unknown = parser.parse_known_args(given)
        # Only a command that hands its unknown options on (``serve`` -> ``streamlit run``) accepts them.
        if unknown and not getattr(args, "passes_unknown_options", False):
            command = chosen_command(parser, args)
            raise CommandLineError(command, unknown_options_message(command, unknown))
    except CommandLineError as refused:
        # A mistyped option is one no command has: the whole tree is built for that, on this path only.
        known = options_of(parser if parser.every_command else build_parser())
        mistyped = [option for option in given if option.startswith("--") and option.split("=", 1)[0] not in known]
        message = refused.message if not mistyped or "unknown option" in refused.message else \
            unknown_options_message(refused.parser, mistyped)
        argparse.ArgumentParser.error(refused.parser, message)  # usage and the message on stderr, exit 2
    args.unknown_options = unknown
    try:
        return int(args.handler(args) or 0)
    except (DatabaseUnavailable, StoreFullError) as exc:  # the run stays resumable; nothing was wrong with the input
        print(f"error: {one_line(redact(str(exc)))}", file=sys.stderr)
        return 1
    except (CommandError, SettingsError, StoreError, BenchmarkError) as exc:
        print(f"error: {one_line(redact(str(exc)))}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not type(exc).__module__.startswith("sqlalchemy"):
            raise
        # A database error outside a worker's outage retries (the database went away between two commands' steps).
        from medeval_core.context import current_settings
        from medeval_core.store import redact_url

        print(f"error: the database {redact_url(current_settings().db_url)} failed: "
              f"{one_line(redact(str(getattr(exc, 'orig', None) or exc)))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: finished cases are saved; continue with `python -m medeval_core resume RUN_ID`.",
              file=sys.stderr)
        return 130
