"""Start-up cost of the command line: ``python -m medeval_core --help`` as fresh subprocesses.

Every command pays for building the parser before it does anything, so ``--help`` is the floor of every command's
latency. Each repetition is a new interpreter (the same one for every side), run from the checkout it measures;
wall time and CPU time (user + system of the child) are taken per run and the median is reported. With
``--baseline DIR`` (a checkout of another version, e.g. ``git worktree add /tmp/medeval-base 6a1c789``) its runs
are interleaved with this checkout's, one after the other, so a shared machine's load falls on both sides alike,
and the ratio baseline / this checkout is printed. Target: median wall <= 0.5 s.

Run: python bench/cli_startup_bench.py [--runs 15] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 0.5


def _one(checkout: Path) -> tuple[float, float]:
    """(wall s, child CPU s) of one ``python -m medeval_core --help`` run from ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "medeval_core", "--help"], cwd=checkout, env=env,
                            capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0 or "usage:" not in result.stdout:
        raise SystemExit(f"{checkout}: --help failed ({result.returncode}): {result.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="subprocesses per side (default 15)")
    parser.add_argument("--baseline", type=Path, help="a checkout of another version, measured alongside")
    args = parser.parse_args()

    sides = {"this checkout": ROOT}
    if args.baseline is not None:
        sides[f"baseline {args.baseline}"] = args.baseline.resolve()
    for checkout in sides.values():  # warm the file cache and the .pyc files once, untimed
        _one(checkout)
    walls: dict[str, list[float]] = {name: [] for name in sides}
    cpus: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.runs):
        for name, checkout in sides.items():
            wall, cpu = _one(checkout)
            walls[name].append(wall)
            cpus[name].append(cpu)

    print(f"python -m medeval_core --help, {args.runs} fresh subprocesses per side ({sys.executable})")
    medians = {}
    for name in sides:
        medians[name] = statistics.median(walls[name])
        print(f"  {name:<40} median wall {medians[name]:.3f} s (min {min(walls[name]):.3f}), "
              f"median CPU {statistics.median(cpus[name]):.3f} s")
    mine = medians["this checkout"]
    for name in sides:
        if name != "this checkout":
            print(f"  ratio {name} / this checkout: {medians[name] / mine:.2f}x (wall), "
                  f"{statistics.median(cpus[name]) / statistics.median(cpus['this checkout']):.2f}x (CPU)")
    ok = mine <= TARGET_S
    print(f"target median wall <= {TARGET_S} s: {'met' if ok else 'MISSED'} ({mine:.3f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
