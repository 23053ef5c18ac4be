"""The core outside ``medeval_core/benchmarks/`` names no benchmark: no import of a benchmark's package, no string
(docstrings included) naming one, no function or class named after one, and every benchmark page lives in its
benchmark's folder. So a benchmark is added or removed without editing the core, and nothing in the core has to
know which benchmarks exist. Migrations are history and keep the names they were written with."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from medeval_core import registry

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "medeval_core"
BENCHMARKS = CORE / "benchmarks"
# The upstream projects the bundled benchmarks reproduce: a core string naming one names its benchmark too.
UPSTREAM = ("skingpt", "agentclinic", "isic")


def benchmark_words() -> re.Pattern[str]:
    names = sorted({*registry.specs(), *UPSTREAM})
    return re.compile(r"(?<![a-z])(" + "|".join(map(re.escape, names)) + r")(?![a-z])", re.IGNORECASE)


def core_modules() -> list[Path]:
    return [path for path in sorted(CORE.rglob("*.py"))
            if BENCHMARKS not in path.parents and "migrations" not in path.parts]


def places_naming_a_benchmark(path: Path, words: re.Pattern[str]) -> list[str]:
    places = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [alias.name for alias in node.names]
            if isinstance(node, ast.ImportFrom) and node.module:
                modules.append(node.module)
            named = [module for module in modules if words.search(module.replace(".", " ").replace("_", " "))]
            places += [f"line {node.lineno}: imports {module}" for module in named]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (found := words.search(node.value)):
            places.append(f"line {node.lineno}: a string names {found.group(0)!r}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and words.search(
                node.name.replace("_", " ")):
            places.append(f"line {node.lineno}: defines {node.name}")
    return places


def test_the_check_finds_each_kind_of_place(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('from medeval_core.benchmarks.mediq import SPEC\n"a DDXPlus headline"\ndef sdbench_cost(): ...\n'
                      '"the addition of ddimers"\n')
    assert sorted(places_naming_a_benchmark(sample, benchmark_words())) == [
        "line 1: imports medeval_core.benchmarks.mediq", "line 2: a string names 'DDXPlus'",
        "line 3: defines sdbench_cost"]  # a word that merely contains a name ("ddimers") is not a name
    assert {"ddi", "ddxplus", "sdbench", "mediq", "dynamicare"} <= set(registry.specs())


@pytest.mark.parametrize("path", core_modules(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_a_core_module_names_no_benchmark(path: Path) -> None:
    assert places_naming_a_benchmark(path, benchmark_words()) == []


def test_benchmark_pages_live_in_their_benchmark() -> None:
    for name, spec in registry.specs().items():
        for page in spec.pages:
            page_path = Path(page.path)
            assert (BENCHMARKS / name) in page_path.resolve().parents, f"{name}'s page {page.path} is outside it"
    words = benchmark_words()
    generic_pages = sorted((ROOT / "pages").glob("*.py"))
    assert generic_pages
    assert [path.name for path in generic_pages if words.search(path.stem.replace("_", " "))
            or "walkthrough" in path.stem] == []
