"""Annotate: the signed-in annotator's queue, one item at a time. One click per judgement; when every criterion of
an item is answered the next open item appears (its image already read); progress stays at the top. Everything
shown comes from the item's blinded payload, as plain text."""

from collections.abc import Callable
from typing import Any

import streamlit as st

from medeval_core.controllers.annotate import (
    CHOICE_KEYS,
    COMMENT,
    SKIP_KEY,
    Queue,
    QueueItem,
    TaskKind,
    bind_keys,
    first_open,
    next_open,
    reasoned,
)

CHOICE_LABELS = {
    TaskKind.PAIRWISE: {"left": "Response 1 is better", "tie": "Tie", "right": "Response 2 is better"},
    TaskKind.JUDGE_REVIEW: {"agree": "Agree with the verdict", "disagree": "Disagree"},
}
RATING_LABELS = {
    "truthfulness": {"0": "0 · contradicts the record", "1": "1 · partly consistent", "2": "2 · consistent"},
    "relevance": {"0": "0 · does not answer", "1": "1 · partly answers", "2": "2 · answers the question"},
}


@st.cache_data(max_entries=64, show_spinner=False)
def image_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def show_case(case: dict[str, Any] | None) -> None:
    if not case:
        return
    data = image_bytes(case["image"]) if case.get("image") else None
    # Image beside the record, so the responses and choices below fit a laptop screen.
    picture, record = st.columns([2, 3]) if data is not None else (None, st.container())
    if picture is not None:
        picture.image(data, width="stretch")
    for name, value in case.get("fields", {}).items():
        record.text(f"{name}: {value}")


def show_output(view: dict[str, Any]) -> None:
    # Long outputs scroll inside a box of a laptop screen's height, so the choices below stay in reach.
    size = len(view.get("text", "")) + sum(len(line) + 40 for _, line in view.get("dialogue", []))
    with st.container(height=420 if size > 1200 else "content", border=True):
        for speaker, line in view.get("dialogue", []):
            with st.chat_message("assistant" if speaker == "Patient" else "user",
                                 avatar=":material/person:" if speaker == "Patient" else ":material/stethoscope:"):
                st.caption(speaker)
                st.text(line)
        if view.get("text"):
            parts = reasoned(view["text"])
            if parts is None:
                st.text(view["text"])
            else:
                st.caption("Answer")
                st.text(parts.answer)
                with st.expander("Reasoning"):
                    st.text(parts.reasoning)


def choice_row(item: QueueItem, criterion: str, labels: dict[str, str],
               choose: Callable[[str, str], None]) -> None:
    st.text(criterion.capitalize())
    current = item.answers.get(criterion)
    for column, (value, label) in zip(st.columns(len(labels)), labels.items(), strict=True):
        column.button(label, key=f"choose-{item.item_id}-{criterion}-{value}", width="stretch",
                      type="primary" if current == value else "secondary", on_click=choose, args=(criterion, value))


queue = Queue()
st.title("Annotate")
tasks = queue.tasks()
if not tasks:
    st.info("Nothing is assigned to you yet. An administrator assigns items when creating a task.")
    st.stop()

# Fixed labels: a label that changed with progress would make Streamlit treat the selectbox as a new widget.
titles = {task.id: f"{number}. {task.title}" for number, task in enumerate(tasks, start=1)}
task_id = st.selectbox("Task", list(titles), format_func=titles.__getitem__, key="annotate-task",
                       label_visibility="collapsed" if len(tasks) == 1 else "visible")
task = next(t for t in tasks if t.id == task_id)
items = queue.items(task.id)
cursor_key = f"annotate-cursor-{task.id}"
if cursor_key not in st.session_state:
    st.session_state[cursor_key] = first_open(items)
index = min(int(st.session_state[cursor_key]), len(items) - 1)
item = items[index]
done = sum(i.complete for i in items)
set_aside = sum(not i.complete and not i.open for i in items)
st.progress(done / len(items), text=f"{done} of {len(items)} done · item {item.number} of {len(items)}"
                                    + (f" · {set_aside} skipped or flagged" if set_aside else ""))


def go_to(position: int) -> None:
    st.session_state[cursor_key] = max(0, min(position, len(items) - 1))


def choose(criterion: str, value: str) -> None:
    if refused := queue.answer(item.item_id, criterion, value):
        st.session_state["annotate-error"] = refused
        return
    # Read back, not taken from this page's items: a fast click lands on a page drawn before the previous click's
    # answer was stored, and the item would never count as complete.
    stored = queue.items(task.id)
    if stored[index].complete:
        move_on(stored)


