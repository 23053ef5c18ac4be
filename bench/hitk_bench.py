"""`score hitk` on 20,100 cases against an independent plain-Python loop computing the same Hit@5/10 and Rec@5/10.

The files: 20,100 truth lines of 1-5 ICD-9 codes (numeric, V- and E-codes, dotted or not) and 20,100 prediction
lines of 10 ranked codes, half of them holding a truth code (seeded). The baseline is written apart from medeval:
``json.loads`` per line, the category rule by string slicing (3 characters, E-codes 4), sets per case.

1. In one process: ``score_files`` (the command's work: reading, checking every line, mapping, scoring, the
   report) against the loop, both reading the files, interleaved, wall time.
2. As commands: ``python -m medeval_core score hitk --json`` against ``python bench/hitk_bench.py --plain`` (the
   loop in a fresh interpreter), interleaved, wall time; the command's imports count against it.
Both sides must print the same four figures. Target: the command's median <= the loop's.

Run: .venv/bin/python bench/hitk_bench.py [--cases 20100] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KS = (5, 10)


def plain_category(code: str) -> str:
    head = code.strip().upper().split(".")[0]
    if head.startswith("E"):
        return "E" + head[1:].zfill(3)[:3]
    if head.startswith("V"):
        return "V" + head[1:].zfill(2)[:2]
    return head.zfill(3)[:3]


def plain_loop(predictions_path: Path, truth_path: Path) -> dict[str, float]:
    with truth_path.open(encoding="utf-8") as handle:
        truth = {}
        for line in handle:
            record = json.loads(line)
            truth[str(record["case_id"])] = {plain_category(code) for code in record["codes"]}
    with predictions_path.open(encoding="utf-8") as handle:
        ranked = {}
        for line in handle:
            record = json.loads(line)
            ranked[str(record["case_id"])] = [plain_category(code) for code in record["predictions"]]
    sums = {f"{kind}@{k}": 0.0 for kind in ("Hit", "Rec") for k in KS}
    for case_id, gold in truth.items():
        predicted = ranked.get(case_id, [])
        for k in KS:
            common = set(predicted[:k]) & gold
            sums[f"Hit@{k}"] += 1.0 if common else 0.0
            sums[f"Rec@{k}"] += len(common) / len(gold)
    return {name: value / len(truth) for name, value in sums.items()}


def write_files(folder: Path, cases: int) -> tuple[Path, Path]:
    rng = random.Random(0)
    categories = ([f"{i:03d}" for i in range(1, 1000)] + [f"V{i:02d}" for i in range(1, 92)]
                  + [f"E{i}" for i in range(800, 1000)])

    def code(category: str) -> str:
        return f"{category}.{rng.randint(0, 9)}" if rng.random() < 0.7 else category

    predictions, truth = folder / "predictions.jsonl", folder / "truth.jsonl"
    with predictions.open("w", encoding="utf-8") as out_predictions, truth.open("w", encoding="utf-8") as out_truth:
        for i in range(cases):
            gold = rng.sample(categories, rng.randint(1, 5))
            out_truth.write(json.dumps({"case_id": f"case-{i}", "codes": [code(c) for c in gold]}) + "\n")
            ranked = [code(c) for c in rng.sample(categories, 10)]
            if rng.random() < 0.5:
                ranked[rng.randint(0, 9)] = code(gold[0])
            out_predictions.write(json.dumps({"case_id": f"case-{i}", "predictions": ranked}) + "\n")
    return predictions, truth


def _figures(text: str) -> dict[str, float]:
    printed = json.loads(text)
    return {name: printed[name] for name in (f"{kind}@{k}" for kind in ("Hit", "Rec") for k in KS)}


def _agree(label: str, ours: dict[str, float], plain: dict[str, float]) -> None:
    worst = max(abs(ours[name] - plain[name]) for name in plain)
    if worst > 1e-12:
        raise SystemExit(f"{label}: score hitk and the plain loop disagree by {worst:g} ({ours} / {plain})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=20_100)
    parser.add_argument("--runs", type=int, default=7, help="runs of each side, interleaved")
    parser.add_argument("--plain", nargs=2, type=Path, metavar=("PREDICTIONS", "TRUTH"),
                        help="only run the plain loop on these files and print its figures (the baseline command)")
    args = parser.parse_args()
    if args.plain:
        print(json.dumps(plain_loop(*args.plain)))
        return 0

    sys.path.insert(0, str(ROOT))
    from timing import interleaved, print_comparison

    from medeval_core.benchmarks.dynamicare.scoring import score_files

    with tempfile.TemporaryDirectory() as folder:
        predictions, truth = write_files(Path(folder), args.cases)
        in_process = interleaved({"score_files": lambda: score_files(predictions, truth).metrics,
                                  "plain loop": lambda: plain_loop(predictions, truth)}, args.runs)
        _agree("in process", in_process["score_files"].result, in_process["plain loop"].result)
        ratio_in_process = print_comparison(
            f"Hit@K / Rec@K of {args.cases:,} cases in one process (reading both files included)",
            ("score_files", in_process["score_files"]), ("plain loop", in_process["plain loop"]))

        def command(*argv: str | Path) -> str:
            return subprocess.run([sys.executable, *map(str, argv)], cwd=ROOT, check=True, capture_output=True,
                                  text=True).stdout

        commands = interleaved({
            "score hitk": lambda: command("-m", "medeval_core", "score", "hitk", "--predictions", predictions,
                                          "--truth", truth, "--json"),
            "plain loop": lambda: command(Path(__file__), "--plain", predictions, truth)}, args.runs)
        _agree("commands", _figures(commands["score hitk"].result), _figures(commands["plain loop"].result))
        ratio_commands = print_comparison(
            "the same as commands (a fresh interpreter each run, imports included)",
            ("python -m medeval_core score hitk", commands["score hitk"]),
            ("python bench/hitk_bench.py --plain", commands["plain loop"]))
    print("both sides print the same Hit@5, Hit@10, Rec@5, Rec@10")
    met = ratio_in_process >= 1.0 and ratio_commands >= 1.0
    print(f"target (no slower than the loop): {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
