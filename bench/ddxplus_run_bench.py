"""DDXPlus batch run at the test split's size: the KB-Bayes agent alone against `run ddxplus --agent kb-bayes`
into a fresh SQLite store, per patient, and the run's fixed cost before its first patient.

1. Agent alone: the KB-Bayes agent, trained on the shared sample, questions N patients of the big file through
   the same consultation code as batch runs (``interaction.consult`` with an in-memory ``OfflineContext``: turns
   kept in memory, no store, no scorer), in this process after a warm-up. Patients/s (wall and CPU).
2. Full run: ``python -m medeval_core run ddxplus --agent kb-bayes --train SAMPLE --patients BIG --workers W``
   as a fresh subprocess into a fresh SQLite file (``MEDEVAL_DB_URL``). Afterwards the store is read directly:
   every planned patient has exactly one OK result, and turns 0..k+1 for its k questions (the intake, one turn
   per question, the differential), so ``questions + 2`` turns. Printed: total wall; the fixed cost (process
   start to the first case's ``started_at``: imports, the KB, the patients file, training the agent, the
   params, the input files' hashes); the case phase (first case started to last case finished) as patients/s;
   the ratio of the run's cost per patient to the agent's alone (target <= 2x); the tail (last case finished
   to process exit: the last commit and the summary).

BIG is the shared sample (1,066 patients) replicated to 134,529 rows (the official test split's size) in a
temporary folder, the way bench/ddxplus_bench.py replicates it; nothing is written into the repository.

Run: MEDEVAL_DATA_DIR=../shared/data python bench/ddxplus_run_bench.py [--patients 134529]
     [--agent-patients 10660] [--workers 1] [--keep DIR]
Quick check: --patients 5000 --agent-patients 2000. The closing figures are at the full 134,529.
Fixed cost alone: --fixed-cost-only [--repeat 3] starts the run, waits for its first committed result, reads
that result's ``started_at`` and stops the process (no agent-alone part, no store check); prints each try and
the best, twice: with a cold parse cache (a fresh empty ``MEDEVAL_CACHE_DIR`` per try: the patients file is
parsed, and its parse written to the cache) and with a warm one (the cache filled by an untimed run first: the
file is hashed and its parse read back). The full run's fixed cost is a cold one. ``--baseline DIR`` runs the
same tries from another checkout too, alternating with this one's (like with like on a shared machine).
"""

from __future__ import annotations

import os

# One BLAS thread: the figures must not depend on how many cores the machine lends (the run gets the same).
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEST_SPLIT = 134_529
RATIO_TARGET = 2.0
FIXED_TARGET_S = 2.0


def write_big_file(sample: Path, folder: Path, total: int) -> Path:
    """The sample's rows repeated to ``total`` (the released layout, header once)."""
    header, *body = sample.read_text(encoding="utf-8").splitlines(keepends=True)
    path = folder / f"patients_{total}.csv"
    path.write_text(header + "".join((body * math.ceil(total / len(body)))[:total]), encoding="utf-8")
    return path


def bench_agent(data_dir: Path, sample: Path, big: Path, n_patients: int) -> float:
    from medeval_core.benchmarks.ddxplus.interaction import OfflineContext, consult
    from medeval_core.benchmarks.ddxplus.kb import load_kb
    from medeval_core.benchmarks.ddxplus.kb_bayes import KBBayesAgent
    from medeval_core.benchmarks.ddxplus.patients import load_patients

    kb = load_kb(data_dir / "ddxplus")
    agent = KBBayesAgent.fit(kb, load_patients(sample, kb))
    patients = load_patients(big, kb)
    n_patients = min(n_patients, len(patients))
    cases = [patients.patient(i) for i in range(n_patients)]
    for case in cases[:200]:  # warm caches (question texts, numpy dispatch)
        consult(agent, kb, case, OfflineContext(case.case_id)).output()
    start_cpu, start = time.process_time(), time.perf_counter()
    questions = 0
    for case in cases:
        questions += len(consult(agent, kb, case, OfflineContext(case.case_id)).output().inquired)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    print(f"agent alone: KB-Bayes (trained on the sample) on {n_patients:,} patients of the big file, consult() "
          "with an in-memory context, no store")
    print(f"  {n_patients / wall:9.0f} patients/s wall ({wall * 1000 / n_patients:.3f} ms each), "
          f"{n_patients / cpu:.0f} patients/s CPU, {questions / n_patients:.2f} questions per patient")
    return n_patients / wall


