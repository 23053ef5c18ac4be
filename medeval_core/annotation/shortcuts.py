"""Keyboard shortcuts on the Annotate page, as Label Studio users expect: one key per choice of the item's first
unanswered criterion, and one to skip. Streamlit has no key bindings, so a zero-height component (same origin, like
the sign-in cookie in ``gate``) listens to key presses on the page and clicks the button the key names."""

from __future__ import annotations

import json

import streamlit as st
import streamlit.components.v1 as components

from medeval_core.annotation.tasks import TaskKind

CHOICE_KEYS: dict[TaskKind, dict[str, str]] = {
    TaskKind.PAIRWISE: {"left": "1", "right": "2", "tie": "T"},
    TaskKind.PATIENT_ANSWERS: {"0": "0", "1": "1", "2": "2"},
    TaskKind.JUDGE_REVIEW: {"agree": "A", "disagree": "D"},
}
SKIP_KEY = "S"
_RUNS = "annotate-shortcut-runs"


def bind_keys(bindings: dict[str, str]) -> None:
    """Make each key of ``bindings`` click the button whose Streamlit widget key it maps to; call it after the last
    of those buttons. Keys typed into a text field are left alone.

    A click reruns the page, and until the rerun has drawn the next criterion the buttons on screen are the answered
    one's: a key pressed in that moment (a fast typist's next answer) waits. Each rerun's listener presses at most
    one waiting key, and only once the page has finished running (Streamlit's script state, not its running icon,
    which shows half a second late): a click made while Streamlit still runs the script can be dropped, and an
    answer typed must never be."""
    # The component is drawn anew on every run (a counter in its text), so that each rerun's listener takes over.
    st.session_state[_RUNS] = st.session_state.get(_RUNS, 0) + 1
    # "<" escaped so that no criterion an administrator typed can close the script element.
    targets = json.dumps({key.lower(): widget for key, widget in bindings.items()}).replace("<", "\\u003c")
    components.html(f"""<script>
const run = {st.session_state[_RUNS]};
const page = window.parent;
const targets = {targets};
const keys = page.medevalShortcuts || (page.medevalShortcuts = {{waiting: [], pressedIn: 0, pressedAt: 0}});
const ANSWER_MS = 10000;  // a rerun that never draws this component again (an error) does not hold keys longer
// Streamlit's own state of the script, set the moment a run starts; its running icon shows only 500 ms into a run,
// and a key pressed in those 500 ms clicked a button while the script ran (a click Streamlit can drop).
const RUNNING_STATES = ["running", "rerunRequested", "stopRequested"];
const running = () => {{
  const app = page.document.querySelector('[data-testid="stApp"]');
  return RUNNING_STATES.includes(app && app.getAttribute("data-test-script-state"))
    || page.document.querySelector('[data-testid="stStatusWidgetRunningIcon"]') !== null;
}};
if (keys.listener) page.document.removeEventListener("keydown", keys.listener);
const press = (key) => {{
  // Streamlit's class for a keyed widget: "st-key-" and the key with every other character made "-".
  const widget = targets[key];
  const button = widget && page.document.querySelector(
    ".st-key-" + widget.trim().replace(/[^a-zA-Z0-9_-]/g, "-") + " button");
  if (button && !button.disabled) button.click();
}};
keys.listener = (event) => {{
  const typing = event.target.closest && event.target.closest("input, textarea, [contenteditable=true]");
  const key = event.key.toLowerCase();
  if (typing || event.ctrlKey || event.metaKey || event.altKey || !(key in targets)) return;
  event.preventDefault();
  keys.waiting.push(key);
}};
page.document.addEventListener("keydown", keys.listener);
page.medevalShortcutTargets = targets;  // which buttons the keys click now (read by the browser test)
setInterval(() => {{
  const pressedHere = keys.pressedIn === run && Date.now() - keys.pressedAt < ANSWER_MS;
  if (!keys.waiting.length || pressedHere || running()) return;
  keys.pressedIn = run;
  keys.pressedAt = Date.now();
  press(keys.waiting.shift());
}}, 40);
</script>""", height=0)
