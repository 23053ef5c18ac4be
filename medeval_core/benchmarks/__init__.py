"""One package per benchmark. Each package's ``spec`` module holds one light ``SPEC`` (name, title, factory path, CLI
extension, pages, model roles, judges, data sources); ``medeval_core.registry`` discovers them, so adding a
benchmark edits no core file.

A package's ``__init__`` imports nothing: it names the package's command-line extension (``CLI``, the spec's
``cli``) and the commands that extension adds besides ``run NAME`` (``COMMANDS``: ``"score hitk"``,
``"import-records"``). The command line reads those two to run one such command without building any spec
(pydantic and the data sources would be a third of a second of its start); and since importing any module of a
package runs its ``__init__``, a spec there would be built by every one of them."""

from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Any


def packages() -> list[str]:
    """The module name of every benchmark package here (a folder with an ``__init__.py``), by name; found on disk,
    none is imported. (``pkgutil.iter_modules`` would import ``inspect``, 10 ms of every command's start.)"""
    return sorted(f"{__name__}.{entry.name}" for folder in __path__ for entry in os.scandir(folder)
                  if os.path.isfile(os.path.join(entry.path, "__init__.py")))


def cli_adding(command: str) -> Any | None:
    """The CLI extension whose package declares ``command`` (``"score hitk"``) in its ``COMMANDS``, or None when no
    package here does (a command of the core or of a benchmark outside the checkout)."""
    for name in packages():
        package = importlib.import_module(name)
        if command in getattr(package, "COMMANDS", ()):
            return pkgutil.resolve_name(package.CLI)
    return None
