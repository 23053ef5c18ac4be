"""The offline SDBench gatekeeper on the shared AgentClinic cases: how often an ordered test comes back REAL, and
how long an order takes.

What it measures:
- each of the case's own tests by its own name (the names ``cases import agentclinic`` writes);
- the synonym evaluation list (``tests/data/sdbench_order_synonyms_tuning.jsonl``; with ``--heldout`` the held-out
  third, ``..._heldout.jsonl``, which nothing else reads): every phrasing ordered on every case that has its test
  (by one of the row's ``case_names``, as a test or as a line of a panel). Right: REAL with that test's result;
  wrong test: REAL with any other result (must stay 0); the rest come back SYNTHETIC or REFUSED;
- tests the case lacks (``ABSENT``), which must come back SYNTHETIC: a REAL there is a false match;
- with ``--timing N``: the warm time per order, this gatekeeper against the one at ``--baseline`` (git), interleaved
  over N rounds on the same turns (up to three orders a turn), each round with the per-text vector memo cleared (the
  encoder and the catalogue's vectors stay loaded: warm, but no order is remembered from an earlier round).

The list was written by hand from US and UK clinical usage before the vocabulary
(``prompts/sdbench_test_vocabulary.json``) and split by a fixed rule: an order whose lower-cased text has a sha256
divisible by 3 is held out.

``--actions FILE --expect FILE`` writes a replay file for ``run sdbench --agent replay``: each case orders its tests
by the list's phrasings (held-out ones with ``--heldout``), then commits the reference diagnosis, and beside it which
test each ordered phrasing must come back as; ``--check EXPORT --expect FILE`` reads the run's results
(``runs export RUN_ID --out EXPORT.jsonl``) and prints the own-result rate and the wrong-test count.

Run: python bench/sdbench_gatekeeper_bench.py [--heldout] [--timing 5] [--actions FILE --expect FILE]
     python bench/sdbench_gatekeeper_bench.py --check EXPORT.jsonl --expect FILE
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from medeval_core.benchmarks.sdbench import catalog as catalog_module  # noqa: E402
from medeval_core.benchmarks.sdbench.cases import SDBenchCase, import_agentclinic  # noqa: E402
from medeval_core.benchmarks.sdbench.catalog import load_catalog, name_key  # noqa: E402
from medeval_core.benchmarks.sdbench.gatekeeper import (  # noqa: E402
    CATALOG_HOP_THRESHOLD,
    TEST_THRESHOLD,
    Answer,
    OfflineGatekeeper,
    _panel_components,
)

SYNONYM_FILES = {"tuning": ROOT / "tests" / "data" / "sdbench_order_synonyms_tuning.jsonl",
                 "heldout": ROOT / "tests" / "data" / "sdbench_order_synonyms_heldout.jsonl"}
ABSENT = ["Serum lipase", "Hemoglobin A1c", "TSH", "D-dimer", "Troponin", "CT head", "Lumbar spine X-ray",
          "Urine culture", "Lipid panel", "Vitamin B12", "Ferritin", "Blood alcohol level", "Renal ultrasound",
          "Colonoscopy", "Serum cortisol",
          # and tests the catalogue does not hold either (only the embedding paths could match them, wrongly)
          "Serum amyloid A", "Chromogranin A", "Plasma renin activity", "Aldosterone", "Homocysteine",
          "Ceruloplasmin", "Alpha-1 antitrypsin level", "Factor V Leiden mutation", "Anti-Jo-1 antibody",
          "Serum osmolality", "Methylmalonic acid", "Blood lead level", "Serum copper", "Carboxyhemoglobin",
          "Cold agglutinins", "Cryoglobulins", "NMDA receptor antibodies", "Anti-Ro antibodies", "Cardiac MRI",
          "SPECT brain", "Venography of the leg", "Gastric emptying study", "Capsule endoscopy", "Skin patch test"]
VAGUE = ["blood work", "all labs", "some imaging", "routine bloods", "a full workup"]
TURN_SIZE = 3


def held_out(order: str) -> bool:
    """The fixed split rule of the synonym list."""
    return int(hashlib.sha256(order.strip().lower().encode("utf-8")).hexdigest(), 16) % 3 == 0


def synonym_rows(part: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in SYNONYM_FILES[part].read_text(encoding="utf-8").splitlines() if line]
    misplaced = [row["order"] for row in rows if held_out(row["order"]) != (part == "heldout")]
    if misplaced:
        raise SystemExit(f"{SYNONYM_FILES[part]} breaks the split rule: {misplaced[:3]}")
    return rows


# Panels on a specimen other than blood: their lines ("Glucose" of a urinalysis) are not the blood test of that name.
OTHER_SPECIMEN = re.compile(r"urin|\bua\b|csf|cerebrospinal|lumbar|synovial|joint|stool|sputum|pleural|ascit", re.I)


def case_names(case: SDBenchCase) -> list[str]:
    """The case's test names and the line labels of its blood panels."""
    assert case.findings is not None
    return [*case.findings.tests, *(c.label for name, text in case.findings.tests.items()
                                    if not OTHER_SPECIMEN.search(name) for c in _panel_components(name, text))]


