"""Keyboard shortcuts on the Annotate page, as Label Studio users expect: one key per choice of the item's first
unanswered criterion, and one to skip. Streamlit has no key bindings, so a zero-height component (same origin, like
the sign-in cookie in ``gate``) listens to key presses on the page and clicks the button the key names."""

from __future__ import annotations

import json

import streamlit.components.v1 as components

from medeval_core.annotation.tasks import TaskKind

CHOICE_KEYS: dict[TaskKind, dict[str, str]] = {
    TaskKind.PAIRWISE: {"left": "1", "right": "2", "tie": "T"},
    TaskKind.PATIENT_ANSWERS: {"0": "0", "1": "1", "2": "2"},
    TaskKind.JUDGE_REVIEW: {"agree": "A", "disagree": "D"},
}
SKIP_KEY = "S"


def bind_keys(bindings: dict[str, str]) -> None:
    """Make each key of ``bindings`` click the button whose Streamlit widget key it maps to. Keys typed into a text
    field are left alone; the listener of the previous rerun is replaced, so one press is one click."""
    # "<" escaped so that no criterion an administrator typed can close the script element.
    targets = json.dumps({key.lower(): widget for key, widget in bindings.items()}).replace("<", "\\u003c")
    components.html(f"""<script>
const page = window.parent;
const targets = {targets};
if (page.medevalShortcuts) page.document.removeEventListener("keydown", page.medevalShortcuts);
page.medevalShortcuts = (event) => {{
  const typing = event.target.closest && event.target.closest("input, textarea, [contenteditable=true]");
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  const widget = targets[event.key.toLowerCase()];
  if (!widget) return;
  // Streamlit's class for a keyed widget: "st-key-" and the key with every other character made "-".
  const button = page.document.querySelector(".st-key-" + widget.trim().replace(/[^a-zA-Z0-9_-]/g, "-") + " button");
  if (button && !button.disabled) {{ event.preventDefault(); button.click(); }}
}};
page.document.addEventListener("keydown", page.medevalShortcuts);
page.medevalShortcutTargets = targets;  // which buttons the keys click now (read by the browser test)
</script>""", height=0)
