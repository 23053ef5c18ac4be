"""DDXPlus batch run at the test split's size: the KB-Bayes agent alone against `run ddxplus --agent kb-bayes`
on the same patients, and the run's fixed cost before its first patient.

Default: the runner's overhead. ``--tries`` times, interleaved (agent, run, agent, run, ...), so a shared
machine's load falls on both sides alike:
1. Agent alone: the KB-Bayes agent, trained on the shared sample, questions the first N (``--ratio-patients``)
   patients of the big file through the same consultation code as batch runs (``interaction.consult`` with an
   in-memory ``OfflineContext``: turns kept in memory, no store, no scorer), in this process after a warm-up.
2. Run: ``python -m medeval_core run ddxplus --agent kb-bayes --train SAMPLE --patients BIG --limit N
   --concurrency W`` as a fresh subprocess into a fresh SQLite file (``MEDEVAL_DB_URL``); the first try's run fills
   the parse cache the later ones read. Afterwards the store is read directly: every planned patient has exactly
   one OK result, and turns 0..k+1 for its k questions (the intake, one turn per question, the differential).
   Its case phase is the first case's start to the last case's finish; its CPU from the first result to the
   last (polled from /proc every 50 ms).
Printed per side: ms per patient, wall and CPU, each try, min and median; then run / agent alone (target <=
1.3x) and each run's fixed cost. ``--baseline DIR`` runs another checkout's run after this one's in every try.

BIG is the shared sample (1,066 patients) replicated to 134,529 rows (the official test split's size) in a
temporary folder, the way bench/ddxplus_bench.py replicates it; nothing is written into the repository.

Run: MEDEVAL_DATA_DIR=../shared/data python bench/ddxplus_run_bench.py [--patients 134529]
     [--ratio-patients 10000] [--tries 3] [--workers 1] [--keep DIR]
Fixed cost alone: --fixed-cost-only [--repeat 3] starts the run, waits for its first committed result, reads
that result's ``started_at`` and the process's CPU so far, and stops the process (target <= 2 s); each try, min
and median, twice: with a cold parse cache (a fresh empty ``MEDEVAL_CACHE_DIR`` per try: both patients files
are parsed, and their parse written to the cache) and with a warm one (the cache filled by an untimed run first:
the files are hashed and their parse read back). ``--baseline DIR`` runs the same tries from another checkout
too (e.g. ``git archive REV | tar -x -C DIR``), alternating with this one's, and prints the ratio of medians.
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
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEST_SPLIT = 134_529
RATIO_TARGET = 1.3
FIXED_TARGET_S = 2.0


def write_big_file(sample: Path, folder: Path, total: int) -> Path:
    """The sample's rows repeated to ``total`` (the released layout, header once)."""
    header, *body = sample.read_text(encoding="utf-8").splitlines(keepends=True)
    path = folder / f"patients_{total}.csv"
    path.write_text(header + "".join((body * math.ceil(total / len(body)))[:total]), encoding="utf-8")
    return path


class AgentAlone:
    """The KB-Bayes agent (trained on the sample) questioning the first patients of the big file through the same
    consultation code as batch runs (``interaction.consult`` with an in-memory ``OfflineContext``: turns kept in
    memory, no store, no scorer), in this process; warmed up once."""

    def __init__(self, data_dir: Path, sample: Path, big: Path, n_patients: int) -> None:
        from medeval_core.benchmarks.ddxplus.interaction import OfflineContext, consult
        from medeval_core.benchmarks.ddxplus.kb import load_kb
        from medeval_core.benchmarks.ddxplus.kb_bayes import KBBayesAgent
        from medeval_core.benchmarks.ddxplus.patients import load_patients

        self.consult, self.context = consult, OfflineContext
        self.kb = load_kb(data_dir / "ddxplus")
        self.agent = KBBayesAgent.fit(self.kb, load_patients(sample, self.kb))
        patients = load_patients(big, self.kb)
        self.cases = [patients.patient(i) for i in range(min(n_patients, len(patients)))]
        for case in self.cases[:200]:  # warm caches (question texts, numpy dispatch)
            consult(self.agent, self.kb, case, OfflineContext(case.case_id)).output()

    def once(self) -> dict[str, float]:
        """Wall and CPU seconds per patient over every case."""
        start_cpu, start = time.process_time(), time.perf_counter()
        questions = 0
        for case in self.cases:
            questions += len(self.consult(self.agent, self.kb, case, self.context(case.case_id)).output().inquired)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        return {"wall": wall / len(self.cases), "cpu": cpu / len(self.cases), "questions": questions / len(self.cases)}


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