def _stamp(text: str) -> float:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def check_store(db: Path, total: int) -> dict[str, float]:
    """Every planned patient has one OK result and ``questions + 2`` turns numbered 0.. in order; the run's
    timestamps."""
    with sqlite3.connect(db) as connection:
        [(run_id, status)] = connection.execute("SELECT id, status FROM runs").fetchall()
        results = connection.execute(
            "SELECT case_id, repetition, status, output, started_at, finished_at FROM case_results "
            "WHERE run_id = ?", (run_id,)).fetchall()
        turns = connection.execute(
            "SELECT case_id, count(*), min(\"index\"), max(\"index\") FROM turns WHERE run_id = ? GROUP BY case_id",
            (run_id,)).fetchall()
    problems = []
    if status != "completed":
        problems.append(f"run status {status}")
    ids = Counter(row[0] for row in results)
    if len(results) != total or len(ids) != total or ids != Counter(f"row-{i}" for i in range(total)):
        problems.append(f"{len(results):,} results for {len(ids):,} distinct cases, {total:,} planned")
    not_ok = sum(row[2] != "ok" for row in results)
    if not_ok:
        problems.append(f"{not_ok} results not OK")
    stored_turns = {case_id: (count, low, high) for case_id, count, low, high in turns}
    bad_turns = 0
    questions = 0
    for case_id, _, _, output, _, _ in results:
        asked = len(json.loads(output)["inquired"])
        questions += asked
        if stored_turns.get(case_id) != (asked + 2, 0, asked + 1):
            bad_turns += 1
    if bad_turns:
        problems.append(f"{bad_turns} cases without their questions + 2 turns")
    if problems:
        raise SystemExit("store check failed: " + "; ".join(problems))
    n_turns = sum(count for count, _, _ in stored_turns.values())
    print(f"  store check: run {status}; {len(results):,} results, one per patient, all OK; {n_turns:,} turns, "
          f"questions + 2 for every patient ({questions / total:.2f} questions per patient)")
    return {"first_start": min(_stamp(row[4]) for row in results),
            "last_finish": max(_stamp(row[5]) for row in results)}


def run_env(data_dir: Path, db: Path, cache: Path, checkout: Path = ROOT) -> dict[str, str]:
    return {**os.environ, "MEDEVAL_DB_URL": f"sqlite:///{db}", "MEDEVAL_DATA_DIR": str(data_dir),
            "MEDEVAL_CACHE_DIR": str(cache), "PYTHONPATH": str(checkout)}


def bench_run(data_dir: Path, sample: Path, big: Path, total: int, folder: Path, workers: int) -> dict[str, float]:
    db = folder / "run.db"
    db.unlink(missing_ok=True)
    env = run_env(data_dir, db, Path(tempfile.mkdtemp(prefix="cold-cache-", dir=folder)))
    command = [sys.executable, "-m", "medeval_core", "run", "ddxplus", "--agent", "kb-bayes", "--train",
               str(sample), "--patients", str(big), "--workers", str(workers), "--json"]
    print(f"full run: {' '.join(command[1:])} (fresh SQLite file, {workers} worker(s))")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start_epoch, start = time.time(), time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    end_epoch = start_epoch + wall
    if done.returncode != 0:
        raise SystemExit(f"run ddxplus failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    stamps = check_store(db, total)
    fixed = stamps["first_start"] - start_epoch
    phase = stamps["last_finish"] - stamps["first_start"]
    tail = end_epoch - stamps["last_finish"]
    metrics = json.loads(done.stdout)
    print(f"  total wall {wall:8.2f} s = fixed cost {fixed:.2f} s (process start to the first case) + case phase "
          f"{phase:.2f} s + tail {tail:.2f} s (last commit, summary, exit); CPU {cpu:.2f} s (the machine may be "
          "shared: wall above CPU is waiting for a core or the disk)")
    print(f"  case phase {total / phase:9.0f} patients/s ({phase * 1000 / total:.3f} ms each); "
          f"end to end {total / wall:.0f} patients/s")
    print("  metrics " + "  ".join(f"{key} {value:.2f}" for key, value in metrics.items()))
    return {"wall": wall, "fixed": fixed, "phase": phase, "tail": tail, "rate": total / phase}


def _first_start(db: Path) -> float | None:
    """The earliest committed result's ``started_at`` as an epoch, or None while there is none yet."""
    if not db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05) as connection:
            row = connection.execute("SELECT min(started_at) FROM case_results").fetchone()
    except sqlite3.OperationalError:  # the tables are not made yet, or a write holds the lock
        return None
    return _stamp(row[0]) if row and row[0] else None


