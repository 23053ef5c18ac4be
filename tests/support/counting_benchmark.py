"""A toy benchmark that plugs in through its spec alone (``MEDEVAL_BENCHMARKS=tests.support.counting_benchmark``):
N cases, each sleeping a little and scoring its own index; a ``parity`` scorer for score runs. It declares a data
source of its own (``counting/numbers.txt``, downloaded by ``data fetch counting`` from ``MEDEVAL_COUNTING_API``)
and a command of its own (``count-numbers``, which reads that source), and it names the MEDIQ source another
benchmark declares. It imports nothing from the checkout but ``medeval_core``, and names itself by ``__name__``, so
a copy under another module name outside the checkout plugs in the same way.

Run as a script it starts or resumes a run, so a test can SIGKILL the process mid-run:
    python -m tests.support.counting_benchmark DB_URL RUN_ID N_CASES SLEEP_S [WORKERS]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from medeval_core.benchmark import (
    Benchmark,
    BenchmarkError,
    CaseContext,
    Metric,
    RunParams,
    RunSummary,
    Score,
    Scorer,
    Solver,
)
from medeval_core.cli import BenchmarkCli, CommandError, CommandGroups
from medeval_core.data import (
    DataMissingError,
    DataSource,
    Fetcher,
    FetchPlan,
    Planned,
    RemoteFile,
    Requirement,
    Service,
    require,
)
from medeval_core.records import Case, CaseResult
from medeval_core.registry import BenchmarkSpec, ModelRole, PageInfo
from medeval_core.settings import Settings, load_settings

NUMBERS = "numbers.txt"
NUMBERS_SERVICE = Service(key="counting_api", env="MEDEVAL_COUNTING_API", default="http://127.0.0.1:9/counting")

NUMBERS_SOURCE = DataSource(
    name="counting", folder="counting", title="Counting numbers (toy)",
    description="One whole number a line, for the count-numbers command.", licence="CC0 (made up for tests)",
    required=(Requirement(label=NUMBERS, patterns=(NUMBERS,)),),
    fetch=FetchPlan(name="counting", plan=f"{__name__}:fetch_numbers", services=(NUMBERS_SERVICE,)),
)

SPEC = BenchmarkSpec(
    name="counting", title="Counting (toy)", description="A toy benchmark for tests: each case scores its index.",
    factory=f"{__name__}:CountingBenchmark",
    cli=f"{__name__}:CLI",
    pages=(PageInfo(path=str(Path(__file__).with_name("counting_page.py")), title="Counting",
                    icon=":material/counter_1:", section="Benchmarks", url_path="counting",
                    description="The toy benchmark's page."),),
    model_roles=(ModelRole(name="counter", description="counts (toy role)"),),
    data_sources=(NUMBERS_SOURCE, "mediq"),
)


def fetch_numbers(fetcher: Fetcher, options: None) -> Planned:
    """The data source's fetch plan: one file, its size from a HEAD request."""
    url = f"{fetcher.base_url(NUMBERS_SERVICE)}/{NUMBERS}"
    return "the counting service", [RemoteFile(name=NUMBERS, url=url, size=fetcher.head_size(url), licence="CC0")]


class CountingCli(BenchmarkCli):
    """``run counting`` keeps the options generated from the params; ``count-numbers`` is the benchmark's own."""

    def register(self, groups: CommandGroups) -> None:
        parser = groups.top.add_parser("count-numbers", help="sum the toy benchmark's numbers (its data source)")
        parser.set_defaults(handler=_count_numbers)


def _count_numbers(args: argparse.Namespace) -> int:
    try:
        path = require(NUMBERS_SOURCE, load_settings().data_dir, NUMBERS, (NUMBERS,))
    except DataMissingError as exc:
        raise CommandError(str(exc)) from exc
    numbers = [int(line) for line in path.read_text().split()]
    print(f"{len(numbers)} numbers, total {sum(numbers)}")
    return 0


CLI = CountingCli("counting")


