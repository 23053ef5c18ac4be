"""Benchmarks by discovery: every package under ``medeval_core/benchmarks/`` whose ``spec`` module defines ``SPEC``.

A spec is light (names, titles, where the factory lives): the CLI, the page catalogue, the sidebar's model roles
and the data status read specs, and a benchmark's heavy modules (torch, data) are imported only when it is used.
Outside packages plug in the same way through ``MEDEVAL_BENCHMARKS`` (comma-separated module names that define
``SPEC``), so an ML team adds its benchmark without editing medeval.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from medeval_core.data import DataSource
from medeval_core.errors import BenchmarkError

# Only for annotations: the interfaces import the records and the settings, which reading the specs never needs.
if TYPE_CHECKING:
    from medeval_core.benchmark import Benchmark


class PageInfo(BaseModel):
    """One page of the app. ``path`` is the page script: relative to the repository root for the core pages in
    ``pages/``, absolute for a benchmark's own ``page_*.py`` (its spec names it beside itself,
    ``Path(__file__).with_name(...)``, so a benchmark outside the checkout declares its pages the same way)."""

    path: str
    title: str
    icon: str
    section: str
    description: str
    url_path: str
    reopen_query: str | None = None
    """The query parameter that opens one of the page's stored sessions by its run id (``?walkthrough=RUN_ID``);
    the runs page links past sessions back to their page with it."""
    start_here: str | None = None
    """Set for a page a newcomer can use at once, with no model configured: what it offers, listed under the home
    page's "Start here"."""


class ModelRole(BaseModel):
    """A model role a benchmark uses (``vlm``, ``judge``, ``chat``...), shown in the sidebar."""

    name: str
    description: str
    title: str = Field(default="", description="how the sidebar and the Models page name the role (else its name)")
    offline: bool = Field(default=False, description="an offline stand-in works when no model serves the role")


class BenchmarkSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    title: str
    description: str
    factory: str = Field(description="'module:Class' of the Benchmark subclass")
    cli: str | None = Field(default=None, description="'module:object' with the benchmark's own CLI options")
    pages: tuple[PageInfo, ...] = ()
    model_roles: tuple[ModelRole, ...] = ()
    judges: tuple[str, ...] = ()
    data_sources: tuple[DataSource | str, ...] = Field(
        default=(), description="the data sources it reads: a DataSource it declares, or the name of one another "
                                "benchmark declares")


EXTRA_MODULES_ENV = "MEDEVAL_BENCHMARKS"


@cache
def _specs(extra: str) -> dict[str, BenchmarkSpec]:
    from medeval_core import benchmarks

    # A package without a spec module (shared code beside the benchmarks) is no benchmark.
    modules = [name for name in (f"{package}.spec" for package in benchmarks.packages())
               if importlib.util.find_spec(name) is not None]
    modules += [name.strip() for name in extra.split(",") if name.strip()]
    found: dict[str, BenchmarkSpec] = {}
    for module_name in modules:
        spec = getattr(importlib.import_module(module_name), "SPEC", None)
        if not isinstance(spec, BenchmarkSpec):
            continue
        if spec.name in found:
            raise BenchmarkError(f"Two benchmarks are called {spec.name!r} ({module_name} and another); rename one.")
        found[spec.name] = spec
    return found


def specs() -> dict[str, BenchmarkSpec]:
    """Every benchmark spec, by name (the packages' own plus those named in ``MEDEVAL_BENCHMARKS``)."""
    return _specs(os.environ.get(EXTRA_MODULES_ENV, ""))


def spec(name: str) -> BenchmarkSpec:
    try:
        return specs()[name]
    except KeyError:
        known = ", ".join(sorted(specs())) or "none"
        raise BenchmarkError(f"No benchmark called {name!r} is available (known: {known}).") from None


@cache
def _benchmark(factory: str) -> Benchmark[Any, Any, Any]:
    benchmark_class = pkgutil.resolve_name(factory)
    return benchmark_class()


def benchmark(name: str) -> Benchmark[Any, Any, Any]:
    """The benchmark called ``name``; its module is imported on first use."""
    return _benchmark(spec(name).factory)


def cli_extension(name: str) -> Any | None:
    target = spec(name).cli
    return pkgutil.resolve_name(target) if target else None


def pages() -> list[PageInfo]:
    return [page for item in specs().values() for page in item.pages]


def _source_name(source: DataSource | str) -> str:
    return source if isinstance(source, str) else source.name


def data_sources() -> dict[str, list[str]]:
    """Data source name -> the benchmarks that read it."""
    sources: dict[str, list[str]] = {}
    for item in specs().values():
        for source in item.data_sources:
            sources.setdefault(_source_name(source), []).append(item.name)
    return sources


def declared_sources() -> dict[str, DataSource]:
    """Every data source a spec declares, by name; two specs may declare one source only identically."""
    declared: dict[str, DataSource] = {}
    for item in specs().values():
        for source in item.data_sources:
            if isinstance(source, str):
                continue
            if declared.setdefault(source.name, source) != source:
                raise BenchmarkError(f"Two benchmarks declare the data source {source.name!r} differently; declare "
                                     f"it in one spec and name it ({source.name!r}) in the other.")
    fetched: dict[str, str] = {}
    for source in declared.values():
        if source.fetch and fetched.setdefault(source.fetch.name, source.name) != source.name:
            raise BenchmarkError(f"The data sources {fetched[source.fetch.name]!r} and {source.name!r} are both "
                                 f"fetched as `data fetch {source.fetch.name}`; give one of their FetchPlans another "
                                 "name.")
    return declared


def benchmark_sources(name: str) -> list[DataSource]:
    """The data sources the benchmark ``name`` reads; a source it names but no benchmark declares is an error."""
    declared = declared_sources()
    found = []
    for source in spec(name).data_sources:
        source_name = _source_name(source)
        if source_name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise BenchmarkError(
                f"The benchmark {name!r} reads the data source {source_name!r}, which no benchmark declares (known: "
                f"{known}); declare it in the spec's data_sources as a medeval_core.data.DataSource, or name a "
                f"known one.")
        found.append(declared[source_name])
    return found


def role_titles() -> dict[str, str]:
    """Role name -> its title, as the first spec that gives one names it."""
    titles: dict[str, str] = {}
    for item in specs().values():
        for role in item.model_roles:
            if role.title:
                titles.setdefault(role.name, role.title)
    return titles


def offline_roles() -> set[str]:
    """Roles with an offline stand-in that works when no model serves them."""
    return {role.name for item in specs().values() for role in item.model_roles if role.offline}


def model_roles() -> dict[str, list[str]]:
    """Role name -> the benchmarks that use it."""
    roles: dict[str, list[str]] = {}
    for item in specs().values():
        for role in item.model_roles:
            roles.setdefault(role.name, []).append(item.name)
    return roles
