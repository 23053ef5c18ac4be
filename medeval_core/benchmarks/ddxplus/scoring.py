"""Scoring DDXPlus predictions made elsewhere (``score ddxplus``) or by a run, through the vectorised metrics.

Prediction file: JSON Lines, one object per patient::

    {"index": 0, "differential": {"URTI": 0.7, "Bronchitis": 0.3}, "inquired": ["E_91", "E_53"]}

``index`` is the patient's 0-based row in the patients file; ``differential`` maps pathology names (KB key,
English or French name) to masses, or is a list of ``[name, mass]`` pairs; ``inquired`` lists the root asked at
each turn in order (repeats are turns; the initial evidence only when asked again; ``E_54_@_V_161`` counts as
its root ``E_54``). A missing ``inquired`` means no question was asked.

Decisions, each reported as a warning:
- a patient without a prediction line counts as an empty prediction with no questions (IL = 1), so that the
  means stay over all patients;
- each differential is normalised to sum 1 before the 0.01 cut (design.md §3.2: the official agents output a
  softmax), so one given in percent scores as the same differential in proportions;
- a predicted name outside the KB counts in P (it lowers DDP) and never matches the ground truth;
- an inquired code outside the KB counts as a turn and is never a positive evidence;
- an evidence inquired twice counts as two turns (IL) and once in PER, as the official ``compute_metrics`` does;
- a line for a row that the loader skipped is ignored.
A line that is not UTF-8 or valid JSON, lacks ``index``/``differential``, repeats an index, gives a mass that is
not a finite number of at least 0, or inquires more than the 30 questions the official agents may ask, is an error
naming the line: scores from a half-read file would mislead.

Reading is in bulk, like the patients loader: lines in the layout above (keys in that order, ``inquired``
optional, any spacing) are split on the JSON quote; the separators between strings are checked once per
distinct shape and their numbers parsed in one go; strings are decoded once per distinct string. Any other line
goes through ``json.loads``. Every check then runs over all lines at once; when one fails, the first failing
line is read again by ``_parse_line``, the one rule book, so the error names the same line with the same message
as reading the file line by line would.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import pickle
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any

import numpy as np

from medeval_core.benchmark import MetricUnit
from medeval_core.benchmarks.ddxplus import metrics as ddx_metrics
from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase, root_of
from medeval_core.benchmarks.ddxplus.patients import PatientSet, distinct, numbers_of_lines, spans
from medeval_core.benchmarks.ddxplus.simulator import MAX_QUESTIONS
from medeval_core.data.files import text_blocks, undecodable_line

# Bulk text helpers -------------------------------------------------------------------------------------------


def shape_table(kept: bytes) -> bytes:
    """A ``bytes.translate`` table that writes every digit as ``d``, keeps the bytes of ``kept`` and turns any other
    byte into ``?``: separators that differ only in their numbers get one shape, checked once. NUL stays NUL: it
    separates the pieces (``shapes``)."""
    table = bytearray(b"?" * 256)
    for byte in kept + b"\x00":
        table[byte] = byte
    for byte in b"0123456789":
        table[byte] = ord("d")
    return bytes(table)


_NUMBER_BYTES = b"0123456789.eE+-"
_NUMBER_LINES = bytes.maketrans(b"\x00", b"\n")
_NOT_NUMBER = bytes(sorted(set(range(256)) - set(_NUMBER_BYTES) - {0}))


def shapes(pieces: list[str], table: bytes) -> tuple[np.ndarray, list[bytes], bytes]:
    """The shape (``shape_table``) of each piece as an index among the distinct shapes, the distinct shapes, and
    the pieces joined by NUL, UTF-8 encoded (for ``parse_numbers``). The caller makes sure no piece holds a NUL."""
    joined = "\x00".join(pieces).encode()
    codes, distinct_shapes = distinct(joined.translate(table).split(b"\x00"))
    return codes, distinct_shapes, joined


def parse_numbers(joined: bytes, pieces: list[str], keep: np.ndarray, strict_json: bool = False) -> np.ndarray:
    """The number written in each NUL-separated piece of ``joined``; NaN for a piece without one or not kept, and
    with ``strict_json``, for a number JSON does not allow (a leading zero: ``01``).

    Keep only pieces whose shape shows at most one number: their digits, signs, dots and exponent marks are then
    that number, parsed all at once (``numbers_of_lines``: the same double as ``float``).
    """
    if not keep.all():
        joined = "\x00".join(piece if ok else "" for piece, ok in zip(pieces, keep, strict=True)).encode()
    lines = joined.translate(_NUMBER_LINES, _NOT_NUMBER) + b"\n"
    if not lines.strip(b"\n"):
        return np.full(len(pieces), np.nan)
    numbers = numbers_of_lines(lines[:-1])
    if strict_json:
        text = np.frombuffer(lines, dtype=np.uint8)
        starts = np.concatenate([[0], np.flatnonzero(text[:-1] == ord("\n")) + 1])
        padded = np.concatenate([text, np.zeros(3, dtype=np.uint8)])
        first, second, third = padded[starts], padded[starts + 1], padded[starts + 2]
        digit = (second >= ord("0")) & (second <= ord("9"))
        after_minus = (third >= ord("0")) & (third <= ord("9"))
        numbers[((first == ord("0")) & digit) | ((first == ord("-")) & (second == ord("0")) & after_minus)] = np.nan
    return numbers


def metric_unit(key: str) -> MetricUnit:
    """DDXPlus reports its metrics as percentages (0-100), and IL in turns."""
    return "number" if key == "IL" else "percent"


REFERENCE_ROWS = {
    # Published test-set figures (134,529 patients), design.md §3.2.
    "AARLC": {"DDR": 97.73, "DDP": 69.53, "DDF1": 78.24, "GTPA": 99.92, "GTPA@1": 75.39, "PER": 54.55, "IL": 25.75},
    "BASD": {"DDR": 85.03, "DDP": 88.34, "DDF1": 83.69, "GTPA": 99.30, "GTPA@1": 67.71, "PER": 88.18, "IL": 17.86},
}


class PredictionFileError(ValueError):
    """A prediction file that cannot be scored; the message names the line and what to fix."""


@dataclass
class Predictions:
    """Predictions aligned with a PatientSet (row i is patient i), as the metric arrays need them."""

    entries: ddx_metrics.Entries
    inquired: np.ndarray
    """Inquired roots (initial evidence included) as ``pack_roots`` bitmaps."""
    n_questions: np.ndarray
    has_line: np.ndarray
    extra_names: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class ScoreReport:
    metrics: dict[str, float]
    n_patients: int
    per_patient: dict[str, np.ndarray]
    per_pathology: dict[str, dict[str, float]]
    warnings: list[str]


def _mass(value: Any, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise PredictionFileError(f"{where}: the mass of {name!r} is {value!r}; masses must be finite numbers of "
                                  "at least 0.")
    return float(value)


def _entries(differential: Any, where: str) -> list[tuple[str, float]]:
    if isinstance(differential, dict):
        return [(str(name), _mass(mass, where, name)) for name, mass in differential.items()]
    if isinstance(differential, list):
        pairs = []
        for entry in differential:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
                raise PredictionFileError(f"{where}: a differential list must hold [name, mass] pairs.")
            pairs.append((entry[0], _mass(entry[1], where, entry[0])))
        if len({name for name, _ in pairs}) != len(pairs):
            raise PredictionFileError(f"{where}: the differential lists a pathology twice.")
        return pairs
    raise PredictionFileError(f"{where}: 'differential' must be an object of name -> mass (or [name, mass] pairs).")


def _repeated(owner: np.ndarray, values: np.ndarray, n_owners: int) -> np.ndarray:
    """(n_owners,) bool: the owner lists some value twice (values >= 0)."""
    found = np.zeros(n_owners, dtype=bool)
    if not len(values):
        return found
    if np.any(owner[1:] < owner[:-1]):
        key = owner * (int(values.max()) + 1) + values
        order = np.argsort(key, kind="stable")
        again = key[order][1:] == key[order][:-1]
        found[owner[order][1:][again]] = True
        return found
    # Each owner's entries are contiguous (every caller lists them owner by owner): its values OR-ed into bit sets
    # of 64 values a word, no sort and no owners x values table; it repeats one when the sets hold fewer than it
    # lists.
    starts = np.flatnonzero(np.concatenate([[True], owner[1:] != owner[:-1]]))
    listed = np.diff(np.concatenate([starts, [len(owner)]]))
    word = values >> 6
    bits = np.left_shift(np.uint64(1), (values & 63).astype(np.uint64))
    distinct = np.zeros(len(starts), dtype=np.int64)
    for index in range(int(word.max()) + 1):
        distinct += np.bitwise_count(np.bitwise_or.reduceat(np.where(word == index, bits, np.uint64(0)), starts))
    found[owner[starts]] = distinct < listed
    return found


class PredictionBuilder:
    """Collects per-patient predictions into arrays; used for prediction files and for finished runs alike."""

    def __init__(self, patients: PatientSet) -> None:
        self.patients = patients
        self.kb: KnowledgeBase = patients.kb
        n = len(patients)
        self.has_line = np.zeros(n, dtype=bool)
        self.n_questions = np.zeros(n, dtype=np.int64)
        self.inquired = np.zeros((n, self.kb.n_roots), dtype=bool)
        self._rows: list[int] = []
        self._cols: list[int] = []
        self._masses: list[float] = []
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.extra: dict[str, int] = {}
        self.unknown_names: set[str] = set()
        self.unknown_codes: set[str] = set()
        self.repeated_questions = np.zeros(n, dtype=bool)
        # Name -> column and code -> root (or None), looked up once per distinct string.
        self._columns: dict[str, int] = {}
        self._roots: dict[str, int | None] = {}

    def _column(self, name: str) -> int:
        column = self._columns.get(name)
        if column is not None:
            return column
        found = self.kb.pathology_index(name)
        if found is None:
            self.unknown_names.add(name)
            found = self.kb.n_pathologies + self.extra.setdefault(name, len(self.extra))
        self._columns[name] = found
        return found

    def add(self, position: int, entries: Iterable[tuple[str, float]], inquired: Iterable[str]) -> None:
        """Record one patient's prediction. Raises ValueError for a second prediction or a pathology named twice
        (e.g. by its English and its French name)."""
        if self.has_line[position]:
            raise ValueError(f"patient {int(self.patients.rows[position])} already has a prediction")
        seen: set[int] = set()
        for name, mass in entries:
            column = self._column(name)
            if column in seen:
                raise ValueError(_twice(self.kb, column, name))
            seen.add(column)
            self._rows.append(position)
            self._cols.append(column)
            self._masses.append(mass)
        self.has_line[position] = True
        self.inquired[position, self.patients.initial_root[position]] = True
        count = 0
        roots = self._roots
        asked: set[int] = set()
        for code in inquired:
            count += 1
            if code in roots:
                root = roots[code]
            else:
                root = roots[code] = self.kb.root_index.get(root_of(code))
            if root is None:
                self.unknown_codes.add(code)
            elif root in asked:
                self.repeated_questions[position] = True
            else:
                asked.add(root)
                self.inquired[position, root] = True
        self.n_questions[position] = count

    def add_lines(self, positions: np.ndarray, counts: np.ndarray, names: tuple[np.ndarray, list[str]],
                  masses: np.ndarray, questions: np.ndarray, codes: tuple[np.ndarray, list[str]]) -> None:
        """``add`` for many patients at once, in order: the patient at ``positions[i]`` lists ``counts[i]`` entries
        and ``questions[i]`` inquired codes. ``names`` and ``codes`` are (per entry, index into the distinct
        strings; the distinct strings)."""
        positions = np.asarray(positions, dtype=np.int64)
        clash = self.has_line[positions].copy()
        clash[np.setdiff1d(np.arange(len(positions)), np.unique(positions, return_index=True)[1])] = True
        if clash.any():
            raise ValueError(f"patient {int(self.patients.rows[positions[np.argmax(clash)]])} already has a prediction")
        name_codes, name_table = names
        column_of = np.array([-1 if (c := self.kb.pathology_index(name)) is None else c for name in name_table],
                             dtype=np.int64)
        columns = column_of[name_codes]
        unknown = np.flatnonzero(columns < 0)
        if len(unknown):
            # Names outside the KB get extra columns in the order they first appear, as with add().
            distinct_unknown, first = np.unique(name_codes[unknown], return_index=True)
            for code in distinct_unknown[np.argsort(first)].tolist():
                column_of[code] = self._column(name_table[code])
            columns = column_of[name_codes]
        owner = np.repeat(np.arange(len(positions)), counts)
        repeated = _repeated(owner, columns, len(positions))
        if repeated.any():
            listed: set[int] = set()
            for entry in np.flatnonzero(owner == np.argmax(repeated)).tolist():
                if int(columns[entry]) in listed:
                    raise ValueError(_twice(self.kb, int(columns[entry]), name_table[name_codes[entry]]))
                listed.add(int(columns[entry]))
        self._chunks.append((positions[owner], columns, np.asarray(masses, dtype=np.float64)))
        self.has_line[positions] = True
        self.inquired[positions, self.patients.initial_root[positions]] = True
        code_codes, code_table = codes
        root_of_code = np.array([self.kb.root_index.get(root_of(code), -1) for code in code_table], dtype=np.int64)
        roots = root_of_code[code_codes]
        known = roots >= 0
        self.unknown_codes.update(code_table[code] for code in np.unique(code_codes[~known]).tolist())
        asker = np.repeat(np.arange(len(positions)), questions)[known]
        self.repeated_questions[positions] |= _repeated(asker, roots[known], len(positions))
        self.inquired[positions[asker], roots[known]] = True
        self.n_questions[positions] = questions

    def build(self, warnings: list[str] | None = None) -> Predictions:
        rows = np.concatenate([np.asarray(self._rows, dtype=np.int64)] + [chunk[0] for chunk in self._chunks])
        cols = np.concatenate([np.asarray(self._cols, dtype=np.int64)] + [chunk[1] for chunk in self._chunks])
        masses = np.concatenate([np.asarray(self._masses, dtype=np.float64)] + [chunk[2] for chunk in self._chunks])
        # Group by patient; the stable sort keeps each patient's listing order.
        grouped = np.argsort(rows, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(self.patients)))])
        normalised, rescaled = ddx_metrics.normalised_masses(bounds, masses[grouped])
        entries = ddx_metrics.Entries(bounds=bounds, col=cols[grouped], mass=normalised)
        # Rows never given stay at their defaults: no mass, and the initial evidence as the only inquired root.
        missing = np.flatnonzero(~self.has_line)
        self.inquired[missing, self.patients.initial_root[missing]] = True
        notes = list(warnings or [])
        if missing.size:
            shown = ", ".join(str(int(self.patients.rows[i])) for i in missing[:10])
            more = "" if missing.size <= 10 else f" and {missing.size - 10} more"
            notes.append(f"{missing.size} patient(s) have no prediction line (rows {shown}{more}); each counts as "
                         "an empty differential with no questions (IL = 1).")
        if rescaled.any():
            notes.append(f"{int(rescaled.sum())} differential(s) do not sum to 1 (given in percent, or unnormalised "
                         "scores); each was normalised to sum 1 before the 0.01 cut, as the official agents' softmax "
                         "output is.")
        if self.repeated_questions.any():
            notes.append(f"{int(self.repeated_questions.sum())} patient(s) inquire the same evidence more than once; "
                         "each repeat counts as a turn (IL) and once in PER, as the official compute_metrics does.")
        if self.unknown_names:
            notes.append(f"{len(self.unknown_names)} predicted name(s) are not pathologies of the KB "
                         f"({', '.join(sorted(self.unknown_names)[:5])}); they count in the predicted set only.")
        if self.unknown_codes:
            notes.append(f"{len(self.unknown_codes)} inquired code(s) are not KB evidences "
                         f"({', '.join(sorted(self.unknown_codes)[:5])}); they count as turns only.")
        return Predictions(entries=entries, inquired=ddx_metrics.pack_roots(self.inquired),
                           n_questions=self.n_questions,
                           has_line=self.has_line, extra_names=list(self.extra), warnings=notes)


def _parse_line(line: str, where: str, total_rows: int, seen: set[int] | None) -> tuple[int, list, list]:
    """One line read as the format says, with every check in order: (index, entries, inquired). ``seen``: the
    indices of the lines before (None: the caller checks repeats itself)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PredictionFileError(f"{where} is not valid JSON ({exc.msg}).") from None
    except RecursionError:
        raise PredictionFileError(f"{where} is nested too deeply to be a prediction; write one flat object per "
                                  "line.") from None
    if not isinstance(record, dict) or "index" not in record or "differential" not in record:
        raise PredictionFileError(f"{where} needs an object with 'index' and 'differential'.")
    index = record["index"]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < total_rows:
        raise PredictionFileError(
            f"{where}: index {index!r} is not a row of the patients file (0 to {total_rows - 1})."
        )
    if seen is not None and index in seen:
        raise PredictionFileError(f"{where}: index {index} already has a prediction; keep one line each.")
    inquired = record.get("inquired", [])
    if not isinstance(inquired, list) or not all(isinstance(code, str) for code in inquired):
        raise PredictionFileError(f"{where}: 'inquired' must be a list of evidence codes.")
    entries = _entries(record["differential"], where)
    if len(inquired) > MAX_QUESTIONS:
        raise PredictionFileError(f"{where} inquires {len(inquired)} evidences; the protocol allows at most "
                                  f"{MAX_QUESTIONS} questions per patient, so this line cannot be scored.")
    return index, entries, inquired