class CountingParams(RunParams):
    n_cases: int = Field(ge=1, description="how many cases")
    sleep_s: float = Field(default=0.0, ge=0, description="seconds each case sleeps")
    fail_every: int = Field(default=0, ge=0, description="case i raises when i is a multiple of this (0: none)")
    fail_summary: bool = Field(default=False, description="the summary raises (a worker error after the cases)")


class CountingOutput(BaseModel):
    echo: str
    index: int


def make_cases(n: int) -> list[Case]:
    return [Case(case_id=f"case-{i:04d}") for i in range(n)]


class _Sleeper:
    def __init__(self, sleep_s: float, fail_every: int = 0) -> None:
        self.sleep_s = sleep_s
        self.fail_every = fail_every

    def __call__(self, case: Case, ctx: CaseContext) -> CountingOutput:
        time.sleep(self.sleep_s)
        index = int(case.case_id.split("-")[1])
        if self.fail_every and index % self.fail_every == 0:
            raise RuntimeError(f"case {index} fails on purpose")
        ctx.record_turn("counter", "count", {"case": case.case_id})
        return CountingOutput(echo=case.case_id, index=index)


class _IndexScorer:
    name = "index"

    def __call__(self, case: Case, output: CountingOutput, ctx: CaseContext) -> dict[str, Score]:
        return {"index": Score(value=float(output.index)), "repetition": Score(value=float(ctx.repetition))}


class _ParityScorer:
    name = "parity"

    def __init__(self, modulus: int) -> None:
        self.modulus = modulus

    def __call__(self, case: Case, output: CountingOutput, ctx: CaseContext) -> dict[str, Score]:
        return {"even": Score(value=output.index % self.modulus == 0, provenance={"scorer": "parity"})}


class CountingBenchmark(Benchmark[CountingParams, Case, CountingOutput]):
    name = "counting"
    Params = CountingParams
    Output = CountingOutput

    def cases(self, params: CountingParams, settings: Settings) -> Sequence[Case]:
        return make_cases(params.n_cases)

    def solver(self, params: CountingParams, settings: Settings, todo: Sequence[Case]) -> Solver[Case, CountingOutput]:
        return _Sleeper(params.sleep_s, params.fail_every)

    def scorers(self, params: CountingParams, settings: Settings) -> Sequence[Scorer[Case, CountingOutput]]:
        return (_IndexScorer(),)

    def scorer(self, name: str, options: Mapping[str, Any], settings: Settings) -> Scorer[Case, CountingOutput]:
        if name != "parity":
            raise BenchmarkError(f"The counting benchmark has no scorer called {name!r}; it has parity.")
        return _ParityScorer(int(options.get("modulus", 2)))

    def summarize(self, params: CountingParams, cases: Sequence[Case],
                  results: Sequence[CaseResult]) -> RunSummary:
        if params.fail_summary:
            raise RuntimeError("the summary fails on purpose")
        counts = self.run_counts(params, cases, results)
        scored = [r for r in results if r.ok]
        headline = [Metric(name="scored", value=float(len(scored)), n=counts.expected, denominator="expected cases",
                           unit="count")]
        if scored and "even" in scored[0].metrics:
            even = sum(bool(r.metrics["even"]) for r in scored)
            headline.append(Metric(name="even", value=even / len(scored), n=len(scored), denominator="scored cases"))
        return RunSummary(benchmark=self.name, title=SPEC.title, counts=counts, headline=headline)


def main(db_url: str, run_id: str, n_cases: int, sleep_s: float, concurrency: int = 2) -> None:
    from medeval_core.runs import service
    from medeval_core.store import Store

    os.environ.setdefault("MEDEVAL_BENCHMARKS", __name__.replace("__main__", "tests.support.counting_benchmark"))
    store = Store(db_url)
    params = CountingParams(n_cases=n_cases, sleep_s=sleep_s, concurrency=concurrency)
    service.launch("counting", params, load_settings(), store, run_id=run_id)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), *(int(a) for a in sys.argv[5:6]))