def fixed_cost(command: list[str], env: dict[str, str], db: Path, checkout: Path = ROOT) -> float:
    """Process start to the first committed case's ``started_at``; the run is killed once it is there."""
    for stale in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):  # a killed run's WAL too
        stale.unlink(missing_ok=True)
    start_epoch = time.time()
    process = subprocess.Popen(command, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    first = None
    while first is None and process.poll() is None:
        time.sleep(0.02)
        first = _first_start(db)
    if first is None:
        first = _first_start(db)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate()
    if first is None:
        raise SystemExit(f"run ddxplus stopped (exit {process.returncode}) before a result:\n{stderr[-3000:]}")
    return first - start_epoch


def bench_fixed(data_dir: Path, sample: Path, big: Path, folder: Path, workers: int, repeat: int,
                baseline: Path | None) -> dict[str, dict[str, float]]:
    """The best fixed cost of ``repeat`` tries with a cold parse cache, then with a warm one, per checkout (this
    one, and ``baseline`` when given: the tries alternate between the two, so both see the same machine)."""
    command = [sys.executable, "-m", "medeval_core", "run", "ddxplus", "--agent", "kb-bayes", "--train",
               str(sample), "--patients", str(big), "--workers", str(workers), "--json"]
    print(f"fixed cost: {' '.join(command[1:])} (fresh SQLite file each try, stopped after the first result)")
    checkouts = {"this checkout": ROOT, **({f"baseline {baseline}": baseline} if baseline else {})}
    warm = {label: Path(tempfile.mkdtemp(prefix="warm-cache-", dir=folder)) for label in checkouts}
    fills = {label: fixed_cost(command, run_env(data_dir, folder / "fill.db", warm[label], checkout),
                               folder / "fill.db", checkout) for label, checkout in checkouts.items()}
    best: dict[str, dict[str, float]] = {label: {} for label in checkouts}
    for state in ("cold", "warm"):
        figures: dict[str, list[float]] = {label: [] for label in checkouts}
        for attempt in range(repeat):
            for label, checkout in checkouts.items():
                cache = (Path(tempfile.mkdtemp(prefix="cold-cache-", dir=folder)) if state == "cold"
                         else warm[label])
                db = folder / f"fixed-{state}-{attempt}.db"
                figures[label].append(fixed_cost(command, run_env(data_dir, db, cache, checkout), db, checkout))
        for label, tries in figures.items():
            best[label][state] = min(tries)
            print(f"  {label}, {state} parse cache: " + ", ".join(f"{figure:.2f}" for figure in tries) + " s"
                  + (f" (after an untimed run that filled the cache: {fills[label]:.2f} s)"
                     if state == "warm" else ""))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--patients", type=int, default=TEST_SPLIT, help="rows of the replicated patients file")
    parser.add_argument("--agent-patients", type=int, default=10_660, help="patients for the agent-alone part")
    parser.add_argument("--workers", type=int, default=1, help="--workers of the run")
    parser.add_argument("--keep", type=Path, help="write the big file and the store here (kept) instead of a "
                                                  "temporary folder")
    parser.add_argument("--fixed-cost-only", action="store_true",
                        help="measure only the fixed cost before the first patient (the run is stopped after its "
                             "first result)")
    parser.add_argument("--repeat", type=int, default=3, help="tries of --fixed-cost-only (the best is kept)")
    parser.add_argument("--baseline", type=Path,
                        help="with --fixed-cost-only: a checkout of another version (e.g. `git worktree add "
                             "/tmp/medeval-base REV`) whose tries alternate with this one's")
    args = parser.parse_args()
    if not os.environ.get("MEDEVAL_DATA_DIR"):
        raise SystemExit("Set MEDEVAL_DATA_DIR to the data folder (e.g. ../shared/data).")
    from medeval_core.benchmarks.ddxplus import SAMPLE_PATIENTS

    data_dir = Path(os.environ["MEDEVAL_DATA_DIR"]).resolve()
    sample = data_dir / "ddxplus" / SAMPLE_PATIENTS
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.keep.resolve() if args.keep else Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        big = write_big_file(sample, folder, args.patients)
        print(f"patients file: the sample ({sample.name}) replicated to {args.patients:,} rows, {big}")
        if args.fixed_cost_only:
            best = bench_fixed(data_dir, sample, big, folder, args.workers, max(1, args.repeat),
                               args.baseline.resolve() if args.baseline else None)
            for label, figures in best.items():
                print(f"fixed cost before the first patient, {label}, best of {max(1, args.repeat)}: cold parse "
                      f"cache {figures['cold']:.2f} s, warm {figures['warm']:.2f} s (target <= {FIXED_TARGET_S:.0f} s)")
            return 0 if max(best["this checkout"].values()) <= FIXED_TARGET_S else 1
        alone = bench_agent(data_dir, sample, big, args.agent_patients)
        run = bench_run(data_dir, sample, big, args.patients, folder, args.workers)
    ratio = alone / run["rate"]
    print(f"cost per patient, run / agent alone: {ratio:.2f}x (target <= {RATIO_TARGET:.0f}x); counting the "
          f"tail too: {alone * (run['phase'] + run['tail']) / args.patients:.2f}x")
    print(f"fixed cost before the first patient (cold parse cache): {run['fixed']:.2f} s "
          f"(target <= {FIXED_TARGET_S:.0f} s)")
    ok = ratio <= RATIO_TARGET and run["fixed"] <= FIXED_TARGET_S
    print("targets met" if ok else "a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
