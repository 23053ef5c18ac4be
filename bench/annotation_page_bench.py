"""The Annotate page (pages/annotate.py) on a pairwise task of N items (default 158, the SkinGPT-R1 clinician study):
how long building the task takes, and how long one judgement click takes to come back rendered, against a bare
Streamlit page of the same widgets over plain sqlite3.

A fresh SQLite file gets two DDI responses runs of N cases each (imported through ``judge ddi --responses`` with the
offline judge; responses of about 450 characters), two annotators, and one pairwise task with full overlap. The page
is driven by Streamlit's ``AppTest``: sign in, then ``--clicks`` judgement clicks (three criteria per item, so the
queue advances every third click).

Baseline, clicked in turn with the page (click for click, interleaved): a page of the same widgets (progress bar,
previous/next, the case, the two responses side by side, three rows of three choice buttons, a comment box, skip
and flag) with no sign-in, no blinding and no key bindings, whose click inserts one answer row with plain
``sqlite3`` into a file of the same items and reads the next item from it. Prints the task-building time and, for
both pages, the min and median click-to-render time and the ratio. Target: a click renders in well under 0.5 s.

Run: python bench/annotation_page_bench.py [--items 158] [--clicks 30]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sqlite3
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


# The baseline page: the Annotate page's widgets for a pairwise item, over plain sqlite3.
BARE_PAGE = """
import json
import sqlite3

import streamlit as st

config = json.loads(open("CONFIG", encoding="utf-8").read())
connection = sqlite3.connect(config["database"])
criteria = config["criteria"]
total = connection.execute("SELECT COUNT(*) FROM items").fetchone()[0]
position = st.session_state.setdefault("position", 0)
number, case, left, right = connection.execute(
    "SELECT number, case_text, left_text, right_text FROM items WHERE number = ?", (position,)).fetchone()
given = dict(connection.execute("SELECT criterion, value FROM answers WHERE item = ?", (number,)).fetchall())
done = connection.execute("SELECT COUNT(DISTINCT item) FROM answers").fetchone()[0]
st.title("Annotate")
st.progress(done / total, text=f"{done} of {total} done · item {number + 1} of {total}")


def go_to(target):
    st.session_state["position"] = max(0, min(target, total - 1))


def choose(criterion, value):
    # A callback runs in the next run's thread: its own connection, as the store's session is.
    writer = sqlite3.connect(config["database"])
    with writer:
        writer.execute("INSERT INTO answers (item, criterion, value) VALUES (?, ?, ?)", (number, criterion, value))
    writer.close()
    if all(c in {**given, criterion: value} for c in criteria):
        go_to(number + 1)


back, status, forward = st.columns([1, 3, 1])
back.button("Previous", disabled=number == 0, on_click=go_to, args=(number - 1,), width="stretch")
forward.button("Next", disabled=number >= total - 1, on_click=go_to, args=(number + 1,), width="stretch")
status.caption("Choose one option per criterion; the next item follows.")
with st.expander("Case", expanded=True):
    st.text(case)
left_column, right_column = st.columns(2)
with left_column:
    st.subheader("Response 1")
    st.text(left)
with right_column:
    st.subheader("Response 2")
    st.text(right)
for criterion in criteria:
    st.text(criterion.capitalize())
    for column, value in zip(st.columns(3), ("left", "tie", "right")):
        column.button(value, key=f"choose-{number}-{criterion}-{value}", width="stretch",
                      type="primary" if given.get(criterion) == value else "secondary", on_click=choose,
                      args=(criterion, value))
st.text_area("Comment (optional)", key=f"comment-{number}", height=80)
skip_column, flag_column = st.columns([1, 4])
skip_column.button("Skip item", key=f"skip-{number}", on_click=go_to, args=(number + 1,), width="stretch")
with flag_column.expander("Flag this item for the administrator"):
    st.text_input("Reason (what is wrong with the item)", key=f"flag-reason-{number}")
    st.button("Flag item", key=f"flag-{number}")
"""


def bare_page(folder: Path, items: int, criteria: list[str]) -> Path:
    """The baseline page and its sqlite3 file: the same responses, one row per item."""
    database = folder / "bare.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE items (number INTEGER PRIMARY KEY, case_text TEXT, left_text TEXT, "
                           "right_text TEXT)")
        connection.execute("CREATE TABLE answers (id INTEGER PRIMARY KEY, item INTEGER, criterion TEXT, value TEXT)")
        texts = {label: [json.loads(line)["response"] for line in (folder / f"{label}.jsonl").open(encoding="utf-8")]
                 for label in ("alpha", "beta")}
        connection.executemany("INSERT INTO items VALUES (?, ?, ?, ?)",
                               [(i, f"Lesion img-{i:03d}", texts["alpha"][i], texts["beta"][i]) for i in range(items)])
    config = folder / "bare.json"
    config.write_text(json.dumps({"database": str(database), "criteria": criteria}), encoding="utf-8")
    page = folder / "bare_page.py"
    page.write_text(BARE_PAGE.replace('"CONFIG"', repr(str(config))), encoding="utf-8")
    return page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=158)
    parser.add_argument("--clicks", type=int, default=30)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="annotation-bench-"))
    os.environ["MEDEVAL_DB_URL"] = f"sqlite:///{folder / 'bench.db'}"
    sys.path.insert(0, str(REPO_ROOT))
    from streamlit.testing.v1 import AppTest
    from timing import Timing, print_comparison

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
    bare = AppTest.from_file(str(bare_page(folder, args.items, list(task.criteria))), default_timeout=60).run()
    choices = ("left", "tie", "right")
    timings = {"page": Timing(), "bare": Timing()}
    for click in range(args.clicks):
        criterion = task.criteria[click % len(task.criteria)]
        suffix = f"-{criterion}-{choices[click % 3]}"
        for side, test in (("page", app), ("bare", bare)) if click % 2 == 0 else (("bare", bare), ("page", app)):
            button = next(b for b in test.button if b.key and b.key.endswith(suffix))
            started = time.perf_counter()
            button.click().run()
            timings[side].times.append(time.perf_counter() - started)
            if test.exception:
                raise SystemExit(f"the {side} page failed: {test.exception[0].message}")
    print(f"pairwise task of {args.items} items x 2 annotators built in {built:.2f} s")
    print_comparison(f"judgement click to rendered page, {args.clicks} clicks ({app.progress[0].proto.text}; bare "
                     f"page: {bare.progress[0].proto.text})", ("Annotate page", timings["page"]),
                     ("bare Streamlit page + sqlite3", timings["bare"]), unit="ms", scale=1000)
    print(f"slowest click: Annotate page {max(timings['page'].times) * 1000:.0f} ms, bare page "
          f"{max(timings['bare'].times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
