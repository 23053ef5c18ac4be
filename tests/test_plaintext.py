"""``plaintext.literal``: text bound for Streamlit Markdown renders as exactly its characters (issue 8, item 9)."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from medeval_core.plaintext import WORD_JOINER, literal

HOSTILE = ("[link](https://evil.example/x) ![img](http://127.0.0.1:9/p.png) <img src=x onerror=alert(1)> "
           "**bold** _it_ `code` $x^2$ :red[red] :smile: :material/home: # heading\n1. item\n- item\n"
           "https://bare.example/path www.evil.example a@b.example | a | b |")


def test_commonmark_renders_the_escaped_text_as_the_same_characters_and_no_markup() -> None:
    html = MarkdownIt("commonmark").render(literal(HOSTILE))
    assert not re.search(r"<(a|img|strong|em|code|h1|ol|ul|li|table)\b", html)
    text = re.sub(r"<br />\n|</?p>", lambda m: "\n" if "br" in m.group(0) else "", html).strip()
    unescaped = (text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
                 .replace(WORD_JOINER, ""))
    assert unescaped == HOSTILE


def test_autolinks_and_shortcodes_are_broken_by_an_invisible_joiner() -> None:
    escaped = literal("https://x.example www.y.example a@b.example :smile:")
    plain = escaped.replace("\\", "")
    assert "https://" not in plain and "www." not in plain.lower() and "a@b" not in plain and ":smile:" not in plain
    assert plain.replace(WORD_JOINER, "") == "https://x.example www.y.example a@b.example :smile:"
