"""Stored and user-supplied text inside Streamlit's Markdown elements (``st.error``, ``st.caption``...), shown as
typed: every ASCII punctuation character is backslash-escaped (CommonMark's escapes), so ``**``, links, HTML,
``:material/...:`` directives and ``$`` maths in a file name, an error or a model answer stay literal text."""

from __future__ import annotations

import re

_PUNCTUATION = re.compile(r"([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])")


def plain_markdown(text: object) -> str:
    """``text`` escaped for a Markdown element, newlines kept as line breaks."""
    return _PUNCTUATION.sub(r"\\\1", str(text)).replace("\n", "  \n")
