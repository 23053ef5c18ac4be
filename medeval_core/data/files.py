"""Reading the project's files: JSON with one readable error per failure (whose remedy the caller words), JSON
Lines files refused at their first bad line (or, when asked, with the bad lines skipped and reported by number),
large text files in blocks of whole lines for the bulk readers; and writing a file in one step. The parsing itself
(``json_value``, ``json_lines``, ``problem_of``) is in ``medeval_core.jsonl``."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from pydantic import BaseModel

# Re-exported: the JSON and JSON Lines parsing lives apart so that a reader of plain JSON Lines imports no pydantic.
from medeval_core.jsonl import json_lines, json_value, problem_of

T = TypeVar("T")


def read_json(path: Path, error: type[Exception], missing: str, invalid: str) -> Any:
    """Parse ``path``; raise ``error`` saying "<path> <missing>" or "<path> <invalid> (<what is wrong>)"."""
    try:
        return json_value(path.read_bytes().decode("utf-8-sig"))
    except FileNotFoundError:
        raise error(f"{path} {missing}") from None
    except UnicodeDecodeError:
        raise error(f"{path} {invalid} (it is not UTF-8 text)") from None
    except ValueError as exc:
        raise error(f"{path} {invalid} ({exc})") from None


class SkippedLine(BaseModel):
    """A line of an input file that was left out, and why."""

    line: int
    reason: str


SKIP_REMEDY = "fix that line, or pass --skip-bad-lines to run the good lines and record the ones skipped"


def read_json_lines(path: Path, error: type[Exception], missing: str, parse: Callable[[Any], T],
                    key: Callable[[T], str], duplicate: str, nothing_valid: str,
                    limit: int | None = None, skip_bad_lines: bool = False,
                    remedy: str = SKIP_REMEDY) -> tuple[list[T], list[SkippedLine]]:
    """The items ``parse`` makes of the non-blank lines of ``path`` (at most ``limit``), and the lines skipped.

    The one reader of every JSON Lines input: a line that is not UTF-8, not JSON, nested too deeply, refused by
    ``parse`` (its ``ValueError`` is the reason) or repeating an earlier ``key`` (``duplicate`` with ``{key}``
    filled in) makes it raise ``error`` "<path> line <n>: <reason>; <remedy>." before anything is used, unless
    ``skip_bad_lines``: then the line is left out and listed. Also raises ``error`` for a missing file
    ("<path> <missing>"), one that cannot be read, or one with no line kept ("<path> has <nothing_valid>").
    A byte-order mark at the start is ignored."""
    items: list[T] = []
    skipped: list[SkippedLine] = []
    seen: set[str] = set()
    for number, value, problem in json_lines(path, error, missing):
        try:
            if problem is not None:
                raise problem
            item = parse(value)
            if key(item) in seen:
                raise ValueError(duplicate.format(key=key(item)))
        except ValueError as exc:
            if not skip_bad_lines:
                raise error(f"{path} line {number}: {problem_of(exc)}; {remedy}.") from None
            skipped.append(SkippedLine(line=number, reason=problem_of(exc)))
            continue
        seen.add(key(item))
        items.append(item)
        if limit is not None and len(items) >= limit:
            break
    if not items:
        first = f" ({skipped[0].reason} on line {skipped[0].line})" if skipped else ""
        empty = "" if skipped else " (it is empty)"
        raise error(f"{path} has {nothing_valid}{first}{empty}.")
    return items, skipped


def read_csv_rows(path: Path, error: type[Exception],
                  needs: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and the (line number, row) pairs of a CSV, every field a string; blank lines are skipped and a
    byte-order mark ignored. Raises ``error`` in one line for a file that is missing, not UTF-8 (with the line),
    unreadable as CSV, empty ("<path> is empty; <needs>."), with a repeated column, or with a row of more or fewer
    fields than the header (its line number).

    The csv module rather than pandas: pandas takes a first column for the index when every row has one field
    more than the header, which shifts every value into the wrong column without a word.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path} does not exist; {needs}.") from None
    except OSError as exc:
        raise error(f"Cannot read {path} ({exc.strerror}).") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = undecodable_line(data, exc)
        raise error(f"{path} is not UTF-8 text (line {line}, byte {exc.start} cannot be read); save it as a UTF-8 "
                    "CSV file.") from None
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        lines = [(reader.line_num, row) for row in reader]
    except csv.Error as exc:
        raise error(f"{path} is not a readable CSV file ({exc}); check its quoting.") from None
    rows = [(number, row) for number, row in lines if any(field.strip() for field in row)]
    if not rows:
        raise error(f"{path} is empty; {needs}.")
    (_, header), body = rows[0], rows[1:]
    header = [name.strip() for name in header]
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise error(f"{path} names the column {repeated[0]!r} twice in its header; keep one.")
    for number, row in body:
        if len(row) != len(header):
            raise error(f"{path} line {number} has {len(row)} fields but the header has {len(header)}; quote any "
                        "field that contains a comma, or fix the row.")
    return header, [(number, dict(zip(header, row, strict=True))) for number, row in body]


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


def undecodable_line(data: bytes, error: UnicodeDecodeError) -> int:
    """The 1-based line of ``data`` that holds the byte where decoding it failed."""
    return data.count(b"\n", 0, error.start) + 1