def right_test(answer: Answer, wanted: set[frozenset[str]]) -> bool:
    """Whether a REAL answer is the wanted test's result: the matched test, or its panel line, is one of its names."""
    parent, _, line = (answer.matched or "").partition(": ")
    return name_key(parent) in wanted or (bool(line) and name_key(line) in wanted)


def synonym_orders(cases: Sequence[SDBenchCase], rows: Sequence[dict[str, Any]]) -> list[tuple[SDBenchCase, str,
                                                                                                  set[frozenset[str]]]]:
    """(case, order, the keys of the test it must come back as) for every row and every case with that test."""
    orders = []
    for row in rows:
        wanted = {name_key(name) for name in row["case_names"]}
        orders += [(case, row["order"], wanted) for case in cases
                   if any(name_key(name) in wanted for name in case_names(case))]
    return orders


def load_average() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def evaluate(cases: Sequence[SDBenchCase], rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> None:
    catalog = load_catalog()
    own = [0, 0]
    synonym = {"right": 0, "wrong test": 0, "SYNTHETIC": 0, "REFUSED": 0}
    absent = [0, 0]
    vague = [0, 0]
    misses: list[str] = []
    by_case: dict[str, list[tuple[str, set[frozenset[str]]]]] = {}
    for case, order, wanted in synonym_orders(cases, rows):
        by_case.setdefault(case.case_id, []).append((order, wanted))
    without_encoding = sum(catalog.resolve(row["order"]) is not None for row in rows)
    for case in cases:
        assert case.findings is not None
        gatekeeper = OfflineGatekeeper(case, catalog, test_threshold=args.test_threshold,
                                       catalog_threshold=args.catalog_threshold)
        names = list(case.findings.tests)
        for answer in gatekeeper.answer("tests", names):
            own[1] += 1
            own[0] += answer.source == "REAL" and answer.matched == answer.request
        ordered = by_case.get(case.case_id, [])
        for (order, wanted), answer in zip(ordered, gatekeeper.answer("tests", [o for o, _ in ordered]),
                                           strict=True):
            if answer.source == "REAL" and right_test(answer, wanted):
                synonym["right"] += 1
                continue
            outcome = "wrong test" if answer.source == "REAL" else answer.source
            synonym[outcome] += 1
            misses.append(f"{case.case_id}: {order!r} came back {outcome} ({answer.matched!r})")
        lacking = [t for t in ABSENT if not any(name_key(t) == name_key(n) for n in names)]
        for answer in gatekeeper.answer("tests", lacking):
            absent[1] += 1
            absent[0] += answer.source == "REAL"
            if answer.source == "REAL":
                misses.append(f"{case.case_id}: absent {answer.request!r} came back REAL as {answer.matched!r}")
        for answer in gatekeeper.answer("tests", VAGUE):
            vague[1] += 1
            vague[0] += answer.source == "REFUSED"
    total = sum(synonym.values())
    print(f"cases: {len(cases)}; load average {load_average()}")
    print(f"own names:  REAL {own[0]}/{own[1]} = {100 * own[0] / own[1]:.1f}%")
    print(f"synonym list ({args.part}: {len(rows)} phrasings, {without_encoding} decided by the vocabulary without "
          f"encoding), ordered {total} times on cases with their test: right real result {synonym['right']}/{total} "
          f"= {100 * synonym['right'] / total:.1f}%; wrong test {synonym['wrong test']}; SYNTHETIC "
          f"{synonym['SYNTHETIC']}; REFUSED {synonym['REFUSED']}")
    print(f"tests the case lacks: REAL (false match) {absent[0]}/{absent[1]} = {100 * absent[0] / absent[1]:.1f}%")
    print(f"vague orders refused: {vague[0]}/{vague[1]}")
    print(f"thresholds: test {args.test_threshold}, catalogue {args.catalog_threshold}")
    for line in [] if args.quiet else misses:
        print(f"  {line}")


def baseline_modules(commit: str) -> ModuleType:
    """The gatekeeper module as it was at ``commit`` (with the catalogue module of that commit), loaded beside
    this one so both run in one process on the same turns."""
    folder = Path(tempfile.mkdtemp(prefix="sdbench_baseline_"))
    modules: dict[str, ModuleType] = {}
    for name in ("catalog", "gatekeeper"):
        source = subprocess.run(["git", "-C", str(ROOT), "show",
                                 f"{commit}:medeval_core/benchmarks/sdbench/{name}.py"],
                                check=True, capture_output=True, text=True).stdout
        source = source.replace("medeval_core.benchmarks.sdbench.catalog", "sdbench_baseline_catalog")
        # the encoder's module before the core was regrouped (issue 21)
        source = source.replace("medeval_core.embeddings import", "medeval_core.models.embeddings import")
        path = folder / f"sdbench_baseline_{name}.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"sdbench_baseline_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules[name] = module
    return modules["gatekeeper"]


def timing(cases: Sequence[SDBenchCase], rows: Sequence[dict[str, Any]], rounds: int, commit: str,
           limit: int) -> None:
    baseline = baseline_modules(commit)
    baseline_catalog = baseline.load_catalog() if hasattr(baseline, "load_catalog") else \
        sys.modules["sdbench_baseline_catalog"].load_catalog()
    catalog = load_catalog()
    turns: list[tuple[SDBenchCase, list[str]]] = []
    by_case: dict[str, list[str]] = {}
    for case, order, _ in synonym_orders(cases, rows):
        by_case.setdefault(case.case_id, []).append(order)
    for case in cases:
        orders = by_case.get(case.case_id, [])
        turns += [(case, orders[i:i + TURN_SIZE]) for i in range(0, len(orders), TURN_SIZE)]
    # every case's turns in case order, cut at about ``limit`` orders (the same turns for both gatekeepers)
    kept, total = [], 0
    for turn in turns:
        if total >= limit:
            break
        kept.append(turn)
        total += len(turn[1])
    turns = kept
    count = sum(len(orders) for _, orders in turns)
    memos = [catalog_module._vector_cache, sys.modules["sdbench_baseline_catalog"]._vector_cache]

    def run(kind: str) -> tuple[float, float]:
        """Wall and CPU ms per order: on a shared machine the wall time is the CPU time stretched by the load."""
        for memo in memos:
            memo.clear()
        gatekeepers: dict[str, Any] = {}
        start, start_cpu = time.perf_counter(), time.process_time()
        for case, orders in turns:
            if case.case_id not in gatekeepers:
                gatekeepers[case.case_id] = (OfflineGatekeeper(case, catalog) if kind == "this"
                                             else baseline.OfflineGatekeeper(case, baseline_catalog))
            gatekeepers[case.case_id].answer("tests", orders)
        return (time.perf_counter() - start) / count * 1000, (time.process_time() - start_cpu) / count * 1000

    run("this")
    run("baseline")  # both warm: encoder loaded, catalogue vectors built (baseline) or read from the cache (this)
    figures: dict[str, list[tuple[float, float]]] = {"this": [], "baseline": []}
    for number in range(rounds):
        for kind in (("this", "baseline") if number % 2 == 0 else ("baseline", "this")):
            figures[kind].append(run(kind))
    print(f"timing: {count} orders in {len(turns)} turns (up to {TURN_SIZE} a turn), {rounds} interleaved rounds, "
          f"per-text vector memo cleared each round; load average {load_average()}")
    for kind in ("this", "baseline"):
        label = "this gatekeeper" if kind == "this" else f"baseline {commit}"
        wall, cpu = ([figure[column] for figure in figures[kind]] for column in (0, 1))
        print(f"  {label}: ms per order min {min(wall):.3f}, median {statistics.median(wall):.3f} "
              f"(CPU min {min(cpu):.3f}, median {statistics.median(cpu):.3f})")
    ratio = statistics.median(f[0] for f in figures["baseline"]) / statistics.median(f[0] for f in figures["this"])
    print(f"  ratio (baseline / this, wall medians): {ratio:.1f}x")


def write_replay(cases: Sequence[SDBenchCase], rows: Sequence[dict[str, Any]], actions: Path, expect: Path) -> None:
    by_case: dict[str, list[dict[str, Any]]] = {}
    for case, order, _ in synonym_orders(cases, rows):
        row = next(r for r in rows if r["order"] == order)
        by_case.setdefault(case.case_id, []).append({"order": order, "case_names": row["case_names"]})
    with actions.open("w", encoding="utf-8") as handle, expect.open("w", encoding="utf-8") as expected:
        for case in cases:
            ordered = by_case.get(case.case_id)
            if not ordered:
                continue
            steps = [{"kind": "test", "text": item["order"]} for item in ordered]
            steps.append({"kind": "diagnosis", "text": case.final_diagnosis})
            handle.write(json.dumps({"case_id": case.case_id, "actions": steps}) + "\n")
            expected.write(json.dumps({"case_id": case.case_id, "orders": ordered}) + "\n")
    print(f"wrote {actions} and {expect} ({len(by_case)} cases)")


def check_run(export: Path, expect: Path) -> None:
    """The replayed run's test answers against what each order must come back as."""
    expected = {row["case_id"]: row["orders"] for row in map(json.loads, expect.read_text().splitlines()) if row}
    counts = {"right": 0, "wrong test": 0, "SYNTHETIC": 0, "REFUSED": 0, "not answered": 0}
    for line in export.read_text(encoding="utf-8").splitlines():
        result = json.loads(line)
        orders = expected.get(result["case_id"])
        if orders is None or result.get("status") != "ok":
            continue
        items = [item for turn in result["output.turns"] if turn["kind"] == "tests" for item in turn["items"]]
        by_request = {item["request"]: item for item in items}
        for order in orders:
            item = by_request.get(order["order"])
            if item is None:
                counts["not answered"] += 1
                continue
            answer = Answer(request=item["request"], text="", source=item["source"], matched=item["matched"])
            wanted = {name_key(name) for name in order["case_names"]}
            outcome = "right" if answer.source == "REAL" and right_test(answer, wanted) else (
                "wrong test" if answer.source == "REAL" else answer.source)
            counts[outcome] += 1
    total = sum(counts.values())
    print(f"replayed run {export.name}: {total} orders; own result {counts['right']}/{total} = "
          f"{100 * counts['right'] / max(total, 1):.1f}%; wrong test {counts['wrong test']}; SYNTHETIC "
          f"{counts['SYNTHETIC']}; REFUSED {counts['REFUSED']}; not answered {counts['not answered']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout", action="store_true", help="measure the held-out third of the synonym list")
    parser.add_argument("--timing", type=int, default=0, metavar="ROUNDS", help="time orders against --baseline")
    parser.add_argument("--baseline", default="33dc2a2", help="git commit of the baseline gatekeeper")
    parser.add_argument("--timing-orders", type=int, default=600, help="about this many orders a timing round")
    parser.add_argument("--actions", type=Path, help="write a replay file ordering the list's phrasings here")
    parser.add_argument("--expect", type=Path, help="what each replayed order must come back as (written with "
                                                    "--actions, read with --check)")
    parser.add_argument("--check", type=Path, metavar="EXPORT", help="check a replayed run's exported results")
    parser.add_argument("--test-threshold", type=float, default=TEST_THRESHOLD)
    parser.add_argument("--catalog-threshold", type=float, default=CATALOG_HOP_THRESHOLD)
    parser.add_argument("--quiet", action="store_true", help="figures only, not each miss")
    args = parser.parse_args()
    args.part = "heldout" if args.heldout else "tuning"
    if args.check:
        if args.expect is None:
            parser.error("--check needs --expect")
        check_run(args.check, args.expect)
        return 0
    data = Path(os.environ.get("MEDEVAL_DATA_DIR", ROOT.parent / "shared" / "data"))
    cases = import_agentclinic(data / "agentclinic" / "agentclinic_medqa.jsonl").cases
    rows = synonym_rows(args.part)
    if args.actions:
        if args.expect is None:
            parser.error("--actions needs --expect")
        write_replay(cases, rows, args.actions, args.expect)
        return 0
    evaluate(cases, rows, args)
    if args.timing:
        timing(cases, rows, args.timing, args.baseline, args.timing_orders)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
