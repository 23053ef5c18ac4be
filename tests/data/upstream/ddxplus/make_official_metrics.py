"""Writes a DDXPlus predictions file (medeval's JSON Lines) and the figures the official ``compute_metrics`` of
mila-iqia/ddxplus gives for the same predictions, through the official code itself.

Usage: python make_official_metrics.py DDXPLUS_CODE_DIR KB_DIR PATIENTS_CSV OUT_DIR (see README.md here).
The official metrics module needs only numpy; it is imported from DDXPLUS_CODE_DIR/basd, never copied here.
"""

import ast
import csv
import json
import sys
from pathlib import Path

import numpy as np

code_dir, kb_dir, patients_csv, out_dir = (Path(arg) for arg in sys.argv[1:5])
sys.path.insert(0, str(code_dir / "basd"))
from metrics import compute_metrics, write_json  # noqa: E402  (the official module, found at run time)

N_PATIENTS = 60  # the first rows of PATIENTS_CSV; the test reads the same rows from the shared data
conditions = json.loads((kb_dir / "release_conditions.json").read_text(encoding="utf-8"))
index_2_key = sorted(conditions)  # the official pathology index (sim_utils.load_and_check_data)
key_2_index = {key: i for i, key in enumerate(index_2_key)}
with patients_csv.open(newline="", encoding="utf-8") as handle:
    rows = list(csv.DictReader(handle))[:N_PATIENTS]

n, k = len(rows), len(index_2_key)
gt_differential = np.zeros((n, k))
disease = np.zeros(n, dtype=int)
for i, row in enumerate(rows):
    for name, mass in ast.literal_eval(row["DIFFERENTIAL_DIAGNOSIS"]):
        gt_differential[i, key_2_index[name]] = mass
    disease[i] = key_2_index[row["PATHOLOGY"]]

# Predictions: the ground-truth differential, deterministically disturbed; every third patient gets an exact
# two-way tie at the top between its true pathology and another (the true one has the higher index in half).
rng = np.random.default_rng(17)
final_diags = gt_differential * rng.uniform(0.5, 1.5, gt_differential.shape)
for i in range(0, n, 3):
    others = [j for j in range(k) if j != disease[i]]
    partner = others[int(rng.integers(len(others)))]
    top = final_diags[i].max() + 0.1
    final_diags[i, disease[i]] = final_diags[i, partner] = top
final_diags /= final_diags.sum(axis=1, keepdims=True)

lines = []
for i in range(n):
    listed = [int(j) for j in np.flatnonzero(final_diags[i])]
    rng.shuffle(listed)  # medeval must not depend on the listing order
    lines.append({"index": i, "differential": {index_2_key[j]: float(final_diags[i, j]) for j in listed},
                  "inquired": []})
out_dir.mkdir(parents=True, exist_ok=True)
(out_dir / "predictions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

# No questions asked: one state (the final differential), no valid timestep; evidence arrays left empty.
empty = np.zeros((n, 1), dtype=bool)
severity_mask = np.asarray([conditions[key].get("severity", 5) < 3 for key in index_2_key])
result = compute_metrics(gt_differential, disease, final_diags, final_diags[:, None, :], np.zeros((n, 0), dtype=int),
                         empty, empty, np.ones(1, dtype=bool), np.ones(1, dtype=bool), severity_mask, tres=0.01)
kept = {key: float(result[key]) for key in ("GTPA", "GTPA@1", "DDR", "DDP", "DDF1", "IL")}
write_json(kept, str(out_dir / "official_metrics.json"))
print(json.dumps(kept))