def move_on(stored: list) -> None:
    """Go to the next open item of ``stored`` (the queue as read after the answer)."""
    following = next_open(stored, index)
    if following is not None:
        go_to(following)


def skip() -> None:
    queue.skip(item.item_id)
    move_on(queue.items(task.id))


def flag() -> None:
    if refused := queue.flag(item.item_id, st.session_state.get(f"flag-reason-{item.item_id}", "")):
        st.session_state["annotate-error"] = refused
        return
    move_on(queue.items(task.id))


def save_comment() -> None:
    queue.comment(item.item_id, st.session_state[f"comment-{item.item_id}"])


if error := st.session_state.pop("annotate-error", None):
    st.error(error)

back, status, forward = st.columns([1, 3, 1])
back.button("← Previous", disabled=index == 0, on_click=go_to, args=(index - 1,), width="stretch")
forward.button("Next →", disabled=index >= len(items) - 1, on_click=go_to, args=(index + 1,), width="stretch")
if item.flag is not None:
    status.caption(f"You flagged this item: {item.flag}")
elif item.skipped and not item.complete:
    status.caption("You skipped this item; you can still answer it.")
else:
    status.caption("Answered: your choices are saved as you click; change one by clicking another."
                   if item.complete else "Choose one option per criterion; the next item follows.")

payload = item.payload
if task.kind == TaskKind.PAIRWISE:
    with st.expander("Case", expanded=True):
        show_case(payload.get("case"))
    left, right = st.columns(2)
    with left:
        st.subheader("Response 1")
        show_output(payload["left"])
    with right:
        st.subheader("Response 2")
        show_output(payload["right"])
elif task.kind == TaskKind.PATIENT_ANSWERS:
    record, exchange = st.columns(2)
    with record:
        st.subheader("Case record")
        with st.container(height=360):
            show_case(payload.get("case"))
    with exchange:
        if payload.get("dialogue_before"):
            with st.expander(f"Conversation so far ({len(payload['dialogue_before'])} lines)"):
                for speaker, line in payload["dialogue_before"]:
                    st.text(f"{speaker}: {line}")
        st.subheader("Question")
        st.text(payload.get("question") or "(the opening of the consultation)")
        st.subheader("Simulated patient's answer")
        st.text(payload["answer"])
else:
    case_column, response_column = st.columns(2)
    with case_column:
        st.subheader("Case and reference")
        show_case(payload.get("case"))
    with response_column:
        st.subheader("Response")
        show_output(payload["response"])
        st.subheader("Judge's verdict")
        for name, value in payload["verdict"].items():
            st.text(f"{name}: {value}")

# The keys answer the first criterion still unanswered, so a whole item can be done from the keyboard.
keyed = next((criterion for criterion in task.criteria if criterion not in item.answers), None)
bindings = {SKIP_KEY: f"skip-{item.item_id}"}
for criterion in task.criteria:
    labels = CHOICE_LABELS.get(task.kind) or RATING_LABELS.get(criterion) or {v: v for v in task.choices}
    if criterion == keyed:
        keys = CHOICE_KEYS[task.kind]
        st.caption("Keys for " + criterion + ": " + " · ".join(f"{keys[value]} {label}" for value, label
                                                                  in labels.items()) + f" · {SKIP_KEY} skip item")
        bindings |= {keys[value]: f"choose-{item.item_id}-{criterion}-{value}" for value in labels}
    choice_row(item, criterion, labels, choose)
st.text_area("Comment (optional)", value=item.answers.get(COMMENT, ""), key=f"comment-{item.item_id}",
             on_change=save_comment, height=80)

skip_column, flag_column = st.columns([1, 4])
skip_column.button("Skip item", key=f"skip-{item.item_id}", on_click=skip, disabled=not item.open, width="stretch")
with flag_column.expander("Flag this item for the administrator"):
    st.text_input("Reason (what is wrong with the item)", key=f"flag-reason-{item.item_id}")
    st.button("Flag item", key=f"flag-{item.item_id}", on_click=flag, disabled=item.flag is not None)
bind_keys(bindings)

# The next open item's image is read now, so it appears at once after the last click on this one.
upcoming = next((other for other in items[index + 1:] if other.open), None)
if upcoming is not None and (upcoming_case := upcoming.payload.get("case")) and upcoming_case.get("image"):
    image_bytes(upcoming_case["image"])
