"""User-supplied and model-written text shown by a page as exactly its characters, never as Markdown or HTML.

A model answer with ``[text](https://...)`` became a clickable link on the lesion page, and a reference holding
``![x](https://...)`` made the browser fetch that URL. ``st.text`` and tables show text as text; alerts, captions and
Markdown lines take Markdown, so text bound for them goes through ``literal`` first:

- every ASCII punctuation character is escaped with a backslash (CommonMark allows it for all of them), which
  leaves no link, image, emphasis, HTML tag, code span, heading, list, LaTeX formula or colour directive;
- GitHub-flavoured autolinks (``https://...``, ``www.``, ``name@host``) and Streamlit's ``:emoji:`` and
  ``:material/icon:`` shortcodes are found in the text *after* escapes are resolved, so a WORD JOINER (U+2060,
  invisible and zero-width) is put after a ``:`` that opens one, after an ``@`` before a name and inside ``www.``:
  the text reads the same, and none of those patterns matches.
"""

from __future__ import annotations

import re
import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

_PUNCTUATION = re.compile(f"([{re.escape(string.punctuation)}])")
WORD_JOINER = "\u2060"
# A colon before a letter or a slash (``https://``, ``:smile:``, ``:red[``), an at sign before a name, "www" before a
# dot; a colon before a space or a digit ("size: 3", "12:30") opens nothing and is left alone.
_LINK_MARKERS = re.compile(r"\\:(?=\\/|[^\W\d_])|\\@(?=\w)|(?i:www)(?=\\\.)")


def literal(text: object) -> str:
    """``text`` (any object, as ``str``) as Markdown that renders to exactly its characters; line breaks kept."""
    escaped = _PUNCTUATION.sub(r"\\\1", str(text))
    escaped = _LINK_MARKERS.sub(lambda match: match.group(0) + WORD_JOINER, escaped)
    return escaped.replace("\r\n", "\n").replace("\n", "  \n")


def literal_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell through ``literal``: ``st.table`` renders its cells as Markdown, so a URL in a
    hint or an endpoint column would otherwise become a link."""
    return frame.map(lambda cell: literal(cell) if isinstance(cell, str) else cell)