def run_command(sample: Path, big: Path, workers: int, limit: int | None = None) -> list[str]:
    return [sys.executable, "-m", "medeval_core", "run", "ddxplus", "--agent", "kb-bayes", "--train", str(sample),
            "--patients", str(big), "--concurrency", str(workers), *(["--limit", str(limit)] if limit else []),
            "--json"]


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


def _count_results(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05) as connection:
            return int(connection.execute("SELECT count(*) FROM case_results").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def _cpu_of(pid: int) -> float | None:
    """CPU seconds (user + system) of a running process and of the children it has waited for (the forked
    readers of the patients file), from /proc; None where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@dataclass
class Watched:
    fixed: float
    fixed_cpu: float | None
    wall: float
    cpu: float
    stdout: str
    cases_cpu: float | None = None
    """CPU from the first result to the first moment all ``expected`` results were seen (polled every 50 ms):
    the cases without the summary and the exit."""


def watch_run(command: list[str], env: dict[str, str], db: Path, checkout: Path = ROOT,
              stop_at_first: bool = False, expected: int | None = None) -> Watched:
    """Run ``command`` as a fresh subprocess into a fresh SQLite file ``db``. Figures: ``fixed`` (process start to
    the first committed case's ``started_at``), ``fixed_cpu`` (the process's CPU when that result was seen; None
    without /proc), ``wall`` and ``cpu`` of the whole process."""
    for stale in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):  # a killed run's WAL too
        stale.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start_epoch, start = time.time(), time.perf_counter()
    process = subprocess.Popen(command, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    first = fixed_cpu = None
    while first is None and process.poll() is None:
        time.sleep(0.02)
        fixed_cpu = _cpu_of(process.pid)
        first = _first_start(db)
    if first is None:
        first = _first_start(db)
    if stop_at_first and process.poll() is None:
        process.send_signal(signal.SIGKILL)
    done_cpu = None
    while expected and done_cpu is None and process.poll() is None:
        time.sleep(0.05)
        cpu_now = _cpu_of(process.pid)
        if _count_results(db) >= expected:
            done_cpu = cpu_now
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - start
    if first is None or (not stop_at_first and process.returncode != 0):
        raise SystemExit(f"run ddxplus stopped (exit {process.returncode}):\n{stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # one child at a time: the delta is this run's
    return Watched(fixed=first - start_epoch, fixed_cpu=fixed_cpu, wall=wall,
                   cpu=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), stdout=stdout,
                   cases_cpu=None if done_cpu is None or fixed_cpu is None else done_cpu - fixed_cpu)


def fixed_cost(command: list[str], env: dict[str, str], db: Path, checkout: Path = ROOT) -> tuple[float, float]:
    """Process start to the first committed case's ``started_at`` (wall, CPU); the run is killed once it is there."""
    watched = watch_run(command, env, db, checkout, stop_at_first=True)
    return watched.fixed, math.nan if watched.fixed_cpu is None else watched.fixed_cpu


def bench_fixed(data_dir: Path, sample: Path, big: Path, folder: Path, workers: int, repeat: int,
                baseline: Path | None) -> dict[str, dict[str, float]]:
    """The fixed cost of ``repeat`` tries with a cold parse cache, then with a warm one, per checkout (this one,
    and ``baseline`` when given: the tries alternate between the two, so both see the same machine)."""
    command = run_command(sample, big, workers)
    print(f"fixed cost: {' '.join(command[1:])} (fresh SQLite file each try, stopped after the first result); "
          "wall s (CPU s of the process and its forked readers when the first result was seen)")
    checkouts = {"this checkout": ROOT, **({f"baseline {baseline}": baseline} if baseline else {})}
    warm = {label: Path(tempfile.mkdtemp(prefix="warm-cache-", dir=folder)) for label in checkouts}
    fills = {label: fixed_cost(command, run_env(data_dir, folder / "fill.db", warm[label], checkout),
                               folder / "fill.db", checkout)[0] for label, checkout in checkouts.items()}
    medians: dict[str, dict[str, float]] = {label: {} for label in checkouts}
    for state in ("cold", "warm"):
        figures: dict[str, list[tuple[float, float]]] = {label: [] for label in checkouts}
        for attempt in range(repeat):
            for label, checkout in checkouts.items():
                cache = (Path(tempfile.mkdtemp(prefix="cold-cache-", dir=folder)) if state == "cold"
                         else warm[label])
                db = folder / f"fixed-{state}-{attempt}.db"
                figures[label].append(fixed_cost(command, run_env(data_dir, db, cache, checkout), db, checkout))
        for label, tries in figures.items():
            walls, cpus = [wall for wall, _ in tries], [cpu for _, cpu in tries]
            medians[label][state], medians[label][state + " cpu"] = statistics.median(walls), statistics.median(cpus)
            print(f"  {label}, {state} parse cache: " + ", ".join(f"{wall:.2f} ({cpu:.2f})" for wall, cpu in tries)
                  + f"; min {min(walls):.2f} s, median {statistics.median(walls):.2f} s wall; CPU min "
                  f"{min(cpus):.2f} s, median {statistics.median(cpus):.2f} s"
                  + (f" (after an untimed run that filled the cache: {fills[label]:.2f} s)" if state == "warm" else ""))
    if baseline:
        mine, theirs = medians["this checkout"], medians[f"baseline {baseline}"]
        for state in ("cold", "warm"):
            print(f"  {state}: baseline / this checkout, medians: {theirs[state] / mine[state]:.2f}x wall, "
                  f"{theirs[state + ' cpu'] / mine[state + ' cpu']:.2f}x CPU")
    return medians


def _spread(values: list[float], unit: float = 1000.0) -> str:
    return (", ".join(f"{value * unit:.3f}" for value in values)
            + f"; min {min(values) * unit:.3f}, median {statistics.median(values) * unit:.3f}")


def bench_ratio(data_dir: Path, sample: Path, big: Path, folder: Path, workers: int, n_patients: int,
                tries: int, baseline: Path | None) -> dict[str, float]:
    """The agent alone and the run on the same first ``n_patients`` patients of the big file, tries interleaved
    (agent, run, agent, run, ...; with ``baseline``, that checkout's run after this one's), per patient: wall and
    CPU. A run's case phase is its first case's start to its last case's finish (from the store); its CPU per
    patient is the process's CPU from the first result to the moment every result is stored (read from /proc
    every 50 ms), over the patients. Every run's store is checked. Returns this checkout's ratios."""
    alone = AgentAlone(data_dir, sample, big, n_patients)
    n_patients = len(alone.cases)
    command = run_command(sample, big, workers, limit=n_patients)
    checkouts = {"run": ROOT, **({f"baseline run ({baseline})": baseline} if baseline else {})}
    caches = {label: Path(tempfile.mkdtemp(prefix="run-cache-", dir=folder)) for label in checkouts}
    print(f"agent alone: KB-Bayes (trained on the sample), consult() with an in-memory context, no store, in this "
          f"process; run: {' '.join(command[1:])} (fresh SQLite file each try; the first fills the parse cache); "
          f"{n_patients:,} patients each, {tries} tries interleaved")
    agent_wall, agent_cpu = [], []
    walls: dict[str, list[float]] = {label: [] for label in checkouts}
    cpus: dict[str, list[float]] = {label: [] for label in checkouts}
    fixed: dict[str, list[float]] = {label: [] for label in checkouts}
    for attempt in range(tries):
        mine = alone.once()
        agent_wall.append(mine["wall"])
        agent_cpu.append(mine["cpu"])
        for label, checkout in checkouts.items():
            db = folder / f"run-{attempt}.db"
            watched = watch_run(command, run_env(data_dir, db, caches[label], checkout), db, checkout,
                                expected=n_patients)
            stamps = check_store(db, n_patients)
            walls[label].append((stamps["last_finish"] - stamps["first_start"]) / n_patients)
            if watched.cases_cpu is None:
                raise SystemExit("The run's CPU could not be read from /proc while it ran.")
            cpus[label].append(watched.cases_cpu / n_patients)
            fixed[label].append(watched.fixed)
            if attempt == 0:
                metrics = json.loads(watched.stdout)
                print(f"  {label} metrics " + "  ".join(f"{key} {value:.2f}" for key, value in metrics.items())
                      + f"; agent alone asked {mine['questions']:.2f} questions per patient")
    print(f"  agent alone, ms per patient wall: {_spread(agent_wall)}; CPU: {_spread(agent_cpu)}")
    ratios: dict[str, dict[str, float]] = {}
    for label in checkouts:
        print(f"  {label}, ms per patient wall: {_spread(walls[label])}; CPU: {_spread(cpus[label])}; fixed cost "
              "before the first patient, s: " + ", ".join(f"{value:.2f}" for value in fixed[label]))
        ratios[label] = {"wall median": statistics.median(walls[label]) / statistics.median(agent_wall),
                         "wall min": min(walls[label]) / min(agent_wall),
                         "cpu median": statistics.median(cpus[label]) / statistics.median(agent_cpu),
                         "cpu min": min(cpus[label]) / min(agent_cpu)}
        print(f"  {label} / agent alone per patient: "
              + ", ".join(f"{key} {value:.2f}x" for key, value in ratios[label].items())
              + f" (target <= {RATIO_TARGET}x)")
    return ratios["run"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--patients", type=int, default=TEST_SPLIT, help="rows of the replicated patients file")
    parser.add_argument("--ratio-patients", type=int, default=10_000,
                        help="patients questioned by the agent alone and by the run (--limit) in each try")
    parser.add_argument("--tries", type=int, default=3, help="interleaved tries of the agent alone and the run")
    parser.add_argument("--workers", type=int, default=1, help="--concurrency of the run")
    parser.add_argument("--keep", type=Path, help="write the big file and the store here (kept) instead of a "
                                                  "temporary folder")
    parser.add_argument("--fixed-cost-only", action="store_true",
                        help="measure only the fixed cost before the first patient (the run is stopped after its "
                             "first result)")
    parser.add_argument("--repeat", type=int, default=3, help="tries of --fixed-cost-only per cache state")
    parser.add_argument("--baseline", type=Path,
                        help="a checkout of another version (e.g. `git archive REV | tar -x -C /tmp/medeval-base`) "
                             "whose runs alternate with this one's")
    args = parser.parse_args()
    if not os.environ.get("MEDEVAL_DATA_DIR"):
        raise SystemExit("Set MEDEVAL_DATA_DIR to the data folder (e.g. ../shared/data).")
    from medeval_core.benchmarks.ddxplus.sources import SAMPLE_PATIENTS

    data_dir = Path(os.environ["MEDEVAL_DATA_DIR"]).resolve()
    sample = data_dir / "ddxplus" / SAMPLE_PATIENTS
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.keep.resolve() if args.keep else Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        big = write_big_file(sample, folder, args.patients)
        print(f"patients file: the sample ({sample.name}) replicated to {args.patients:,} rows, {big}")
        if args.fixed_cost_only:
            medians = bench_fixed(data_dir, sample, big, folder, args.workers, max(1, args.repeat),
                                  args.baseline.resolve() if args.baseline else None)
            ok = max(medians["this checkout"]["cold"], medians["this checkout"]["warm"]) <= FIXED_TARGET_S
        else:
            ratios = bench_ratio(data_dir, sample, big, folder, args.workers, args.ratio_patients, max(1, args.tries),
                                 args.baseline.resolve() if args.baseline else None)
            ok = ratios["wall median"] <= RATIO_TARGET
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    print("targets met" if ok else "a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
