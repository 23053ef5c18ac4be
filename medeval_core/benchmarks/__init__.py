"""One package per benchmark. Each package's ``spec`` module holds one light ``SPEC`` (name, title, factory path, CLI
extension, pages, model roles, judges, data sources); ``medeval_core.registry`` discovers them, so adding a
benchmark edits no core file.

A package's ``__init__`` imports nothing, so that importing one of its modules (the command line imports its
``cli``) builds no spec: pydantic and the data sources cost a third of a second."""

from __future__ import annotations

import pkgutil


def packages() -> list[str]:
    """The module name of every benchmark package here, found on disk (none is imported)."""
    return [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__) if info.ispkg]
