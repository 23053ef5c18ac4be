"""A runner workload for tests: N cases, each sleeping a little and scoring its own index.

Run as a script it starts or resumes a run, so a test can SIGKILL the process mid-run:
    python -m tests.support.counting_benchmark DB_URL RUN_ID N_CASES SLEEP_S
"""

from __future__ import annotations

import sys
import time

from medeval_core.records import Case, CaseOutcome, RunConfig
from medeval_core.runs import BatchRunner
from medeval_core.store import Store


def make_cases(n: int) -> list[Case]:
    return [Case(case_id=f"case-{i:04d}") for i in range(n)]


def sleeping_scorer(sleep_s: float):
    def run_case(case: Case, repetition: int) -> CaseOutcome:
        time.sleep(sleep_s)
        index = int(case.case_id.split("-")[1])
        return CaseOutcome(output={"echo": case.case_id}, metrics={"index": index, "repetition": repetition})

    return run_case


def main(db_url: str, run_id: str, n_cases: int, sleep_s: float) -> None:
    store = Store(db_url)
    runner = BatchRunner(store, workers=2)
    cases = make_cases(n_cases)
    if store.find_run(run_id) is None:
        runner.start(RunConfig(benchmark="counting"), cases, sleeping_scorer(sleep_s), run_id=run_id)
    else:
        runner.resume(run_id, cases, sleeping_scorer(sleep_s))


def build_plan(config, settings):
    """Registry factory: lets ``resume RUN_ID`` and the runs page continue a counting run."""
    from medeval_core.benchmarks import BenchmarkPlan

    return BenchmarkPlan(
        cases=make_cases(config.params["n_cases"]),
        run_case=sleeping_scorer(config.params.get("sleep_s", 0.0)),
        summarize=lambda results: {"scored": len(results)},
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
