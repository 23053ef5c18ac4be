"""JSON and JSON Lines parsing with one readable error per failure (whose remedy the caller words).

Apart from ``medeval_core.data.files`` (which re-exports it beside the readers built on it) because the
``medeval_core.data`` package imports pydantic: a reader of plain JSON Lines (``score hitk``) starts without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from json.scanner import make_scanner
from pathlib import Path
from typing import Any

# Python's json parser recurses once per nesting level: a line of 100,000 brackets raises RecursionError, which
# is not a ValueError, so every JSON read here goes through ``json_value``.
NESTED_TOO_DEEPLY = "nested too deeply to read"


def json_value(text: str | bytes) -> Any:
    """``text`` parsed as JSON; ValueError saying in a few words what is wrong (not JSON, nested too deeply)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError(NESTED_TOO_DEEPLY) from None


def problem_of(exc: ValueError) -> str:
    """One line saying what a parser's ValueError found (a pydantic error names the first field and problem)."""
    # Imported here: only a refused line comes here, and a pydantic error means pydantic is imported already.
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"field {where!r}: {first['msg']}" if where else str(first["msg"])
    if isinstance(exc, UnicodeDecodeError):
        return f"it is not UTF-8 text (byte {exc.start + 1} of the line)"
    return str(exc)


def _file_bytes(path: Path, error: type[Exception], missing: str) -> bytes:
    """The file's bytes, a leading byte-order mark dropped; ``error`` says "<path> <missing>" for a missing file and
    that it cannot be read otherwise."""
    try:
        return path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    except FileNotFoundError:
        raise error(f"{path} {missing}") from None
    except OSError as exc:
        raise error(f"Cannot read {path} ({exc.strerror}); give a UTF-8 JSON Lines file.") from None


# The scanner ``json.loads`` uses (the C one), called on each line: ``json.loads`` wraps it in several
# Python-level calls and two whitespace matches per line, a third of the time of reading 20,000 short lines.
# typeshed types its argument as a scanner; it reads the decoder's options from any object that has them.
_scan_value = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
# What ``bytes.strip`` also removes within a line (a line holds no \n or \r: they end it).
_BLANK_IN_LINE = " \t\x0b\x0c"


def _parsed(line: str | bytes) -> tuple[Any, ValueError | None]:
    try:
        return json_value(line.decode("utf-8") if isinstance(line, bytes) else line), None
    except ValueError as exc:  # UnicodeDecodeError included
        return None, exc


def json_lines(path: Path, error: type[Exception], missing: str) -> Iterator[tuple[int, Any, ValueError | None]]:
    """(line number, parsed value, None) for each non-blank line of ``path`` (a leading byte-order mark dropped), or
    (line number, None, the ValueError saying why) for a line that is not UTF-8, not JSON or nested too deeply.

    Each line's value is exactly ``json_value`` of it: the scanner's answer is taken only when it read the whole
    line, and every other line (an error, spaces around the value, two values) goes through ``json_value``, so
    its message is the same too."""
    data = _file_bytes(path, error, missing)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        for number, undecoded in enumerate(data.splitlines(), start=1):
            if undecoded.strip():
                yield number, *_parsed(undecoded)
        return
    if "\r" in text:  # bytes.splitlines() ends a line at \r and \r\n too
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip(_BLANK_IN_LINE):
            continue
        try:
            value, end = _scan_value(line, 0)
        except (ValueError, StopIteration, RecursionError):
            end = None
        yield (number, value, None) if end == len(line) else (number, *_parsed(line))