def _twice(kb: KnowledgeBase, column: int, name: str) -> str:
    return f"the differential names {kb.pathology_names[column] if column < kb.n_pathologies else name!r} twice"


# Bulk reading of the documented layout. Separators between strings, with digits as d (``shape_table``), and
# what they are followed by: the key "index", the key "differential", a name, the key "inquired", a code, or the
# end of the block.
_KEY_INDEX, _KEY_DIFFERENTIAL, _NAME, _KEY_INQUIRED, _CODE, _END = range(6)
_W = rb"[ \t]*"
_COLON = _W + rb":" + _W
_NEXT_LINE = rb"\}[ \t]*\n(?:[ \t]*\n)*[ \t]*\{" + _W
_LAST_LINE = rb"\}[ \t]*(?:\n[ \t]*)*"
_MASS = _COLON + rb"-?d+(?:\.d+)?(?:[eE][-+]?d+)?" + _W
_SEPARATORS: list[tuple[bytes, int, int]] = [
    # (shape, what precedes it, what follows it)
    (rb"(?:[ \t]*\n)*[ \t]*\{" + _W, -1, _KEY_INDEX),
    (_COLON + rb"-?d+" + _W + rb"," + _W, _KEY_INDEX, _KEY_DIFFERENTIAL),
    (_COLON + rb"\{" + _W, _KEY_DIFFERENTIAL, _NAME),
    (_COLON + rb"\{" + _W + rb"\}" + _W + rb"," + _W, _KEY_DIFFERENTIAL, _KEY_INQUIRED),
    (_COLON + rb"\{" + _W + rb"\}" + _W + _NEXT_LINE, _KEY_DIFFERENTIAL, _KEY_INDEX),
    (_COLON + rb"\{" + _W + rb"\}" + _W + _LAST_LINE, _KEY_DIFFERENTIAL, _END),
    (_MASS + rb"," + _W, _NAME, _NAME),
    (_MASS + rb"\}" + _W + rb"," + _W, _NAME, _KEY_INQUIRED),
    (_MASS + rb"\}" + _W + _NEXT_LINE, _NAME, _KEY_INDEX),
    (_MASS + rb"\}" + _W + _LAST_LINE, _NAME, _END),
    (_COLON + rb"\[" + _W, _KEY_INQUIRED, _CODE),
    (_COLON + rb"\[" + _W + rb"\]" + _W + _NEXT_LINE, _KEY_INQUIRED, _KEY_INDEX),
    (_COLON + rb"\[" + _W + rb"\]" + _W + _LAST_LINE, _KEY_INQUIRED, _END),
    (_W + rb"," + _W, _CODE, _CODE),
    (_W + rb"\]" + _W + _NEXT_LINE, _CODE, _KEY_INDEX),
    (_W + rb"\]" + _W + _LAST_LINE, _CODE, _END),
]
_SEPARATOR_PATTERNS = [re.compile(shape) for shape, _, _ in _SEPARATORS]
_INDEX_SEPARATOR, _MASS_SEPARATOR = 1, 6
# Indexed by separator class; the last cell (class -1) is for a separator of no class.
_PRECEDES = np.array([row[1] for row in _SEPARATORS] + [-2], dtype=np.int64)
_FOLLOWS = np.array([row[2] for row in _SEPARATORS] + [-3], dtype=np.int64)
_HOLDS_NUMBER = np.isin(_PRECEDES, [_KEY_INDEX, _NAME])
# The key a string must be, by what it is (None: any string), and the arrays a file's lines become.
_KEY_OF_ROLE = ["index", "differential", None, "inquired", None, None]
_LINE_ARRAYS = {"line": np.int64, "index": np.float64, "n_entries": np.int32, "names": np.int32,
                "masses": np.float64, "n_codes": np.int32, "codes": np.int32}
