"""User-supplied and model-written text shown by a page as exactly its characters, never as Markdown or HTML.

A model answer with ``[text](https://...)`` became a clickable link on the lesion page, and a reference holding
``![x](https://...)`` made the browser fetch that URL. ``st.text`` and tables show text as text; alerts, captions and
Markdown lines take Markdown, so text bound for them goes through ``literal`` first: CommonMark lets every ASCII
punctuation character be escaped with a backslash, which leaves no link, image, emphasis, HTML tag, code span,
LaTeX formula or Streamlit colour directive that the text could open.
"""

from __future__ import annotations

import re
import string

_PUNCTUATION = re.compile(f"([{re.escape(string.punctuation)}])")


def literal(text: object) -> str:
    """``text`` (any object, as ``str``) as Markdown that renders to exactly its characters; line breaks kept."""
    escaped = _PUNCTUATION.sub(r"\\\1", str(text))
    return escaped.replace("\r\n", "\n").replace("\n", "  \n")
