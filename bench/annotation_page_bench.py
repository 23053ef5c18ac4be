"""The Annotate page (pages/annotate.py) on a pairwise task of N items (default 158, the SkinGPT-R1 clinician study):
how long building the task takes, and how long one judgement click takes to come back rendered.

A fresh SQLite file gets two DDI responses runs of N cases each (imported through ``judge ddi --responses`` with the
offline judge; responses of about 450 characters), two annotators, and one pairwise task with full overlap. The page
is driven by Streamlit's ``AppTest``: sign in, then ``--clicks`` judgement clicks (three criteria per item, so the
queue advances every third click). Prints the task-building time and the median and slowest click-to-render times.
Target: a click renders in well under 0.5 s.

Run: python bench/annotation_page_bench.py [--items 158] [--clicks 30]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DISEASES = ("melanoma-in-situ", "basal-cell-carcinoma-nodular", "seborrheic-keratosis", "verruca-vulgaris",
            "epidermal-cyst")


def write_responses(path: Path, label: str, items: int, rng: random.Random) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for i in range(items):
            findings = f"Findings of reader {label} on lesion {i}. " * 10
            guess = rng.choice(DISEASES).replace("-", " ")
            handle.write(json.dumps({"image_id": f"img-{i:03d}", "reference": DISEASES[i % len(DISEASES)],
                                     "response": f"{findings}\nFinal diagnosis: {guess}"}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=158)
    parser.add_argument("--clicks", type=int, default=30)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="annotation-bench-"))
    os.environ["MEDEVAL_DB_URL"] = f"sqlite:///{folder / 'bench.db'}"
    sys.path.insert(0, str(REPO_ROOT))
    from streamlit.testing.v1 import AppTest

    from medeval_core.annotation import accounts, tasks
    from medeval_core.cli import main as cli
    from medeval_core.context import current_settings, current_store

    rng = random.Random(0)
    for label in ("alpha", "beta"):
        path = folder / f"{label}.jsonl"
        write_responses(path, label, args.items, rng)
        with redirect_stdout(io.StringIO()):
            assert cli(["judge", "ddi", "--responses", str(path), "--judge", "offline", "--run-id", label,
                        "--json"]) == 0
    store = current_store()
    for name in ("dr.ada", "dr.bo"):
        accounts.add_annotator(store, name, f"{name}-bench-passcode")
    started = time.perf_counter()
    task = tasks.create_pairwise_task(store, current_settings(), "alpha-responses", "beta-responses",
                                      tasks.Assignment(annotators=["dr.ada", "dr.bo"], per_item=2), "bench", seed=1)
    built = time.perf_counter() - started

    app = AppTest.from_file(str(REPO_ROOT / "pages" / "annotate.py"), default_timeout=60).run()
    app.text_input[0].input("dr.ada")
    app.text_input[1].input("dr.ada-bench-passcode")
    app.button[0].click().run()
    choices = ("left", "tie", "right")
    times = []
    for click in range(args.clicks):
        criterion = task.criteria[click % len(task.criteria)]
        button = next(b for b in app.button if b.key and b.key.endswith(f"-{criterion}-{choices[click % 3]}"))
        started = time.perf_counter()
        button.click().run()
        times.append(time.perf_counter() - started)
    times.sort()
    print(f"pairwise task of {args.items} items x 2 annotators built in {built:.2f} s")
    print(f"judgement click to rendered page: median {times[len(times) // 2]:.3f} s, slowest {times[-1]:.3f} s "
          f"over {len(times)} clicks ({app.progress[0].proto.text})")


if __name__ == "__main__":
    main()
