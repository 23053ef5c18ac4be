"""DDI judge throughput against a local OpenAI-compatible server with a set latency, while the CPU is loaded.

The judge should reach at least 90 % of min(concurrency / latency, request budget per second) and never exceed
its budgets. Both are measured at the server: the throughput is the arrival rate over the steady part of the run
(from the end of the first window, which a sliding window lets through as one burst, to the end of the measured
windows), and a violation is any window of the configured length that holds more arrivals, or more estimated
tokens, than the budget.

The limiter holds a request's place from admission until one window after its response, so the budget holds
whatever the delay between admission and arrival; a loaded CPU stretches that delay, so by default one busy
process per core runs beside the judge (``--cpu-load``). The server runs in a process of its own, as a provider
does, so that it does not share the judge's interpreter lock.

To finish in a few minutes the 60 s window is scaled down (15 s by default) with the budgets scaled by the same
factor, so the request rate limit is the protocol's 3 requests per second. Three scenarios:

- budget-bound: one judging process, the protocol's concurrency (16) and the scaled budgets; latency 0.5 s, so
  the budget binds;
- shared budget: ``--processes`` judging processes (2 by default) at once on one store (a new SQLite file, or
  ``--db-url`` for PostgreSQL), each with its own judge and the protocol's concurrency: the endpoint's budget is
  shared through the store, so together they stay within it (windows over budget: 0) and still reach the bound;
- concurrency-bound: budgets loosened (60 requests per second, ten times the tokens), so concurrency / latency
  binds.

    .venv/bin/python bench/judge_throughput.py [--latency 0.5] [--window 15] [--cpu-load N] [--processes 2]
        [--db-url postgresql+psycopg://...] [--json]

Exit status 1 when a scenario is below 90 % or any budget was exceeded.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from medeval_core.benchmarks.ddi.judge import DdiJudgeItem, OpenAIDdiJudge  # noqa: E402
from medeval_core.judges.openai_judge import estimate_tokens  # noqa: E402
from medeval_core.settings import Settings, load_settings  # noqa: E402
from tests.fake_openai import FakeOpenAI, verdict_reply  # noqa: E402
from tests.judge_support import judge_all, windows_over_budget, worst_window  # noqa: E402

TARGET_RATIO = 0.9
PROTOCOL_WINDOW_S = 60.0


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """``processes`` busy processes for the duration of the block."""
    stop = multiprocessing.Event()
    workers = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def scaled(settings: Settings, window_s: float, requests: int, tokens: int) -> Settings:
    request = settings.judge_settings("ddi")
    batch = request.batch_evaluator_defaults.model_copy(
        update={"rate_window_seconds": window_s, "requests_per_minute": requests, "tokens_per_minute": tokens}
    )
    return settings.with_judge_settings("ddi", request.model_copy(update={"batch_evaluator_defaults": batch}))


def items(count: int) -> list[DdiJudgeItem]:
    rationale = "The lesion shows a pearly border with arborizing vessels and no pigment network. " * 25
    return [DdiJudgeItem(case_id=f"case-{i:04d}", reference="basal-cell-carcinoma-nodular",
                         response=f"[case-{i:04d}] {rationale}\nFinal diagnosis: nodular basal cell carcinoma.")
            for i in range(count)]


def _serve(latency_s: float, commands: Connection) -> None:
    """The fake provider in its own process (as a real one is), sending back each request's arrival time (the
    monotonic clock is the machine's, so it compares across processes) and its token estimate."""
    with FakeOpenAI(verdict_reply("nodular basal cell carcinoma", True, "same"), latency_s=latency_s) as server:
        commands.send(server.url)
        commands.recv()
        commands.send([(r.arrived_at, estimate_tokens(r.body["messages"], r.body["max_tokens"]))
                       for r in server.chat_requests()])


@contextmanager
def provider(latency_s: float) -> Iterator[tuple[str, Callable[[], list[tuple[float, int]]]]]:
    """The server's URL, and a call that returns what it received."""
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.Process(target=_serve, args=(latency_s, theirs), daemon=True)
    process.start()
    received: list[tuple[float, int]] = []

    def requests() -> list[tuple[float, int]]:
        if not received:
            ours.send("stop")
            received.extend(ours.recv())
        return received

    try:
        yield ours.recv(), requests
    finally:
        requests()
        process.join()


def _judge_share(settings: Settings, url: str, share: list[DdiJudgeItem], done: multiprocessing.Queue) -> None:
    """One judging process: its own judge (so its own limiter) on the shared store, as a second run would be."""
    judge = OpenAIDdiJudge.from_settings(settings, base_url=url, model="bench-judge", api_key="bench")
    report = judge_all(judge, share)
    done.put((len(report.verdicts), len(report.errors)))