_JSON_SHAPES = shape_table(b"{}[]:, \t\n.eE+-")
_NEEDS_DECODING = re.compile(r"[\x00-\x1f\\]")
_BLOCK_CHARS = 1 << 22


def _take(items: list[str], at: np.ndarray) -> list[str]:
    if len(at) < 2:
        return [items[i] for i in at.tolist()]
    return list(itemgetter(*at.tolist())(items))


def _decode(raw: str) -> str | None:
    """A JSON string's text from between its quotes; None if it is not one (a quote ends it early, say)."""
    if not _NEEDS_DECODING.search(raw):
        return raw
    try:
        return json.loads(f'"{raw}"')
    except json.JSONDecodeError:
        return None




class _Lines:
    """Every prediction line of a file, as arrays in line order: those in the documented layout read in bulk, the
    others through ``_parse_line``."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.codes: dict[str, int] = {}
        self.parts: dict[str, list[np.ndarray]] = {key: [] for key in _LINE_ARRAYS}
        self.slow: dict[int, str] = {}
        self.first_error: int | None = None
        # Per distinct separator shape, over all blocks: its class, and whether its number is an integer.
        self.kinds: dict[bytes, tuple[int, bool]] = {}

    @staticmethod
    def _intern(table: dict[str, int], texts: list[str | None], used: np.ndarray) -> np.ndarray:
        """``used`` (indices into ``texts``) as ids in ``table``, adding the texts it lacks; -1 for None."""
        ids = np.full(len(texts), -1, dtype=np.int32)
        for i in np.flatnonzero(np.bincount(used, minlength=len(texts))).tolist():
            text = texts[i]
            if text is not None:
                ids[i] = table.setdefault(text, len(table))
        return ids[used]

    def _kind(self, shape: bytes) -> tuple[int, bool]:
        found = self.kinds.get(shape)
        if found is None:
            kind = next((k for k, pattern in enumerate(_SEPARATOR_PATTERNS) if pattern.fullmatch(shape)), -1)
            found = self.kinds[shape] = kind, re.search(rb"[.eE]", shape) is None
        return found

    def block(self, text: str, first_line: int) -> None:
        n_lines = text.count("\n") + (not text.endswith("\n"))
        if "\x00" in text or "\x01" in text:
            self._without(text, first_line, [i for i, line in enumerate(text.split("\n"))
                                             if "\x00" in line or "\x01" in line])
            return
        # Codes listed as json.dumps writes them ("E_91", "E_53") become one string, split at \x01 below: a third
        # fewer pieces. Only a list of strings has '", "', so anywhere else the \x01 marks the line as bad.
        pieces = text.replace('", "', "\x01").split('"')
        outside = pieces[0::2]
        shape_codes, distinct_shapes, joined = shapes(outside, _JSON_SHAPES)
        newlines = np.array([shape.count(b"\n") for shape in distinct_shapes], dtype=np.int64)[shape_codes]
        if len(pieces) % 2 == 0 or int(newlines.sum()) != text.count("\n"):
            # A line with an odd number of quotes: strings would run across lines.
            self._without(text, first_line, [i for i, line in enumerate(text.split("\n")) if line.count('"') % 2])
            return
        ends = np.cumsum(newlines)
        starts = ends - newlines
        kinds = [self._kind(shape) for shape in distinct_shapes]
        kind = np.array([k for k, _ in kinds], dtype=np.int64)[shape_codes]
        kind[1:][kind[1:] == 0] = -1
        if kind[0] > 0:
            kind[0] = -1
        # ": 5, " is the index after "index" and an integer mass after a name: the separator before says which.
        index_like = np.flatnonzero(kind[1:] == _INDEX_SEPARATOR) + 1
        kind[index_like[_FOLLOWS[kind[index_like - 1]] != _KEY_INDEX]] = _MASS_SEPARATOR
        precedes, follows = _PRECEDES[kind], _FOLLOWS[kind]
        role = follows[:-1]
        inside = pieces[1::2]
        del pieces
        lists = np.flatnonzero(role == _CODE)
        singles = np.flatnonzero(role != _CODE)
        single_of, single_raw = distinct(_take(inside, singles))
        decoded = [None if "\x01" in value else _decode(value) for value in single_raw]
        code_lists = _take(inside, lists)
        del inside
        per_list = np.fromiter(map(methodcaller("count", "\x01"), code_lists), dtype=np.int64,
                               count=len(code_lists)) + 1
        code_of, code_raw = distinct("\x01".join(code_lists).split("\x01") if code_lists else [])
        del code_lists
        code_decoded = [_decode(value) for value in code_raw]
        # Bad separators, successions, strings and keys: their lines are left to json.loads.
        bad_piece = kind < 0
        bad_piece[-1] |= follows[-1] != _END
        bad_pair = precedes[1:] != role
        # Per distinct string: not a JSON string, or not the key its place needs.
        wrong = np.array([[text_ is None or (key is not None and text_ != key) for text_ in decoded]
                          for key in _KEY_OF_ROLE], dtype=bool).reshape(len(_KEY_OF_ROLE), len(decoded))
        bad_string = np.zeros(len(role), dtype=bool)
        bad_string[singles] = wrong[np.where(role[singles] >= 0, role[singles], _END), single_of]
        list_of_code = np.repeat(np.arange(len(lists)), per_list)
        undecodable = np.array([text_ is None for text_ in code_decoded], dtype=bool)[code_of]
        bad_string[lists] = np.bincount(list_of_code[undecodable], minlength=len(lists)) > 0
        numbers = parse_numbers(joined, outside, ~bad_piece, strict_json=True)
        del joined, outside
        # NaN where a number should be: one JSON does not allow.
        bad_piece |= _HOLDS_NUMBER[kind] & np.isnan(numbers)
        # A separator of no class spoils every line it touches; a string, or a string and the separator after it
        # that do not go together, spoil the string's line.
        bad_strings = ends[:-1][bad_string | bad_pair]
        bad_line = spans(n_lines, np.concatenate([starts[bad_piece], bad_strings]),
                         np.concatenate([ends[bad_piece], bad_strings]))

        record = np.cumsum(role == _KEY_INDEX) - 1
        records = np.flatnonzero(role == _KEY_INDEX)
        record_line = ends[:-1][records]
        # Strings before the block's first record sit on bad lines; the records own the rest.
        names = np.flatnonzero((role == _NAME) & (record >= 0))
        name_ids = self._intern(self.names, decoded, single_of[np.searchsorted(singles, names)])
        # JSON keeps the last of two equal keys: such a line is left to json.loads.
        bad_line[record_line[_repeated(record[names], np.maximum(name_ids, 0), len(records))]] = True
        ok = ~bad_line[record_line]
        keep_name = ok[record[names]]
        masses = numbers[names + 1]
        whole = np.array([integer for _, integer in kinds], dtype=bool)[shape_codes[names + 1]]
        # A JSON integer is an int: 0 and -0 are both 0.0 once read as a mass.
        masses[whole & (masses == 0)] = 0.0
        list_record = record[lists]
        owned = list_record >= 0
        list_kept = np.zeros(len(lists), dtype=bool)
        list_kept[owned] = ok[list_record[owned]]
        keep_code = np.repeat(list_kept, per_list)
        self.parts["line"].append((first_line + record_line[ok]).astype(np.int64))
        self.parts["index"].append(numbers[records + 1][ok])
        self.parts["n_entries"].append(np.bincount(record[names], minlength=len(records))[ok].astype(np.int32))
        self.parts["names"].append(name_ids[keep_name])
        self.parts["masses"].append(masses[keep_name])
        self.parts["n_codes"].append(np.bincount(list_record[owned], weights=per_list[owned],
                                                 minlength=len(records))[ok].astype(np.int32))
        self.parts["codes"].append(self._intern(self.codes, code_decoded, code_of)[keep_code])
        if bad_line.any():
            lines = text.split("\n")
            for i in np.flatnonzero(bad_line).tolist():
                self.slow.setdefault(first_line + i, lines[i])

    def _without(self, text: str, first_line: int, odd: list[int]) -> None:
        """``block`` with the ``odd`` lines blanked, and those lines left to json.loads."""
        lines = text.split("\n")
        for i in odd:
            self.slow.setdefault(first_line + i, lines[i])
            lines[i] = ""
        self.block("\n".join(lines), first_line)

    def read_slow(self, name: str, total_rows: int) -> None:
        """The lines outside the layout, through ``_parse_line``, up to the first that fails."""
        rows: dict[str, list[Any]] = {key: [] for key in _LINE_ARRAYS}
        for number, line in sorted(self.slow.items()):
            if not line.strip():
                continue
            try:
                index, entries, inquired = _parse_line(line, f"{name} line {number}", total_rows, None)
            except PredictionFileError:
                self.first_error = number
                break
            rows["line"].append(number)
            rows["index"].append(index)
            rows["n_entries"].append(len(entries))
            rows["names"].extend(self.names.setdefault(entry, len(self.names)) for entry, _ in entries)
            rows["masses"].extend(mass for _, mass in entries)
            rows["n_codes"].append(len(inquired))
            rows["codes"].extend(self.codes.setdefault(code, len(self.codes)) for code in inquired)
        for key, values in rows.items():
            self.parts[key].append(np.asarray(values, dtype=_LINE_ARRAYS[key]))

    def arrays(self) -> dict[str, np.ndarray]:
        """All lines in line order."""
        parts = {key: np.concatenate(self.parts.pop(key), dtype=dtype) for key, dtype in _LINE_ARRAYS.items()}
        if np.all(np.diff(parts["line"]) > 0):
            return parts
        order = np.argsort(parts["line"], kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        for counts, key in (("n_entries", "names"), ("n_entries", "masses"), ("n_codes", "codes")):
            parts[key] = parts[key][np.argsort(np.repeat(rank, parts[counts]), kind="stable")]
        for key in ("line", "index", "n_entries", "n_codes"):
            parts[key] = parts[key][order]
        return parts


def _first_undecodable_line(path: Path) -> int:
    data = path.read_bytes()
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return undecodable_line(data, exc)
    raise AssertionError(f"{path} decodes as UTF-8")


def _line_at(path: Path, number: int) -> str:
    with path.open(encoding="utf-8-sig") as handle:
        for at, line in enumerate(handle, start=1):
            if at == number:
                return line
    raise AssertionError(f"{path} has no line {number}")


def _read_lines(path: Path) -> _Lines:
    """Every line of the file in bulk (the lines outside the layout kept for ``read_slow``); needs no patients."""
    lines = _Lines()
    first_line = 1
    # Decoded as iterating over the file would: BOM dropped, newlines translated.
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for text in text_blocks(handle, _BLOCK_CHARS):
                lines.block(text, first_line)
                first_line += text.count("\n")
    except UnicodeDecodeError:
        raise PredictionFileError(f"{path.name} line {_first_undecodable_line(path)} is not UTF-8 text; save the "
                                  "predictions as UTF-8 JSON Lines.") from None
    return lines


@contextmanager
def lines_read_aside(path: str | Path) -> Iterator[Callable[[], _Lines] | None]:
    """The prediction file's lines read by a forked process while the caller does something else (``score
    ddxplus`` loads the patients meanwhile: on two cores the two files are read at once). Gives the function that
    waits for them, or None where there is no ``fork`` or no such file (then ``read_predictions`` reads, and
    refuses, as usual). A read that fails in the child is done again by the caller, for its error."""
    path = Path(path)
    if "fork" not in multiprocessing.get_all_start_methods() or not path.is_file():
        yield None
        return
    readable, writable = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked reader; its result is checked in the parent
        os.close(readable)
        try:
            payload = pickle.dumps(_read_lines(path), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # noqa: BLE001 - the caller reads the file again and raises the error itself
            payload = b""
        try:
            with os.fdopen(writable, "wb") as out:
                out.write(payload)
        finally:
            os._exit(0)
    os.close(writable)
    incoming = os.fdopen(readable, "rb")

    def result() -> _Lines:
        payload = incoming.read()
        return pickle.loads(payload) if payload else _read_lines(path)

    try:
        yield result
    finally:
        incoming.close()  # a child still writing (the caller stopped early) gets a broken pipe and exits
        os.waitpid(child, 0)


def read_predictions(path: str | Path, patients: PatientSet,
                     lines_aside: Callable[[], _Lines] | None = None) -> Predictions:
    """The predictions of ``path`` aligned with ``patients``; ``lines_aside``: the lines ``lines_read_aside`` is
    reading."""
    path = Path(path)
    if not path.is_file():
        raise PredictionFileError(f"{path} does not exist; give a JSON Lines file with one prediction per patient.")
    total_rows = patients.report.total_rows
    lines = lines_aside() if lines_aside is not None else _read_lines(path)
    lines.read_slow(path.name, total_rows)
    parts = lines.arrays()
    index, line = parts["index"], parts["line"]
    name_table, code_table = list(lines.names), list(lines.codes)

    # Every check the line-by-line reading makes, over all lines at once; the first line that fails any is read
    # again by _parse_line (with the indices seen before it) for its message.
    in_range = (index >= 0) & (index < total_rows) & (index == np.floor(index))
    row = np.where(in_range, index, -1).astype(np.int64)
    # Row -1 (an index out of range) lands in a spare last cell.
    first_of_row = np.full(total_rows + 1, np.iinfo(np.int64).max)
    np.minimum.at(first_of_row, row, line)
    again = in_range & (first_of_row[row] < line)
    entry_owner = np.repeat(np.arange(len(line)), parts["n_entries"])
    masses = parts["masses"]
    finite = np.bincount(entry_owner[~(np.isfinite(masses) & (masses >= 0))], minlength=len(line)) == 0
    position_of_row = np.full(total_rows + 1, -1, dtype=np.int64)
    position_of_row[patients.rows] = np.arange(len(patients))
    position = position_of_row[row]
    scored = in_range & ~again & finite & (position >= 0)
    column_of = np.array([-1 if (c := patients.kb.pathology_index(name)) is None else c for name in name_table],
                         dtype=np.int64)
    columns = column_of[parts["names"]]
    known = columns >= 0
    twice = _repeated(entry_owner[known], columns[known], len(line)) & scored
    failing = np.flatnonzero(~in_range | again | ~finite | twice | (parts["n_codes"] > MAX_QUESTIONS))
    candidates = [int(line[failing[0]])] if len(failing) else []
    if lines.first_error is not None:
        candidates.append(lines.first_error)
    if candidates:
        _raise_for(path, min(candidates), patients, set(row[line < min(candidates)].tolist()))

    scored_entries = scored[entry_owner]
    scored_codes = scored[np.repeat(np.arange(len(line)), parts["n_codes"])]
    builder = PredictionBuilder(patients)
    builder.add_lines(position[scored], parts["n_entries"][scored], (parts["names"][scored_entries], name_table),
                      parts["masses"][scored_entries], parts["n_codes"][scored],
                      (parts["codes"][scored_codes], code_table))
    skipped = int(np.count_nonzero(in_range & (position < 0)))
    warnings = []
    if skipped:
        warnings.append(f"{skipped} prediction line(s) are for rows the loader skipped; they are ignored.")
    return builder.build(warnings)


def _raise_for(path: Path, number: int, patients: PatientSet, seen: set[int]) -> None:
    """Raise the error of line ``number`` as reading the file line by line would, given the indices before it."""
    where = f"{path.name} line {number}"
    index, entries, _ = _parse_line(_line_at(path, number), where, patients.report.total_rows, seen)
    kb = patients.kb
    columns: set[int] = set()
    for name, _ in entries:
        column = kb.pathology_index(name)
        if column is not None and column in columns:
            raise PredictionFileError(f"{where}: {_twice(kb, column, name)}.")
        if column is not None:
            columns.add(column)
    raise AssertionError(f"{where} passes every check on its own (index {index})")


def score(patients: PatientSet, predictions: Predictions) -> ScoreReport:
    values = ddx_metrics.per_patient(patients.truth, predictions.entries, predictions.inquired,
                                     predictions.n_questions)
    return ScoreReport(
        metrics=ddx_metrics.mean_metrics(values),
        n_patients=len(patients),
        per_patient=values,
        per_pathology=ddx_metrics.breakdown(values, patients.pathology, patients.kb.pathology_names),
        warnings=predictions.warnings,
    )


def format_table(rows: dict[str, dict[str, float]]) -> str:
    """Metrics as a fixed-width table, one labelled row each (the reference rows print beside a run's); a metric
    a row lacks (a source that does not report it) shows as '-'."""
    width = max([12, *(len(label) + 1 for label in rows)])
    header = f"{'':<{width}}" + "".join(f"{key:>9}" for key in ddx_metrics.METRIC_KEYS)
    lines = [header]
    for label, metrics in rows.items():
        lines.append(f"{label:<{width}}" + "".join(f"{metrics[key]:>9.2f}" if key in metrics else f"{'-':>9}"
                                                   for key in ddx_metrics.METRIC_KEYS))
    return "\n".join(lines)
