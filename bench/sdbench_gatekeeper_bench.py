"""The offline SDBench gatekeeper on the shared AgentClinic cases: how often an ordered test comes back REAL.

Three orderings of every case:
- each of the case's own tests by its own name (the names ``cases import agentclinic`` writes);
- the same tests by a common clinical synonym that the test catalogue (``prompts/sdbench_tests.json``) does *not*
  hold (``SYNONYMS`` below; any that the catalogue knows exactly is left out and reported), so only the
  sentence-embedding fallback can match them;
- tests the case lacks (``ABSENT``: common catalogue tests, and tests the catalogue does not hold), which must
  come back SYNTHETIC: a REAL there is a false match.

``--actions FILE`` also writes a replay file that orders each case's first three own tests and commits the
reference diagnosis, for ``run sdbench --agent replay`` (the accuracy and cost of that replay).

Run: python bench/sdbench_gatekeeper_bench.py [--actions /tmp/sdbench_actions.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from medeval_core.benchmarks.sdbench.cases import import_agentclinic  # noqa: E402
from medeval_core.benchmarks.sdbench.catalog import embed, load_catalog, name_key  # noqa: E402
from medeval_core.benchmarks.sdbench.gatekeeper import (  # noqa: E402
    CATALOG_HOP_THRESHOLD,
    TEST_THRESHOLD,
    OfflineGatekeeper,
)

# Case test name (its word set) -> a synonym a clinician would write, checked below to be outside the catalogue.
SYNONYMS = {
    "complete blood count": "full blood picture",
    "cbc": "blood cell counts",
    "chest x ray": "plain film of the chest",
    "chest ct": "computed tomography of the thorax",
    "ct chest": "computed tomography of the thorax",
    "mri brain": "magnetic resonance imaging of the head",
    "brain mri": "magnetic resonance imaging of the head",
    "urinalysis": "urine dipstick and microscopy",
    "echocardiogram": "cardiac echo study",
    "electrocardiogram": "twelve lead heart tracing",
    "liver function tests": "hepatic enzymes and bilirubin",
    "thyroid function tests": "thyroid hormone levels",
    "pelvic ultrasound": "sonography of the pelvis",
    "abdominal ultrasound": "sonography of the abdomen",
    "skin biopsy": "dermatopathology of a skin punch",
    "peripheral blood smear": "microscopy of a blood film",
    "blood cultures": "cultures of the blood for bacteria",
    "coagulation profile": "clotting times",
    "erythrocyte sedimentation rate": "sed rate westergren",
    "c reactive protein": "crp level in serum",
    "electroencephalogram": "brain wave recording",
    "electromyography": "needle electromyogram of the muscles",
    "lumbar puncture": "cerebrospinal fluid sampling",
    "audiometry": "hearing assessment audiogram",
    "mammography": "breast x ray imaging",
    "hemoglobin": "haemoglobin concentration",
    "platelets": "platelet number",
    "wbc": "white cells",
    "creatinine": "serum creatinine concentration",
    "glucose": "blood sugar level measurement",
    "serum electrolytes": "sodium potassium chloride bicarbonate",
    "toxicology screen": "screen for drugs of abuse",
    "bone marrow aspirate": "marrow aspiration and trephine",
    "barium enema": "contrast study of the colon",
    "abdominal x ray": "plain film of the abdomen",
    "x ray knee": "plain film of the knee",
    "mri knee": "magnetic resonance imaging of the knee",
    "scrotal ultrasound": "sonography of the testes",
    "cystoscopy": "endoscopy of the bladder",
    "pulmonary function tests": "lung function testing with spirometry",
    "polysomnography": "overnight sleep recording",
    "sputum culture": "culture of expectorated sputum",
    "throat culture": "pharyngeal swab culture",
    "stool test": "stool sample analysis",
    "iron studies": "serum iron and ferritin",
    "lactate dehydrogenase": "ldh enzyme level",
}
ABSENT = ["Serum lipase", "Hemoglobin A1c", "TSH", "D-dimer", "Troponin", "CT head", "Lumbar spine X-ray",
          "Urine culture", "Lipid panel", "Vitamin B12", "Ferritin", "Blood alcohol level", "Renal ultrasound",
          "Colonoscopy", "Serum cortisol",
          # and tests the catalogue does not hold either (only the embedding paths could match them, wrongly)
          "Serum amyloid A", "Chromogranin A", "Plasma renin activity", "Aldosterone", "Homocysteine",
          "Ceruloplasmin", "Alpha-1 antitrypsin level", "Factor V Leiden mutation", "Anti-Jo-1 antibody",
          "Serum osmolality", "Methylmalonic acid", "Blood lead level", "Serum copper", "Carboxyhemoglobin",
          "Cold agglutinins", "Cryoglobulins", "NMDA receptor antibodies", "Anti-Ro antibodies", "Cardiac MRI",
          "SPECT brain", "Venography of the leg", "Gastric emptying study", "Capsule endoscopy", "Skin patch test"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actions", type=Path, help="write the reference-after-three-tests replay file here")
    parser.add_argument("--test-threshold", type=float, default=TEST_THRESHOLD)
    parser.add_argument("--catalog-threshold", type=float, default=CATALOG_HOP_THRESHOLD)
    parser.add_argument("--quiet", action="store_true", help="figures only, not each miss")
    args = parser.parse_args()
    data = Path(os.environ.get("MEDEVAL_DATA_DIR", ROOT.parent / "shared" / "data"))
    cases = import_agentclinic(data / "agentclinic" / "agentclinic_medqa.jsonl").cases
    catalog = load_catalog()
    # One encoder call for every name the run will match (the gatekeeper remembers vectors per text).
    embed([*(n for c in cases if c.findings for n in c.findings.tests), *SYNONYMS.values(), *ABSENT])
    known = sorted(name for name, synonym in SYNONYMS.items() if catalog.exact(synonym) is not None)
    usable = {name_key(name): synonym for name, synonym in SYNONYMS.items() if catalog.exact(synonym) is None}
    own = [0, 0]
    synonym = [0, 0, 0]  # REAL on the right test, REAL on another test, ordered
    absent = [0, 0]
    misses: list[str] = []
    for case in cases:
        assert case.findings is not None
        gatekeeper = OfflineGatekeeper(case, catalog, test_threshold=args.test_threshold,
                                       catalog_threshold=args.catalog_threshold)
        names = list(case.findings.tests)
        for answer in gatekeeper.answer("tests", names):
            own[1] += 1
            own[0] += answer.source == "REAL" and answer.matched == answer.request
        wanted = [(name, usable[name_key(name)]) for name in names if name_key(name) in usable]
        for (name, text), answer in zip(wanted, gatekeeper.answer("tests", [t for _, t in wanted]), strict=True):
            synonym[2] += 1
            if answer.source == "REAL" and (answer.matched or "").split(":")[0] == name:
                synonym[0] += 1
            elif answer.source == "REAL":
                synonym[1] += 1
                misses.append(f"{case.case_id}: {text!r} matched {answer.matched!r}, not {name!r}")
            else:
                misses.append(f"{case.case_id}: {text!r} came back {answer.source} (the case has {name!r})")
        lacking = [t for t in ABSENT if not any(name_key(t) == name_key(n) for n in names)]
        for answer in gatekeeper.answer("tests", lacking):
            absent[1] += 1
            absent[0] += answer.source == "REAL"
            if answer.source == "REAL":
                misses.append(f"{case.case_id}: absent {answer.request!r} came back REAL as {answer.matched!r}")
    print(f"cases: {len(cases)}")
    print(f"own names:  REAL {own[0]}/{own[1]} = {100 * own[0] / own[1]:.1f}%")
    print(f"synonyms outside the catalogue: REAL on the right test {synonym[0]}/{synonym[2]} = "
          f"{100 * synonym[0] / synonym[2]:.1f}%; REAL on another test {synonym[1]}")
    print(f"tests the case lacks: REAL (false match) {absent[0]}/{absent[1]} = {100 * absent[0] / absent[1]:.1f}%")
    if known:
        print(f"left out (the catalogue knows them exactly): {', '.join(known)}")
    print(f"thresholds: test {args.test_threshold}, catalogue {args.catalog_threshold}")
    for line in [] if args.quiet else misses:
        print(f"  {line}")
    if args.actions:
        with args.actions.open("w", encoding="utf-8") as handle:
            for case in cases:
                assert case.findings is not None
                actions = [{"kind": "test", "text": name} for name in list(case.findings.tests)[:3]]
                actions.append({"kind": "diagnosis", "text": case.final_diagnosis})
                handle.write(json.dumps({"case_id": case.case_id, "actions": actions}) + "\n")
        print(f"wrote {args.actions}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
