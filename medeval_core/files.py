"""Reading the project's files: JSON with one readable error per failure (whose remedy the caller words), and
large text files in blocks of whole lines for the bulk readers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol


def read_json(path: Path, error: type[Exception], missing: str, invalid: str) -> Any:
    """Parse ``path``; raise ``error`` saying "<path> <missing>" or "<path> <invalid> (<parser message>)"."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path} {missing}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path} {invalid} ({exc})") from None


class TextSource(Protocol):
    def read(self, size: int = -1, /) -> str: ...


def text_blocks(handle: TextSource, block_chars: int) -> Iterator[str]:
    """The rest of ``handle`` in blocks of about ``block_chars`` characters, each ending at a line end (the last
    one may not), so a bulk reader never sees a line cut in two."""
    rest = ""
    while chunk := handle.read(block_chars):
        chunk = rest + chunk
        cut = chunk.rfind("\n") + 1
        rest = chunk[cut:]
        if cut:
            yield chunk[:cut]
    if rest:
        yield rest
