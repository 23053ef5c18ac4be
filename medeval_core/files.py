"""Reading the project's files: JSON with one readable error per failure (whose remedy the caller words), JSON
Lines case files whose bad lines are skipped and reported by number, large text files in blocks of whole lines
for the bulk readers; and writing a file in one step."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


def read_json(path: Path, error: type[Exception], missing: str, invalid: str) -> Any:
    """Parse ``path``; raise ``error`` saying "<path> <missing>" or "<path> <invalid> (<parser message>)"."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path} {missing}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path} {invalid} ({exc})") from None


class SkippedLine(BaseModel):
    """A line of an input file that was left out, and why."""

    line: int
    reason: str


def read_json_lines(path: Path, error: type[Exception], missing: str, parse: Callable[[Any], T],
                    key: Callable[[T], str], duplicate: str, nothing_valid: str,
                    limit: int | None = None) -> tuple[list[T], list[SkippedLine]]:
    """The items ``parse`` makes of the non-blank lines of ``path`` (at most ``limit``), and the lines skipped: not
    JSON, refused by ``parse`` (its ``ValueError`` is the reason) or repeating an earlier ``key`` (the reason is
    ``duplicate`` with ``{key}`` filled in). Raises ``error`` saying "<path> <missing>" for a missing file, that it
    cannot be read, or "<path> has <nothing_valid>" (with the first skipped line) when no line is kept."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise error(f"{path} {missing}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"Cannot read {path} ({exc}); give a UTF-8 JSON Lines file.") from None
    items: list[T] = []
    skipped: list[SkippedLine] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = parse(json.loads(line))
        except json.JSONDecodeError as exc:
            skipped.append(SkippedLine(line=number, reason=f"not valid JSON ({exc.msg})"))
            continue
        except ValueError as exc:
            skipped.append(SkippedLine(line=number, reason=str(exc)))
            continue
        if key(item) in seen:
            skipped.append(SkippedLine(line=number, reason=duplicate.format(key=key(item))))
            continue
        seen.add(key(item))
        items.append(item)
        if limit is not None and len(items) >= limit:
            break
    if not items:
        first = f" ({skipped[0].reason} on line {skipped[0].line})" if skipped else ""
        raise error(f"{path} has {nothing_valid}{first}.")
    return items, skipped


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


def sha256_of(path: str | Path) -> tuple[str, int]:
    """The sha256 (hex) and size of the file's bytes. Read in large blocks into one buffer: hashing on a helper
    thread then takes the GIL back only a few times per file."""
    digest = hashlib.sha256()
    size = 0
    buffer = memoryview(bytearray(1 << 24))
    with open(path, "rb", buffering=0) as handle:
        while read := handle.readinto(buffer):
            digest.update(buffer[:read])
            size += read
    return digest.hexdigest(), size


@contextmanager
def replaced_in_one_step(path: Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
    """A handle on a temporary file beside ``path``, renamed over it when the block ends without an error and
    removed otherwise: a reader (another process included) sees the old file or the whole new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, mode, encoding=encoding) as handle:
            yield handle
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):
            Path(temporary).unlink(missing_ok=True)
        raise
