"""Pages are layout: each page script calls one controller module of the core and never the store.

Read from the scripts' syntax trees (nothing is run): every generic page in ``pages/`` and every benchmark page
``medeval_core/benchmarks/*/page_*.py``. Besides streamlit and other libraries, a page may import from
``medeval_core`` only its controller, the plain-text helpers (``medeval_core.plaintext``) and the walkthroughs'
Streamlit helpers (``medeval_core.session_controls``: open the linked walkthrough, Start, Close, Delete)."""

import ast
import importlib.util
from pathlib import Path

import pytest

from medeval_core.catalog import pages

ROOT = Path(__file__).resolve().parent.parent
PAGE_SCRIPTS = sorted([*ROOT.glob("pages/*.py"), *ROOT.glob("medeval_core/benchmarks/*/page_*.py")])
UI_HELPERS = {"medeval_core.plaintext", "medeval_core.session_controls"}


def imported_modules(script: Path) -> set[str]:
    """Every medeval_core module the script imports (``from package import module`` names the module)."""
    found = set()
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if is_module(submodule) else node.module)
    return {name for name in found if name == "medeval_core" or name.startswith("medeval_core.")}


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):  # the parent is a module, not a package
        return False


def test_every_catalogued_page_is_checked() -> None:
    assert len(PAGE_SCRIPTS) >= 12
    assert {Path(info.path if Path(info.path).is_absolute() else ROOT / info.path).resolve() for info in pages()} \
        <= {script.resolve() for script in PAGE_SCRIPTS}


@pytest.mark.parametrize("script", PAGE_SCRIPTS, ids=lambda script: script.relative_to(ROOT).as_posix())
def test_a_page_never_imports_the_store(script: Path) -> None:
    store_imports = {name for name in imported_modules(script)
                     if name == "medeval_core.store" or name.startswith("medeval_core.store.")}
    assert not store_imports, f"{script.name} imports {store_imports}: call its controller instead"


@pytest.mark.parametrize("script", PAGE_SCRIPTS, ids=lambda script: script.relative_to(ROOT).as_posix())
def test_a_page_calls_one_controller(script: Path) -> None:
    controllers = imported_modules(script) - UI_HELPERS
    assert len(controllers) == 1, f"{script.name} imports {sorted(controllers)}: one controller module only"


def test_the_check_sees_a_store_import_however_it_is_written(tmp_path: Path) -> None:
    for line in ("from medeval_core.store import model_backends", "from medeval_core import store",
                 "import medeval_core.store.model_backends", "from medeval_core.store.model_backends import X"):
        script = tmp_path / "page_probe.py"
        script.write_text(f"import streamlit as st\n{line}\n", encoding="utf-8")
        assert any(name.startswith("medeval_core.store") for name in imported_modules(script)), line
