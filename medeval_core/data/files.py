"""Reading the project's files: JSON with one readable error per failure (whose remedy the caller words), JSON
Lines files refused at their first bad line (or, when asked, with the bad lines skipped and reported by number),
large text files in blocks of whole lines for the bulk readers; and writing a file in one step."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from json.scanner import make_scanner
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T")


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


def problem_of(exc: ValueError) -> str:
    """One line saying what a parser's ValueError found (a pydantic error names the first field and problem)."""
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
