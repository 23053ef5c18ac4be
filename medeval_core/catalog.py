"""The workbench's pages: the core pages (home, runs) and every page a benchmark's spec declares. ``app.py``
builds the navigation from ``pages()`` and the home page describes each entry, so a benchmark's pages appear by
adding its package, with no edit here."""

from __future__ import annotations

from medeval_core import registry
from medeval_core.registry import PageInfo

HOME = PageInfo(
    path="views/home.py", title="Home", icon=":material/home:", section="medeval", url_path="home",
    description="What medeval does, the state of the store, the data sources and the model backends.",
)

RUNS = PageInfo(
    path="views/runs.py", title="Batch runs", icon=":material/monitoring:", section="Runs", url_path="runs",
    description="Watch, resume and cancel batch runs; per-case metrics with 95% intervals; export; compare two runs "
                "on their shared cases with paired tests.",
)

CORE_PAGES: tuple[PageInfo, ...] = (HOME, RUNS)


def pages() -> list[PageInfo]:
    return [*CORE_PAGES, *registry.pages()]
