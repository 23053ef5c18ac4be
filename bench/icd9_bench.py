"""The first ICD-9 mapping of a process: cold (an empty MEDEVAL_CACHE_DIR) and warm (the cache the cold run left),
for a name the vocabularies hold ("Chronic kidney failure") and one only the embedding can place ("Acute
Mesenteric Ischemia": no vocabulary name holds all its words, so the sentence encoder loads). Each figure is one
fresh process timed from before its first medeval import to the mapping's return (imports included); tries are
interleaved and min and median printed.

Baseline: the mapper of 33dc2a2 (``git show``; it embedded all 17,553 ICD-9 titles at first use and cached the
vectors), first mapping cold, in the same run (``--baseline-tries``, 0 to skip; each takes a minute or more).
``--baseline-commit`` names another (its icd9.py and icd9_vocabulary.py, e.g. the mapper before a vocabulary change,
whose own installed vocabulary file must then be present too).
The vocabulary file ``make install`` writes (``python -m medeval_core.vocabularies.icd9_vocabulary``) must be present.

Run: python bench/icd9_bench.py [--tries 3] [--baseline-tries 1] [--baseline-commit 33dc2a2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE_COMMIT = "33dc2a2"
NAMES = {"vocabulary": "Chronic kidney failure", "embedding": "Acute Mesenteric Ischemia"}

# One process, one mapping; prints {"seconds", "method", "code"}. MEDEVAL_BENCH_MODULE names the mapper module.
PROBE = """
import importlib, json, sys, time
started = time.perf_counter()
module = importlib.import_module(sys.argv[1])
mapping = module.Icd9Mapper().map(sys.argv[2])
print(json.dumps({"seconds": time.perf_counter() - started, "method": mapping.method, "code": mapping.code}))
"""


def first_mapping(name: str, cache: Path, module: str = "medeval_core.vocabularies.icd9", path: Path = ROOT) -> dict:
    env = {**os.environ, "MEDEVAL_CACHE_DIR": str(cache), "PYTHONPATH": str(path)}
    # cwd is the tree itself: ``-c`` puts the working directory first on sys.path.
    done = subprocess.run([sys.executable, "-c", PROBE, module, name], cwd=path, env=env, capture_output=True,
                          text=True, check=True, timeout=900)
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_package(directory: Path, commit: str) -> Path:
    """A copy of medeval_core with the mapper's modules as they were at ``commit`` (those it had)."""
    package = directory / "medeval_core"
    shutil.copytree(ROOT / "medeval_core", package, ignore=shutil.ignore_patterns("__pycache__"))
    for module in ("icd9.py", "icd9_vocabulary.py"):
        old = subprocess.run(["git", "show", f"{commit}:medeval_core/{module}"], cwd=ROOT, capture_output=True,
                             text=True)
        if old.returncode == 0:
            (package / module).write_text(old.stdout, encoding="utf-8")
    return directory


def summary(values: list[float]) -> str:
    return f"min {min(values):7.2f} s  median {statistics.median(values):7.2f} s  (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--baseline-tries", type=int, default=1)
    parser.add_argument("--baseline-commit", default=BASELINE_COMMIT)
    args = parser.parse_args()
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="icd9-bench-") as scratch:
        old_tree = baseline_package(Path(scratch) / "baseline", args.baseline_commit) if args.baseline_tries else None
        for attempt in range(max(args.tries, args.baseline_tries)):
            if attempt < args.tries:
                for kind, name in NAMES.items():
                    cache = Path(scratch) / f"cache-{kind}-{attempt}"
                    cold = first_mapping(name, cache)
                    warm = first_mapping(name, cache)
                    times.setdefault(f"cold {kind}", []).append(cold["seconds"])
                    times.setdefault(f"warm {kind}", []).append(warm["seconds"])
                    print(f"try {attempt + 1}: {name!r} -> {cold['code']} ({cold['method']}): cold "
                          f"{cold['seconds']:.2f} s, warm {warm['seconds']:.2f} s", flush=True)
            if old_tree is not None and attempt < args.baseline_tries:
                old = first_mapping(NAMES["vocabulary"], Path(scratch) / f"cache-baseline-{attempt}", path=old_tree)
                times.setdefault("baseline cold", []).append(old["seconds"])
                print(f"try {attempt + 1}: baseline {args.baseline_commit} cold {old['seconds']:.2f} s "
                      f"-> {old['code']}", flush=True)
    print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}")
    for label, values in times.items():
        print(f"{label:<20} {summary(values)}")
    if "baseline cold" in times:
        ratio = statistics.median(times["baseline cold"]) / statistics.median(times["cold embedding"])
        print(f"baseline cold / cold embedding (medians): {ratio:.1f}x")
        like_for_like = statistics.median(times["cold vocabulary"]) / statistics.median(times["baseline cold"])
        print(f"cold vocabulary / baseline cold, the same name (medians): {like_for_like:.2f}x")
    print("goal: first mapping <= 15 s cold, <= 1 s warm (issue 20)")


if __name__ == "__main__":
    main()