def scenario(name: str, settings: Settings, latency_s: float, measured_windows: int, processes: int) -> dict:
    """``processes`` judging processes at once on one store, each with the judge's concurrency, sharing the
    endpoint's budget through the store."""
    batch = settings.judge_settings("ddi").batch_evaluator_defaults
    window_s = batch.rate_window_seconds
    bound = min(processes * batch.concurrency / latency_s, batch.requests_per_minute / window_s)
    # Enough cases to keep the judges busy past the measured interval.
    count = math.ceil(bound * window_s * (measured_windows + 1)) + processes * batch.concurrency
    every = items(count)
    with provider(latency_s) as (url, received):
        done: multiprocessing.Queue = multiprocessing.Queue()
        judges = [multiprocessing.Process(target=_judge_share, args=(settings, url, every[i::processes], done))
                  for i in range(processes)]
        started = time.monotonic()
        for process in judges:
            process.start()
        outcomes = [done.get() for _ in judges]
        for process in judges:
            process.join()
        elapsed = time.monotonic() - started
        requests = received()
    # Measured from the first arrival, so that the processes' start-up is not counted against the limiter.
    first = min(arrived_at for arrived_at, _ in requests)
    arrivals = [arrived_at - first for arrived_at, _ in requests]
    interval = (window_s, window_s * (1 + measured_windows))
    in_interval = sum(interval[0] <= t < interval[1] for t in arrivals)
    rate = in_interval / (interval[1] - interval[0])
    tokens = [estimate for _, estimate in requests]
    most_requests, most_tokens = worst_window(arrivals, tokens, window_s)
    over = windows_over_budget(arrivals, window_s, batch.requests_per_minute)
    violations = int(most_requests > batch.requests_per_minute) + int(most_tokens > batch.tokens_per_minute)
    return {
        "scenario": name,
        "processes": processes,
        "cases": count,
        "judged": sum(judged for judged, _ in outcomes),
        "failed": sum(failed for _, failed in outcomes),
        "concurrency": batch.concurrency,
        "latency_s": latency_s,
        "window_s": window_s,
        "request_budget": batch.requests_per_minute,
        "token_budget": batch.tokens_per_minute,
        "bound_per_s": round(bound, 3),
        "measured_per_s": round(rate, 3),
        "ratio": round(rate / bound, 3),
        "measured_interval_s": list(interval),
        "worst_window_requests": most_requests,
        "worst_window_tokens": most_tokens,
        "windows_over_budget": over,
        "budget_violations": violations,
        "elapsed_s": round(elapsed, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.5, help="server latency per request, seconds")
    parser.add_argument("--window", type=float, default=15.0, help="scaled rate window, seconds (protocol: 60)")
    parser.add_argument("--windows", type=int, default=2, help="windows measured after the first")
    parser.add_argument("--cpu-load", type=int, default=os.cpu_count() or 1,
                        help="busy processes running beside the judge (default: one per core; 0: none)")
    parser.add_argument("--processes", type=int, default=2,
                        help="judging processes at once on one store in the shared-budget scenario")
    parser.add_argument("--db-url", help="the store they share (default: a new SQLite file; a PostgreSQL URL for "
                                         "hosts sharing one database)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    folder = tempfile.mkdtemp(prefix="judge-bench-")
    settings = load_settings().model_copy(update={"db_url": args.db_url or f"sqlite:///{folder}/bench.db"})
    batch = settings.judge_settings("ddi").batch_evaluator_defaults
    factor = args.window / PROTOCOL_WINDOW_S
    requests = max(1, round(batch.requests_per_minute * factor))
    tokens = max(1, round(batch.tokens_per_minute * factor))
    # Loose enough that neither budget binds: 60 requests per second, ten times the scaled token budget.
    loose_requests, loose_tokens = max(requests, math.ceil(60 * args.window)), tokens * 10
    with cpu_load(args.cpu_load):
        budget_bound = scaled(settings, args.window, requests, tokens)
        results = [
            scenario("budget-bound", budget_bound, args.latency, args.windows, 1),
            scenario("shared budget", budget_bound, args.latency, args.windows, args.processes),
            scenario("concurrency-bound", scaled(settings, args.window, loose_requests, loose_tokens),
                     args.latency, args.windows, 1),
        ]
    shutil.rmtree(folder, ignore_errors=True)
    passed = all(r["ratio"] >= TARGET_RATIO and r["budget_violations"] == 0 and r["windows_over_budget"] == 0
                 and r["failed"] == 0 for r in results)
    if args.json:
        print(json.dumps({"scale": factor, "cpu_load": args.cpu_load, "passed": passed, "scenarios": results},
                         indent=2))
    else:
        print(f"Window scaled from {PROTOCOL_WINDOW_S:.0f} s to {args.window:g} s (x{factor:g}); budgets scaled by "
              f"the same factor: {requests} requests and {tokens:,} tokens per window (the protocol's "
              f"{batch.requests_per_minute} and {batch.tokens_per_minute:,} per minute); {args.cpu_load} busy "
              "process(es) load the CPU.")
        for r in results:
            print(f"{r['scenario']:>18} ({r['processes']} process(es) on one store): "
                  f"{r['measured_per_s']:.2f} req/s of a bound {r['bound_per_s']:.2f} "
                  f"(min(concurrency {r['concurrency']} / latency {r['latency_s']} s, {r['request_budget']} per "
                  f"{r['window_s']:g} s)) -> ratio {r['ratio']:.3f}; worst window {r['worst_window_requests']} "
                  f"requests / {r['worst_window_tokens']:,} tokens; windows over budget {r['windows_over_budget']}; "
                  f"{r['judged']}/{r['cases']} judged in {r['elapsed_s']} s")
        print("PASS" if passed else f"FAIL: need ratio >= {TARGET_RATIO}, no budget violations and no failed cases")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
