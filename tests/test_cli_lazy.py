"""A command builds only its own parsers (``build_parser(command)``): ``score hitk`` starts without the registry,
the other benchmarks, the runner or pydantic, while every command's help, its refusals and their exit statuses are
what the whole tree gives; and the commands each module declares (``COMMAND_MODULES``, a benchmark package's
``COMMANDS``) are exactly those it adds."""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from medeval_core import benchmarks, cli
from medeval_core.cli import BENCHMARK_GROUPS, COMMAND_MODULES, build_parser, command_named, main

REPO = Path(__file__).resolve().parent.parent


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _reach(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    for word in words:
        parser = subcommands(parser)[word]
    return parser


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and group of the tree, as the words that reach it (``()`` for the top level)."""
    yield prefix
    for name, sub in subcommands(parser).items():
        yield from command_paths(sub, (*prefix, name))


def declared(parser: argparse.ArgumentParser) -> set[str]:
    """The commands a tree holds, as ``COMMAND_MODULES`` and ``COMMANDS`` name them (``runs``, ``score hitk``)."""
    top = subcommands(parser)
    return ({name for name in top if name not in BENCHMARK_GROUPS}
            | {f"{group} {name}" for group in BENCHMARK_GROUPS for name in subcommands(top[group])})


def outcome(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``main(argv)`` for a command line that stops in the parser (help, refusal)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
        main(argv)
    return int(exited.value.code or 0), out.getvalue(), err.getvalue()


def test_score_hitk_imports_neither_the_registry_another_benchmark_nor_pydantic(tmp_path: Path) -> None:
    """Its start is most of its time: pydantic alone costs more than a tenth of a second."""
    predictions, truth = tmp_path / "p.jsonl", tmp_path / "t.jsonl"
    predictions.write_text('{"case_id": "a", "predictions": ["428.0", "401"]}\n')
    truth.write_text('{"case_id": "a", "codes": ["428.1"]}\n')
    others = [f"{package}.cli" for package in benchmarks.packages() if not package.endswith(".dynamicare")]
    unwanted = ["medeval_core.registry", "medeval_core.runs.runner", "medeval_core.store", "pydantic",
                "medeval_core.benchmark", "medeval_core.data", "medeval_core.settings", "inspect",
                *(f"{package}.spec" for package in benchmarks.packages()), *others]
    code = ("import json, sys\nfrom medeval_core.cli import main\n"
            f"status = main(['score', 'hitk', '--predictions', {str(predictions)!r}, '--truth', {str(truth)!r}, "
            "'--json'])\n"
            f"print(status, json.dumps(sorted(m for m in {unwanted!r} if m in sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    status, imported = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert (status, json.loads(imported)) == ("0", [])
    assert json.loads(done.stdout[:done.stdout.rindex("}") + 1])["Hit@5"] == 1.0


def test_each_command_is_parsed_by_its_own_module_as_by_the_whole_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Help at every level, a mistyped option, a group without its command: the same output and exit status from
    the parsers ``main`` builds for the command as from the whole tree (what ``main`` built before). Only command
    lines that stop in the parser: ``serve`` hands unknown options to Streamlit, a leaf alone may run."""
    monkeypatch.setenv("COLUMNS", "100")
    whole = build_parser()
    probes = []
    for path in command_paths(whole):
        words = list(path)
        probes.append([*words, "--help"])
        if "serve" not in words:
            probes.append([*words, "--jsno"])
        if subcommands(_reach(whole, words)):  # a group alone: its command is required
            probes.append(words)
    with_own = {" ".join(argv): outcome(argv) for argv in probes}
    monkeypatch.setattr(cli, "command_named", lambda given: None)  # every command line builds the whole tree
    with_whole = {" ".join(argv): outcome(argv) for argv in probes}
    assert with_own == with_whole
    assert with_own["score hitk --jsno"][0] == 2 and "did you mean --json?" in with_own["score hitk --jsno"][2]


@pytest.mark.parametrize(("given", "command"), [
    (["score", "hitk", "--predictions", "p"], "score hitk"), (["runs", "show", "r1"], "runs"), (["run"], None),
    (["score", "--help"], None), (["--help"], None), ([], None), (["serve", "--server.port", "1"], "serve")])
def test_the_command_is_named_by_its_leading_words(given: list[str], command: str | None) -> None:
    assert command_named(given) == command


def test_each_module_declares_the_commands_it_adds() -> None:
    whole = build_parser()
    found: set[str] = set()
    for module, commands in COMMAND_MODULES.items():
        assert declared(build_parser(commands[0])) == set(commands), module
        found |= set(commands)
    for name in benchmarks.packages():
        package = importlib.import_module(name)
        commands = getattr(package, "COMMANDS", ())
        if commands:
            assert declared(build_parser(commands[0])) == set(commands), name
            found |= set(commands)
    runs = {f"run {name}" for name in subcommands(subcommands(whole)["run"])}
    assert declared(whole) - runs == found  # every command but ``run NAME`` is declared, so it is built alone
    assert build_parser("nosuch").every_command and not build_parser("score hitk").every_command


def test_benchmark_packages_import_nothing() -> None:
    """Importing any module of a benchmark runs its package's ``__init__``: an import there would be paid by every
    command of the benchmark (a spec: pydantic and the data sources)."""
    for name in benchmarks.packages():
        path = REPO / Path(*name.split(".")) / "__init__.py"
        tree = ast.parse(path.read_text(), filename=str(path))
        assert not [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)], name
