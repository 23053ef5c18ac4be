"""DDXPlus patient files: the official CSV (or the release zip), read into arrays the metrics and agents use.

Columns: ``AGE, DIFFERENTIAL_DIAGNOSIS, SEX, PATHOLOGY, EVIDENCES, INITIAL_EVIDENCE``; list cells are Python
literals. A row that cannot be trusted (unknown code, malformed list cell, pathology missing from the KB, ...) is
skipped and counted in a readable ``LoadReport``; loading never stops on a bad row. ``PatientSet.rows`` keeps
each loaded patient's 0-based row in the file, which is what prediction files refer to.

Reading is columnar, so that the 134,529-patient test split loads in about a second and stays compact:
- The file is read in blocks of whole lines. A block in the released layout (its header, then rows
  ``AGE,"[[...]]",SEX,PATHOLOGY,"[...]",INITIAL``) is cut into cells by splitting on the CSV quote; a file in
  any other layout is read with the csv module instead.
- Each rule runs once per distinct value, not once per row: ages, sexes, pathologies, codes and the separators
  between list items repeat (a few thousand distinct values over 134,529 rows).
- The list cells of a block are split on the Python quote by Arrow's kernels (``pyarrow.compute``, no Python
  object per piece): the pieces inside quotes are the codes or names, made distinct there; a cell must be spelt
  the way ``repr`` writes lists (one RE2 match per cell), and its masses are cast by Arrow in one go.
- A row that fails any of these bulk checks is read again by the row parser, which holds every rule and every
  skip reason, and also accepts list cells in other literal spellings (``ast.literal_eval``). The bulk checks
  only ever accept what the row parser accepts, with the same values, so the result is the row parser's.
- Evidence lists and differentials stay flat arrays (``Listings``); ``patient(i)`` builds one
  ``DDXPlusPatient`` when asked.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
import logging
import math
import multiprocessing
import os
import re
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, cached_property
from itertools import count, islice, pairwise
from pathlib import Path
from typing import Any, overload

import numpy as np

from medeval_core.benchmarks.ddxplus import kb as kb_module
from medeval_core.benchmarks.ddxplus.kb import VALUE_SEPARATOR, KnowledgeBase
from medeval_core.benchmarks.ddxplus.metrics import Entries, GroundTruth
from medeval_core.data.files import SKIP_REMEDY, replaced_in_one_step, sha256_of, text_blocks
from medeval_core.memory import gc_paused
from medeval_core.records import Case, CaseList
from medeval_core.settings import cache_dir

logger = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("AGE", "DIFFERENTIAL_DIAGNOSIS", "SEX", "PATHOLOGY", "EVIDENCES", "INITIAL_EVIDENCE")
SEXES = ("M", "F")

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_QUOTED = r"'[^'\\]*'"
_EVIDENCE_CELL = re.compile(rf"\[\s*(?:{_QUOTED}\s*(?:,\s*{_QUOTED}\s*)*,?\s*)?\]")
_EVIDENCE_ITEM = re.compile(r"'([^'\\]*)'")
_PAIR = rf"\[\s*{_QUOTED}\s*,\s*{_NUMBER}\s*\]"
_DIFFERENTIAL_CELL = re.compile(rf"\[\s*(?:{_PAIR}\s*(?:,\s*{_PAIR}\s*)*,?\s*)?\]")
_DIFFERENTIAL_ITEM = re.compile(rf"\[\s*'([^'\\]*)'\s*,\s*({_NUMBER})\s*\]")

# About 4 MB of text (16k rows) per block: temporaries stay small and Python-level steps stay few.
_BLOCK_CHARS = 1 << 22
_BLOCK_ROWS = 1 << 14
# The released layout. A row's plain fields hold no quote, comma or line break; quoted fields hold no quote.
_FIELD = r'[^",\r\n]*'
_LAYOUT_FIRST = re.compile(rf"({_FIELD}),")
_LAYOUT_MIDDLE = re.compile(rf",({_FIELD}),({_FIELD}),")
_LAYOUT_BETWEEN = re.compile(rf",({_FIELD})(?:\r?\n)+({_FIELD}),")
_LAYOUT_LAST = re.compile(rf",({_FIELD})(?:\r?\n)*")


# Bulk text helpers (the prediction reader's; the loader uses distinct and spans too) ----------------------------


def distinct(pieces: Sequence[Hashable]) -> tuple[np.ndarray, list[Any]]:
    """Each piece's index among the distinct pieces (first-seen order), and the distinct pieces. The loop is
    ``map`` over a ``defaultdict``: C speed, one hash per piece."""
    index: defaultdict[Hashable, int] = defaultdict(count().__next__)
    codes = np.fromiter(map(index.__getitem__, pieces), dtype=np.int64, count=len(pieces))
    return codes, list(index)


def spans(n: int, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """(n,) bool, True on every row from ``first[i]`` to ``last[i]`` (inclusive, clipped to n - 1)."""
    marks = np.zeros(n + 1, dtype=np.int64)
    np.add.at(marks, np.minimum(first, n), 1)
    np.add.at(marks, np.minimum(last + 1, n), -1)
    return np.cumsum(marks[:-1]) > 0


# Records -----------------------------------------------------------------------------------------------------


class PatientFileError(ValueError):
    """The patients file cannot be read at all (missing, wrong columns, empty archive)."""


class DDXPlusPatient(Case):
    """One simulated patient, as the file gives it. ``case_id`` is ``row-<0-based row in the file>``."""

    row: int
    age: int
    sex: str
    pathology: str
    initial_evidence: str
    evidences: tuple[str, ...]
    differential: tuple[tuple[str, float], ...]


_PATIENT_FIELDS = frozenset(DDXPlusPatient.model_fields)


def _construct_patient(row: int, age: int, sex: str, pathology: str, initial: str, evidences: tuple[str, ...],
                       differential: tuple[tuple[str, float], ...]) -> DDXPlusPatient:
    """A ``DDXPlusPatient`` from values of the right types, as pydantic's ``model_construct`` builds it (the
    instance state without validation), at a fifth of its cost."""
    patient = object.__new__(DDXPlusPatient)
    object.__setattr__(patient, "__dict__", {
        "case_id": f"row-{row}", "row": row, "age": age, "sex": sex, "pathology": pathology,
        "initial_evidence": initial, "evidences": evidences, "differential": differential})
    object.__setattr__(patient, "__pydantic_fields_set__", set(_PATIENT_FIELDS))
    object.__setattr__(patient, "__pydantic_extra__", None)
    object.__setattr__(patient, "__pydantic_private__", None)
    return patient


def _validated_patient(row: int, age: int, sex: str, pathology: str, initial: str, evidences: tuple[str, ...],
                       differential: tuple[tuple[str, float], ...]) -> DDXPlusPatient:
    return DDXPlusPatient(case_id=f"row-{row}", row=row, age=age, sex=sex, pathology=pathology,
                          initial_evidence=initial, evidences=evidences, differential=differential)


def _choose_patient_record() -> Callable[..., DDXPlusPatient]:
    """The fast constructor when it gives exactly what validation gives under the installed pydantic, else
    validation."""
    values = (3, 40, "F", "URTI", "E_91", ("E_91", "E_54_@_V_161"), (("URTI", 0.5), ("Bronchitis", 0.25)))
    try:
        fast, checked = _construct_patient(*values), _validated_patient(*values)
        same = (fast == checked and hash(fast) == hash(checked) and fast.model_dump() == checked.model_dump()
                and fast.model_fields_set == checked.model_fields_set)
    except Exception:  # noqa: BLE001 - any difference in pydantic's internals means: validate
        same = False
    return _construct_patient if same else _validated_patient


_patient_record = _choose_patient_record()


class _BadRow(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class _Irregular(Exception):
    """The file is not in the released layout: read it with the csv module instead."""


@dataclass
class LoadReport:
    """What a load kept and skipped, with why. ``summary()`` is the sentence shown to users."""

    source: str
    total_rows: int = 0
    loaded: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    first_skipped: list[tuple[int, str]] = field(default_factory=list)
    """The first skipped rows (0-based row, why), at most ``max_examples``."""
    max_examples: int = 10

    def skip(self, row: int, error: _BadRow) -> None:
        self.skipped[error.reason] += 1
        if len(self.first_skipped) < self.max_examples:
            self.first_skipped.append((row, error.detail))

    @property
    def examples(self) -> list[str]:
        return [f"row {row}: {detail}" for row, detail in self.first_skipped]

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    def refuse_skipped(self, path: Path | str) -> None:
        """Raise PatientFileError naming the first skipped row's line (a DDXPlus row is one line, after the
        header) and why, when any row was skipped: a bad row refuses the file unless the run asked to skip it."""
        if self.first_skipped:
            row, detail = self.first_skipped[0]
            more = f" ({self.n_skipped - 1} more bad rows after it)" if self.n_skipped > 1 else ""
            raise PatientFileError(f"{path} line {row + 2}: {detail}{more}; {SKIP_REMEDY}.")

    def summary(self) -> str:
        head = f"{self.source}: loaded {self.loaded} of {self.total_rows} patients"
        if not self.n_skipped:
            return head + "."
        reasons = "; ".join(f"{count} {reason}" for reason, count in self.skipped.most_common())
        examples = "\n".join(f"  {line}" for line in self.examples)
        return f"{head}; skipped {self.n_skipped} ({reasons}). First skipped rows:\n{examples}"


class Listings(Sequence[tuple]):
    """One tuple per patient, stored flat: patient i's entries are ``codes[bounds[i]:bounds[i + 1]]``, shown as
    ``labels[code]``, paired with ``masses`` when there are masses. The tuples are built when asked for."""

    def __init__(self, bounds: np.ndarray, codes: np.ndarray, labels: Sequence[str],
                 masses: np.ndarray | None = None) -> None:
        self.bounds = bounds
        self.codes = codes
        self.labels = labels
        self.masses = masses

    @classmethod
    def from_counts(cls, counts: np.ndarray, codes: np.ndarray, labels: Sequence[str],
                    masses: np.ndarray | None = None) -> Listings:
        return cls(np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]), codes, labels, masses)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @overload
    def __getitem__(self, i: int) -> tuple: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple]: ...

    def __getitem__(self, i: int | slice) -> tuple | list[tuple]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError("patient index out of range")
        i %= len(self)
        start, stop = int(self.bounds[i]), int(self.bounds[i + 1])
        names = [self.labels[c] for c in self.codes[start:stop].tolist()]
        if self.masses is None:
            return tuple(names)
        return tuple(zip(names, self.masses[start:stop].tolist(), strict=True))

    def all(self) -> list[tuple]:
        """Every patient's tuple, built in one pass (labels looked up over the whole flat array at once)."""
        names = np.asarray(self.labels, dtype=object)[self.codes].tolist()
        bounds = self.bounds.tolist()
        entries: list[Any] = names if self.masses is None else list(zip(names, self.masses.tolist(), strict=True))
        return [tuple(entries[start:stop]) for start, stop in pairwise(bounds)]

    def owners(self) -> np.ndarray:
        """The patient of every flat entry."""
        return np.repeat(np.arange(len(self)), np.diff(self.bounds))

    def positions(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bounds and the flat positions of the entries of the patients at ``index``, in that order."""
        starts = self.bounds[:-1][index]
        counts = self.bounds[1:][index] - starts
        bounds = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        return bounds, np.repeat(starts - bounds[:-1], counts) + np.arange(bounds[-1])

    def take(self, index: np.ndarray) -> Listings:
        """The listings of the patients at ``index``, in that order."""
        bounds, positions = self.positions(index)
        return Listings(bounds, self.codes[positions], self.labels,
                        None if self.masses is None else self.masses[positions])


def _parse_evidence_cell(cell: str) -> list[str]:
    if _EVIDENCE_CELL.fullmatch(cell):
        return _EVIDENCE_ITEM.findall(cell)
    try:
        value = ast.literal_eval(cell)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise _BadRow("malformed list cell", f"EVIDENCES is not a list literal: {cell[:60]!r}") from None
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise _BadRow("malformed list cell", f"EVIDENCES is not a list of codes: {cell[:60]!r}")
    return list(value)


def _parse_differential_cell(cell: str) -> list[tuple[str, float]]:
    if _DIFFERENTIAL_CELL.fullmatch(cell):
        return [(name, float(mass)) for name, mass in _DIFFERENTIAL_ITEM.findall(cell)]
    try:
        value = ast.literal_eval(cell)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise _BadRow("malformed list cell", f"DIFFERENTIAL_DIAGNOSIS is not a list literal: {cell[:60]!r}") from None
    pairs = []
    for entry in value if isinstance(value, list | tuple) else [None]:
        if (not isinstance(entry, list | tuple) or len(entry) != 2 or not isinstance(entry[0], str)
                or isinstance(entry[1], bool) or not isinstance(entry[1], int | float)):
            raise _BadRow("malformed list cell",
                          f"DIFFERENTIAL_DIAGNOSIS is not a list of [pathology, mass] pairs: {cell[:60]!r}")
        pairs.append((entry[0], float(entry[1])))
    return pairs


@dataclass
class PatientSet:
    """Loaded patients as arrays (one row per patient) plus the raw codes the simulator answers from."""

    kb: KnowledgeBase
    rows: np.ndarray
    age: np.ndarray
    sex: np.ndarray
    pathology: np.ndarray
    initial_root: np.ndarray
    evidences: Listings
    """Each patient's evidence codes (indexes into ``kb.items``) as listed in the file."""
    differential_pairs: Listings
    """Each patient's (pathology name as written, mass) pairs as listed in the file."""
    differential_columns: np.ndarray
    """The KB pathology of every entry of ``differential_pairs`` (flat, in the same order)."""
    report: LoadReport

    def __len__(self) -> int:
        return len(self.rows)

    # The matrices below are built from the flat listings when first used (the summary, an agent's training),
    # not when the file is loaded: a run's first patient does not wait for them.

    @cached_property
    def present(self) -> np.ndarray:
        """(patients x roots) bool: binary roots listed, non-binary roots with a value other than the default."""
        codes = self.evidences.codes
        positive = ~self.kb.item_is_default[codes]
        present = np.zeros((len(self), self.kb.n_roots), dtype=bool)
        present[self.evidences.owners()[positive], self.kb.item_root[codes[positive]]] = True
        return present

    def item_matrix(self) -> np.ndarray:
        """(patients x KB items) bool: the items each patient lists."""
        matrix = np.zeros((len(self), len(self.kb.items)), dtype=bool)
        matrix[self.evidences.owners(), self.evidences.codes] = True
        return matrix

    @cached_property
    def differential(self) -> np.ndarray:
        """(patients x pathologies) masses of the listed differentials; a pathology listed twice in one
        differential keeps its last mass, as when reading row by row."""
        owner, columns, masses = (self.differential_pairs.owners(), self.differential_columns,
                                  self.differential_pairs.masses)
        assert masses is not None, "differential listings carry masses"
        cell = owner * self.kb.n_pathologies + columns
        seen = np.zeros(len(self) * self.kb.n_pathologies, dtype=bool)
        seen[cell] = True
        if np.count_nonzero(seen) != len(cell):
            last = len(cell) - 1 - np.unique(cell[::-1], return_index=True)[1]
            owner, columns, masses = owner[last], columns[last], masses[last]
        del cell, seen
        differential = np.zeros((len(self), self.kb.n_pathologies))
        differential[owner, columns] = masses
        return differential

    @cached_property
    def truth(self) -> GroundTruth:
        """Ground truth thresholded once for the metrics (GT sets, true pathologies, present roots)."""
        return GroundTruth.prepare(self.kb.n_pathologies, Entries.from_dense(self.differential), self.pathology,
                                   self.present, tie_rank=self.kb.tie_rank)

    @cached_property
    def position(self) -> dict[int, int]:
        """File row -> position in this set."""
        return dict(zip(self.rows.tolist(), range(len(self.rows)), strict=True))

    def patient(self, i: int) -> DDXPlusPatient:
        return DDXPlusPatient(
            case_id=f"row-{int(self.rows[i])}",
            row=int(self.rows[i]),
            age=int(self.age[i]),
            sex=str(self.sex[i]),
            pathology=self.kb.pathology_names[int(self.pathology[i])],
            initial_evidence=self.kb.roots[int(self.initial_root[i])],
            evidences=self.evidences[i],
            differential=self.differential_pairs[i],
        )

    def cases(self, limit: int | None = None) -> list[DDXPlusPatient]:
        """The patients as cases, built in bulk: the columns converted once, the records built without
        validating again what the loader validated (134,529 patients in about 0.5 s instead of 4)."""
        subset = self if limit is None or limit >= len(self) else self.subset(np.arange(max(limit, 0)))
        names, roots = self.kb.pathology_names, self.kb.roots
        with gc_paused():  # many small acyclic objects: the collector would rescan them as they are made
            return [_patient_record(row, age, sex, names[pathology], roots[initial], evidences, differential)
                    for row, age, sex, pathology, initial, evidences, differential in zip(
                        subset.rows.tolist(), subset.age.tolist(), subset.sex.tolist(), subset.pathology.tolist(),
                        subset.initial_root.tolist(), subset.evidences.all(), subset.differential_pairs.all(),
                        strict=True)]

    def case_list(self) -> CaseList[DDXPlusPatient]:
        """The patients as cases built one at a time when the runner reaches them (as ``cases`` builds them):
        a run over the 134,529-patient split starts without building them all."""
        names, roots = self.kb.pathology_names, self.kb.roots

        def build(i: int) -> DDXPlusPatient:
            return _patient_record(int(self.rows[i]), int(self.age[i]), str(self.sex[i]),
                                   names[int(self.pathology[i])], roots[int(self.initial_root[i])],
                                   self.evidences[i], self.differential_pairs[i])

        return CaseList([f"row-{row}" for row in self.rows.tolist()], build)

    def subset(self, positions: Sequence[int] | np.ndarray) -> PatientSet:
        index = np.asarray(positions, dtype=np.int64)
        _, entries = self.differential_pairs.positions(index)
        return PatientSet(
            kb=self.kb, rows=self.rows[index], age=self.age[index], sex=self.sex[index],
            pathology=self.pathology[index], initial_root=self.initial_root[index],
            evidences=self.evidences.take(index), differential_pairs=self.differential_pairs.take(index),
            differential_columns=self.differential_columns[entries], report=self.report,
        )

    def replicate(self, times: int, total: int | None = None) -> PatientSet:
        """The set repeated (rows renumbered), cut to ``total`` patients: a full-size stand-in for benchmarks."""
        index = np.tile(np.arange(len(self)), times)
        if total is not None:
            index = index[:total]
        copy = self.subset(index)
        copy.rows = np.arange(len(index), dtype=np.int64)
        copy.report = LoadReport(source=f"{self.report.source} replicated", total_rows=len(index), loaded=len(index))
        return copy


class _RowParser:
    """The rules for one row, field by field. ``parse`` reads a whole row (and is the rule book); the bulk reader
    applies the field rules to distinct values and sends every row it cannot vouch for to ``parse``."""

    def __init__(self, kb: KnowledgeBase, header: list[str]) -> None:
        self.kb = kb
        self.items = kb.item_index
        self.names = {name: kb.pathology_index(name) for name in kb.pathology_names}
        self.column = {name: header.index(name) for name in REQUIRED_COLUMNS}
        self.width = len(header)

    def pathology(self, name: str) -> int | None:
        index = self.names.get(name)
        return index if index is not None else self.kb.pathology_index(name)

    def bad_code(self, code: str) -> _BadRow:
        root, sep, value = code.partition(VALUE_SEPARATOR)
        evidence = self.kb.evidences.get(root)
        if evidence is None:
            return _BadRow("unknown evidence code", f"unknown evidence code {code!r}")
        if evidence.binary and sep:
            return _BadRow("unknown evidence code", f"{code!r} gives a value to the yes/no evidence {root}")
        if not evidence.binary and not sep:
            return _BadRow("unknown evidence code", f"{code!r} lacks a value for the evidence {root}")
        return _BadRow("unknown evidence code", f"{code!r}: {value!r} is not a possible value of {root}")

    def age(self, field_text: str) -> int:
        text = field_text.strip()
        try:
            value = float(text)
        except ValueError:
            raise _BadRow("bad age", f"AGE {text!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or value != int(value):
            raise _BadRow("bad age", f"AGE {text!r} is not a whole number of years")
        return int(value)

    def sex(self, field_text: str) -> str:
        sex = field_text.strip().upper()
        if sex not in SEXES:
            raise _BadRow("bad sex", f"SEX {field_text!r} is not M or F")
        return sex

    def true_pathology(self, field_text: str) -> int:
        pathology = self.pathology(field_text.strip())
        if pathology is None:
            raise _BadRow("pathology missing from the KB", f"pathology {field_text!r} is not in the KB")
        return pathology

    def initial(self, field_text: str) -> str:
        initial = field_text.strip()
        if initial not in self.kb.root_index:
            raise _BadRow("unknown evidence code", f"unknown initial evidence {initial!r}")
        return initial

    def parse(self, fields: list[str]) -> tuple:
        if len(fields) != self.width:
            raise _BadRow("wrong number of fields", f"{len(fields)} fields, the header has {self.width}")
        column = self.column
        age = self.age(fields[column["AGE"]])
        sex = self.sex(fields[column["SEX"]])
        pathology = self.true_pathology(fields[column["PATHOLOGY"]])
        evidences = tuple(code.strip() for code in _parse_evidence_cell(fields[column["EVIDENCES"]].strip()))
        items = set()
        for code in evidences:
            index = self.items.get(code)
            if index is None:
                raise self.bad_code(code)
            items.add(index)
        initial = self.initial(fields[column["INITIAL_EVIDENCE"]])
        if initial not in evidences:
            raise _BadRow("initial evidence not among the evidences",
                          f"initial evidence {initial!r} is not among the patient's evidences")
        pairs = _parse_differential_cell(fields[column["DIFFERENTIAL_DIAGNOSIS"]].strip())
        for name, mass in pairs:
            if self.pathology(name) is None:
                raise _BadRow("pathology missing from the KB", f"differential names {name!r}, not in the KB")
            if not math.isfinite(mass):
                raise _BadRow("malformed list cell", f"differential mass {mass!r} for {name!r} is not finite")
        return age, sex, pathology, self.kb.root_index[initial], evidences, tuple(pairs)


# Bulk reading --------------------------------------------------------------------------------------------------


_NUMBER_SPELT = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"


@dataclass(frozen=True)
class _ListSyntax:
    """How ``repr`` writes a list cell: ``[``, entries joined by ``, ``, ``]``; an entry is a quoted string between
    ``before`` and ``after``. The patterns keep to the syntax RE2 (Arrow's) and ``re`` share."""

    cell: str
    """A whole cell (RE2)."""
    opening: re.Pattern[str]
    closing: re.Pattern[str]
    """The pieces before a cell's first string and after its last one."""
    has_masses: bool
    merged: str | None
    """What repr writes between two strings of a cell when nothing else is (no masses): the strings of a cell are
    read as one piece, split at NUL."""

    @classmethod
    def of(cls, before: str, after: str, has_masses: bool, merged: str | None = None) -> _ListSyntax:
        entry = f"{before}'[^']*'{after}"
        return cls(cell=rf"^\[(?:{entry}(?:, {entry})*)?\]$", opening=re.compile(rf"\[{before}"),
                   closing=re.compile(rf"{after}\]"), has_masses=has_masses, merged=merged)


# ['E_91', 'E_55_@_V_89'] and [['URTI', 0.6], ['Influenza', 0.4]].
_EVIDENCE_SYNTAX = _ListSyntax.of("", "", has_masses=False, merged="', '")
_DIFFERENTIAL_SYNTAX = _ListSyntax.of(r"\[", rf", {_NUMBER_SPELT}\]", has_masses=True)


@dataclass
class _Lists:
    ok: np.ndarray
    """Per cell: spelt as repr writes it (entries and masses then read exactly as the row parser reads them)."""
    counts: np.ndarray
    rows: np.ndarray
    """Per entry, its cell."""
    codes: np.ndarray
    """Per entry, its string's index in ``texts``."""
    texts: list[str | None]
    """Distinct quoted strings, in first-seen order; None for one the row parser would not read as is (a
    backslash)."""
    masses: np.ndarray | None
    """Per entry; NaN in a cell that does not match the syntax (the row parser reads it)."""


# Arrays cross between NumPy and Arrow as buffers: ``pyarrow.array`` and ``to_numpy`` import pandas (0.3 s).
def _arrow_mask(values: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(np.packbits(values,
                                                                                          bitorder="little"))])


def _numpy(values: Any) -> np.ndarray:
    """An Arrow array of numbers or bools, without nulls, as NumPy (``to_pandas_dtype`` is NumPy's dtype; it does
    not import pandas)."""
    start, stop = values.offset, values.offset + len(values)
    if values.type.bit_width == 1:
        bits = np.frombuffer(values.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little", count=stop)[start:].astype(bool)
    return np.frombuffer(values.buffers()[1], dtype=values.type.to_pandas_dtype(), count=stop)[start:]


def numbers_of_lines(lines: bytes) -> np.ndarray:
    """The number on each line of ``lines`` (lines apart by ``\\n``, no final one; each a number or empty), NaN
    for an empty line: ``float``'s double, by Arrow's cast (fast_float rounds correctly; a test checks it). A
    line that is not a number raises ``ValueError`` (``pyarrow.ArrowInvalid``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    whole = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(np.array([0, len(lines)])),
                                                         pa.py_buffer(lines)])
    texts = pc.split_pattern(whole, "\n").values
    # From the offsets: comparing with "" makes an Arrow scalar, whose conversion imports pandas (0.9 s).
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset:texts.offset + len(texts) + 1]
    empty = np.diff(offsets) == 0
    if empty.any():
        # The empty lines made null in place (a validity bitmap over the same buffers): ``if_else`` or ``filter``
        # would copy every string, at ten times the cast's cost.
        valid = np.concatenate([np.ones(texts.offset, dtype=bool), ~empty])
        texts = pa.Array.from_buffers(pa.large_string(), len(texts), [_arrow_mask(valid).buffers()[1],
                                                                      *texts.buffers()[1:]], offset=texts.offset)
    numbers = _numpy(pc.cast(texts, pa.float64())).copy()
    numbers[empty] = np.nan
    return numbers


def _list_cells(cells: list[str], syntax: _ListSyntax) -> _Lists:
    """Each cell split on the Python quote by Arrow's kernels: within a cell the pieces at odd positions are the
    strings, made distinct by ``dictionary_encode`` (first-seen order, which the differential's names keep); a cell
    is ok when RE2 matches it whole and its masses, cast by Arrow (``float``'s double: fast_float rounds
    correctly, a test checks it), are finite."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(cells)
    # repr writes neither raw in a string: the row parser reads those cells (read here as empty lists).
    unread = np.zeros(n, dtype=bool)
    text = "\n".join(cells)
    if text.count("\n") > n - 1 or "\x00" in text:
        unread = np.array(["\n" in cell or "\x00" in cell for cell in cells], dtype=bool)
        cells = ["[]" if skip else cell for cell, skip in zip(cells, unread, strict=True)]
        text = "\n".join(cells)
    encoded = text.encode()
    del text
    # The cells as one Arrow string split at the line breaks: no ``pyarrow.array``. No cells join to one empty
    # one, which [:n] drops.
    whole = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(np.array([0, len(encoded)])),
                                                         pa.py_buffer(encoded)])
    array = pc.split_pattern(whole, "\n").values[:n]
    if syntax.merged:
        # Far fewer pieces. replace_substring replaces as str.replace does (leftmost, not overlapping).
        array = pc.replace_substring(array, syntax.merged, "\x00")
    fits = _numpy(pc.match_substring_regex(array, syntax.cell))
    split = pc.split_pattern(array, "'")
    offsets = _numpy(split.offsets).astype(np.int64)
    lengths = np.diff(offsets)
    # An even number of pieces is an odd number of quotes: a string left open, for the row parser.
    unread |= lengths % 2 == 0
    doubted = ~fits & ~unread
    if doubted.any():
        doubted = _doubted(cells, fits, unread, lengths > 1, syntax)
    ok = ~unread & ~doubted
    cell = np.repeat(np.arange(n), lengths)
    position = np.arange(len(split.values)) - offsets[:-1][cell]
    inside = (position % 2 == 1) & ~unread[cell]
    strings = split.values.filter(_arrow_mask(inside))
    rows = cell[inside]
    if syntax.merged:
        strings = pc.split_pattern(strings, "\x00")
        rows = np.repeat(rows, np.diff(_numpy(strings.offsets)))
        strings = strings.values
    distinct_strings = pc.dictionary_encode(strings)
    texts = [None if "\\" in value else value for value in distinct_strings.dictionary.to_pylist()]
    masses = None
    if syntax.has_masses:
        # After each string of a cell that fits: ", <mass>], [" or ", <mass>]]".
        after = (position % 2 == 0) & (position > 0) & fits[cell] & ~unread[cell]
        spelt = pc.ascii_rtrim(pc.ascii_ltrim(split.values.filter(_arrow_mask(after)), ", "), "[], ")
        masses = np.full(len(rows), np.nan)
        masses[fits[rows]] = _numpy(pc.cast(spelt, pa.float64()))
        ok &= np.bincount(rows[~np.isfinite(masses)], minlength=n) == 0
    return _Lists(ok=ok, counts=np.bincount(rows, minlength=n), rows=rows,
                  codes=_numpy(distinct_strings.indices).astype(np.int64), texts=texts, masses=masses)


def _doubted(cells: list[str], fits: np.ndarray, unread: np.ndarray, quoted: np.ndarray,
             syntax: _ListSyntax) -> np.ndarray:
    """The cells that do not fit, and around them: each run of cells from one cell with strings to the next (or
    the block's edge) where the last piece of the first, the first piece of the other or an entry-less cell
    between is not as repr writes it. The reader before Arrow's split the block's cells as one text, where these
    pieces join into one, and doubted the whole run; so do we, that the same rows go to the row parser."""
    n = len(cells)
    opening_ok, closing_ok, empty_ok = np.ones(n, dtype=bool), np.ones(n, dtype=bool), np.ones(n, dtype=bool)
    quoted = quoted & ~unread
    for i in np.flatnonzero(~fits & ~unread).tolist():
        text = cells[i].replace(syntax.merged, "\x00") if syntax.merged else cells[i]
        pieces = text.split("'")
        if len(pieces) == 1:
            empty_ok[i] = text == "[]"
        else:
            opening_ok[i] = syntax.opening.fullmatch(pieces[0]) is not None
            closing_ok[i] = syntax.closing.fullmatch(pieces[-1]) is not None
    with_strings = np.flatnonzero(quoted)
    lefts, rights = np.concatenate([[-1], with_strings]), np.concatenate([with_strings, [n]])
    bad = np.zeros(len(lefts), dtype=bool)
    bad[np.searchsorted(with_strings, np.flatnonzero(~empty_ok & ~quoted))] = True
    bad |= (lefts >= 0) & ~closing_ok[np.maximum(lefts, 0)]
    bad |= (rights < n) & ~opening_ok[np.minimum(rights, n - 1)]
    return (~fits & ~unread) | spans(n, np.maximum(lefts, 0)[bad], np.minimum(rights, n - 1)[bad])


@dataclass
class _Block:
    """Rows of the file as columns: scalar fields as (per-row index, distinct texts), list cells as texts."""

    n: int
    age: tuple[np.ndarray, list[str]]
    sex: tuple[np.ndarray, list[str]]
    pathology: tuple[np.ndarray, list[str]]
    initial: tuple[np.ndarray, list[str]]
    differential: list[str]
    evidences: list[str]
    fields: Callable[[int], list[str]]
    """Row i as the row parser reads it."""
    whole: np.ndarray
    """Rows with as many fields as the header."""


def _each_distinct(column: tuple[np.ndarray, list[str]], rule: Callable[[str], Any], failed: Any,
                   dtype: Any) -> np.ndarray:
    codes, texts = column
    values = []
    for text in texts:
        try:
            values.append(rule(text))
        except _BadRow:
            values.append(failed)
    return np.asarray(values, dtype=dtype)[codes] if texts else np.zeros(0, dtype=dtype)


# The PatientSet's arrays, as the blocks add to them.
_PARTS: dict[str, Any] = {
    "rows": np.int64, "age": np.int64, "sex": np.dtype("<U1"), "pathology": np.int64, "initial_root": np.int64,
    "ev_counts": np.int32, "ev_items": np.int32, "dd_counts": np.int32, "dd_names": np.int32, "dd_columns": np.int64,
    "dd_masses": np.float64,
}


class _Assembler:
    """Turns blocks into the PatientSet's arrays, in row order, and keeps the report."""

    def __init__(self, kb: KnowledgeBase, parser: _RowParser, report: LoadReport, limit: int | None) -> None:
        self.kb = kb
        self.parser = parser
        self.report = report
        self.limit = limit
        self.done = limit is not None and limit <= 0
        self.names: dict[str, int] = {}
        self.parts: dict[str, list[np.ndarray]] = {key: [np.zeros(0, dtype)] for key, dtype in _PARTS.items()}
        self.initial_items = {root: kb.item_index.get(root, -1) for root in kb.roots}

    def _name_ids(self, names: Sequence[str]) -> np.ndarray:
        return np.fromiter((self.names.setdefault(name, len(self.names)) for name in names), dtype=np.int64,
                           count=len(names))

    def add(self, block: _Block) -> None:
        kb, parser, n = self.kb, self.parser, block.n
        age = _each_distinct(block.age, parser.age, -1, np.int64)
        sex = _each_distinct(block.sex, parser.sex, "", "<U1")
        pathology = _each_distinct(block.pathology, parser.true_pathology, -1, np.int64)
        initial = _each_distinct(block.initial, parser.initial, "", object)
        initial_root = np.array([kb.root_index.get(root, -1) for root in initial], dtype=np.int64)
        ok = block.whole & (age >= 0) & (sex != "") & (pathology >= 0) & (initial_root >= 0)

        evidences = _list_cells(block.evidences, _EVIDENCE_SYNTAX)
        items = np.array([-1 if text is None else kb.item_index.get(text.strip(), -1) for text in evidences.texts],
                         dtype=np.int64)[evidences.codes]
        # The initial evidence is a binary root, so it is among the evidences when its item is listed.
        initial_item = np.array([self.initial_items.get(root, -1) for root in initial], dtype=np.int64)
        listed = items == initial_item[evidences.rows]
        ok &= evidences.ok & (np.bincount(evidences.rows[items < 0], minlength=n) == 0)
        ok &= np.bincount(evidences.rows[listed], minlength=n) > 0

        differential = _list_cells(block.differential, _DIFFERENTIAL_SYNTAX)
        column_of = np.full(len(differential.texts), -1, dtype=np.int64)
        name_of = np.full(len(differential.texts), -1, dtype=np.int64)
        for i, text in enumerate(differential.texts):
            if text is not None and (column := parser.pathology(text)) is not None:
                column_of[i], name_of[i] = column, self.names.setdefault(text, len(self.names))
        columns, names = column_of[differential.codes], name_of[differential.codes]
        ok &= differential.ok & (np.bincount(differential.rows[columns < 0], minlength=n) == 0)

        used, reread = self._reread(block, ok)
        first_row = self.report.total_rows
        self.report.total_rows += used
        ok[used:] = False
        fast = np.flatnonzero(ok)
        ev_keep, dd_keep = ok[evidences.rows], ok[differential.rows]
        assert differential.masses is not None
        table = {
            "rows": fast, "age": age[fast], "sex": sex[fast], "pathology": pathology[fast],
            "initial_root": initial_root[fast], "ev_counts": evidences.counts[fast], "ev_items": items[ev_keep],
            "dd_counts": differential.counts[fast], "dd_names": names[dd_keep], "dd_columns": columns[dd_keep],
            "dd_masses": differential.masses[dd_keep],
        }
        if reread:
            table = self._merge(table, reread)
        table["rows"] = table["rows"] + first_row
        for key, value in table.items():
            self.parts[key].append(value.astype(_PARTS[key], copy=False))

    def _reread(self, block: _Block, ok: np.ndarray) -> tuple[int, list[tuple[int, tuple]]]:
        """The rows the bulk checks did not vouch for, through the row parser, in order (the report keeps the first
        skipped rows as examples). Returns how many of the block's rows count (up to the one that fills ``limit``)
        and the rows the parser accepted."""
        fast_before = np.cumsum(ok) - ok
        room = None if self.limit is None else self.limit - self.report.loaded
        reread: list[tuple[int, tuple]] = []
        for i in np.flatnonzero(~ok).tolist():
            if room is not None and int(fast_before[i]) + len(reread) >= room:
                break
            try:
                reread.append((i, self.parser.parse(block.fields(i))))
            except _BadRow as bad:
                self.report.skip(self.report.total_rows + i, bad)
        valid = ok.copy()
        valid[[i for i, _ in reread]] = True
        used = block.n
        if room is not None and int(valid.sum()) >= room:
            used = int(np.searchsorted(np.cumsum(valid), room)) + 1
            self.done = True
        self.report.loaded += int(valid[:used].sum())
        return used, reread

    def _merge(self, table: dict[str, np.ndarray], reread: list[tuple[int, tuple]]) -> dict[str, np.ndarray]:
        """The bulk-read rows and the rows the row parser accepted, interleaved in row order."""
        item_index = self.kb.item_index
        extra: dict[str, list[Any]] = defaultdict(list)
        for i, (age, sex, pathology, initial_root, evidences, pairs) in reread:
            for key, value in (("rows", i), ("age", age), ("sex", sex), ("pathology", pathology),
                               ("initial_root", initial_root), ("ev_counts", len(evidences)),
                               ("dd_counts", len(pairs))):
                extra[key].append(value)
            extra["ev_items"].extend(item_index[code] for code in evidences)
            extra["dd_names"].extend(self._name_ids([name for name, _ in pairs]).tolist())
            extra["dd_columns"].extend(self.parser.pathology(name) for name, _ in pairs)
            extra["dd_masses"].extend(mass for _, mass in pairs)
        merged = {key: np.concatenate([table[key], np.asarray(extra[key], dtype=table[key].dtype)])
                  for key in table}
        order = np.argsort(merged["rows"], kind="stable")
        for key in ("rows", "age", "sex", "pathology", "initial_root", "ev_counts", "dd_counts"):
            merged[key] = merged[key][order]
        for counts, keys in (("ev_counts", ("ev_items",)), ("dd_counts", ("dd_names", "dd_columns", "dd_masses"))):
            owner = np.repeat(np.concatenate([table["rows"], np.asarray(extra["rows"], dtype=np.int64)]),
                              np.concatenate([table[counts], np.asarray(extra[counts], dtype=np.int64)]))
            entry_order = np.argsort(owner, kind="stable")
            for key in keys:
                merged[key] = merged[key][entry_order]
        return merged

    def finish(self) -> _Parsed:
        parts = {key: np.concatenate(self.parts.pop(key), dtype=dtype) for key, dtype in _PARTS.items()}
        return _Parsed(parts, list(self.names), self.report)


@dataclass
class _Parsed:
    """A patients file as read: the PatientSet's flat arrays (``_PARTS``), the differential's pathology names as
    written (``dd_names`` indexes them) and the report. What the parse cache keeps."""

    parts: dict[str, np.ndarray]
    names: list[str]
    report: LoadReport


def _assemble(kb: KnowledgeBase, parsed: _Parsed) -> PatientSet:
    parts = parsed.parts
    return PatientSet(
        kb=kb, rows=parts["rows"], age=parts["age"], sex=parts["sex"], pathology=parts["pathology"],
        initial_root=parts["initial_root"],
        evidences=Listings.from_counts(parts["ev_counts"], parts["ev_items"], kb.items),
        differential_pairs=Listings.from_counts(parts["dd_counts"], parts["dd_names"], parsed.names,
                                                parts["dd_masses"]),
        differential_columns=parts["dd_columns"], report=parsed.report,
    )


def _matches(pattern: re.Pattern[str], pieces: list[str]) -> list[re.Match[str]]:
    found = []
    for piece in pieces:
        match = pattern.fullmatch(piece)
        if match is None:
            raise _Irregular
        found.append(match)
    return found


def _layout_block(text: str) -> _Block:
    """Cut a block of whole lines in the released layout into columns; ``_Irregular`` if it is not in it."""
    pieces = text.split('"')
    n = (len(pieces) - 1) // 4
    if n == 0 or len(pieces) != 4 * n + 1:
        if text.strip("\r\n"):
            raise _Irregular
        return _records_block([], 0, {})
    (head,), (tail,) = _matches(_LAYOUT_FIRST, pieces[:1]), _matches(_LAYOUT_LAST, pieces[-1:])
    middle_codes, middles = distinct(pieces[2::4])
    between_codes, betweens = distinct(pieces[4:-1:4])
    middle, between = _matches(_LAYOUT_MIDDLE, middles), _matches(_LAYOUT_BETWEEN, betweens)
    # Each piece between two rows holds one row's INITIAL_EVIDENCE and the next row's AGE.
    age_codes, ages = distinct([m.group(2) for m in between] + [head.group(1)])
    age = np.concatenate([age_codes[-1:], age_codes[:-1][between_codes]])
    initial_codes, initials = distinct([m.group(1) for m in between] + [tail.group(1)])
    initial = np.concatenate([initial_codes[:-1][between_codes], initial_codes[-1:]])
    sex_codes, sexes = distinct([m.group(1) for m in middle])
    pathology_codes, pathologies = distinct([m.group(2) for m in middle])
    sex, pathology = sex_codes[middle_codes], pathology_codes[middle_codes]
    differential, evidences = pieces[1::4], pieces[3::4]

    def fields(i: int) -> list[str]:
        return [ages[age[i]], differential[i], sexes[sex[i]], pathologies[pathology[i]], evidences[i],
                initials[initial[i]]]

    return _Block(n=n, age=(age, ages), sex=(sex, sexes), pathology=(pathology, pathologies),
                  initial=(initial, initials), differential=differential, evidences=evidences, fields=fields,
                  whole=np.ones(n, dtype=bool))


def _records_block(records: list[list[str]], width: int, column: dict[str, int]) -> _Block:
    """csv records (none blank) as a block; a record with the wrong number of fields is left to the row parser."""
    n = len(records)
    whole = np.fromiter((len(record) == width for record in records), dtype=bool, count=n)
    padded = records if whole.all() else [record if len(record) == width else [""] * width for record in records]
    columns = list(zip(*padded, strict=True)) if n else []

    def cells(name: str) -> list[str]:
        return list(columns[column[name]]) if n else []

    return _Block(n=n, age=distinct(cells("AGE")), sex=distinct(cells("SEX")),
                  pathology=distinct(cells("PATHOLOGY")), initial=distinct(cells("INITIAL_EVIDENCE")),
                  differential=cells("DIFFERENTIAL_DIAGNOSIS"), evidences=cells("EVIDENCES"),
                  fields=records.__getitem__, whole=whole)


@contextmanager
def _open_text(path: Path) -> Iterator[io.TextIOBase]:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = [info for info in archive.infolist() if not info.is_dir()
                       and not info.filename.rsplit("/", 1)[-1].startswith(".")]
            if len(members) != 1:
                csvs = [m for m in members if "patients" in m.filename or m.filename.endswith(".csv")]
                if len(csvs) != 1:
                    names = ", ".join(m.filename for m in members) or "nothing"
                    raise PatientFileError(f"{path} holds {names}; expected exactly one patients file inside.")
                members = csvs
            with archive.open(members[0]) as raw:
                yield io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        return
    with path.open(encoding="utf-8-sig", newline="") as handle:
        yield handle


def _layout_blocks(handle: io.TextIOBase, path: Path) -> tuple[list[str], Iterator[_Block]]:
    if handle.readline().removesuffix("\n").removesuffix("\r") != ",".join(REQUIRED_COLUMNS):
        raise _Irregular
    return list(REQUIRED_COLUMNS), map(_layout_block, text_blocks(handle, _BLOCK_CHARS))




def _csv_blocks(handle: io.TextIOBase, path: Path) -> tuple[list[str], Iterator[_Block]]:
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None:
        raise PatientFileError(f"{path} is empty; expected a header row {', '.join(REQUIRED_COLUMNS)}.")
    header = [name.strip() for name in header]
    missing = [name for name in REQUIRED_COLUMNS if name not in header]
    if missing:
        raise PatientFileError(
            f"{path} lacks the column(s) {', '.join(missing)}; a DDXPlus patients file has "
            f"{', '.join(REQUIRED_COLUMNS)}."
        )
    column = {name: header.index(name) for name in REQUIRED_COLUMNS}

    def blocks() -> Iterator[_Block]:
        while chunk := list(islice(reader, _BLOCK_ROWS)):
            # csv.DictReader and pandas skip blank lines too: they are not rows.
            records = [fields for fields in chunk if fields]
            if records:
                yield _records_block(records, len(header), column)

    return header, blocks()


def _read(path: Path, kb: KnowledgeBase, limit: int | None,
          blocks: Callable[[io.TextIOBase, Path], tuple[list[str], Iterator[_Block]]]) -> _Parsed:
    report = LoadReport(source=path.name)
    with _open_text(path) as handle:
        header, block_iter = blocks(handle, path)
        assembler = _Assembler(kb, _RowParser(kb, header), report, limit)
        for block in block_iter:
            if assembler.done:
                break
            assembler.add(block)
    return assembler.finish()


# A file this big in the released layout is read in parts, one per CPU this process may use (at most
# ``_MAX_PARTS``), the first here and the others in forked processes: on two cores the 134,529-patient test split
# is read in about 0.9 s instead of 1.6. The parts are joined into exactly what one sequential read gives (rows
# numbered through the file, the differential's names in first-seen order, the first skipped rows); a part that is
# not in the released layout sends the whole file to the sequential reader, which decides how to read it.
_PARALLEL_MIN_BYTES = 16 << 20
_MAX_PARTS = 8
_BOM = b"\xef\xbb\xbf"
_forked_kb: KnowledgeBase | None = None
"""The KB of the read in progress, which the forked processes inherit (it is not sent to them)."""


def _read_in_parts(path: Path, kb: KnowledgeBase) -> _Parsed | None:
    """The whole file read in parallel parts, or None when it is not worth it or not possible (small, a zip, one
    CPU, no ``fork``, another layout)."""
    global _forked_kb
    size = path.stat().st_size
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parts = min(cpus, _MAX_PARTS, size // (_PARALLEL_MIN_BYTES // 2))
    if (size < _PARALLEL_MIN_BYTES or parts < 2 or "fork" not in multiprocessing.get_all_start_methods()
            or zipfile.is_zipfile(path)):
        return None
    with path.open("rb") as handle:
        header = handle.readline()
        line = header.removeprefix(_BOM).removesuffix(b"\n").removesuffix(b"\r")
        if line != ",".join(REQUIRED_COLUMNS).encode():
            return None
        bounds = [len(header)]
        for k in range(1, parts):
            handle.seek(max(bounds[-1], size * k // parts))
            handle.readline()  # to the end of the line the cut falls in
            bounds.append(handle.tell())
        bounds.append(size)
    ranges = [(start, stop) for start, stop in pairwise(bounds) if stop > start]
    _forked_kb = kb
    try:
        with ProcessPoolExecutor(max_workers=len(ranges) - 1,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            others = [pool.submit(_read_forked_part, path, start, stop) for start, stop in ranges[1:]]
            read = [_read_part(kb, path, *ranges[0]), *(future.result() for future in others)]
    finally:
        _forked_kb = None
    if any(part is None for part in read):
        return None
    return _joined([part for part in read if part is not None], path.name)


def _read_forked_part(path: Path, start: int, stop: int) -> _Parsed | None:
    assert _forked_kb is not None, "only in a process forked by _read_in_parts"
    return _read_part(_forked_kb, path, start, stop)


def _read_part(kb: KnowledgeBase, path: Path, start: int, stop: int) -> _Parsed | None:
    """Bytes ``start`` to ``stop`` of the file (whole rows) as a file of their own, or None when they are not in
    the released layout or not UTF-8 (the sequential reader then reads the whole file and reports it)."""
    with path.open("rb") as handle:
        handle.seek(start)
        # Decoded block by block as read (an io.StringIO would hold the part at four bytes a character).
        text = io.TextIOWrapper(io.BytesIO(handle.read(stop - start)), encoding="utf-8", newline="")
    try:
        assembler = _Assembler(kb, _RowParser(kb, list(REQUIRED_COLUMNS)), LoadReport(source=path.name), None)
        for block in map(_layout_block, text_blocks(text, _BLOCK_CHARS)):
            assembler.add(block)
    except (_Irregular, UnicodeDecodeError):
        return None
    return assembler.finish()


def _joined(parts: Sequence[_Parsed], source: str) -> _Parsed:
    """Consecutive parts of one file as one read: rows renumbered through the file, names merged in first-seen
    order, reports added up (the first skipped rows kept in row order)."""
    names: dict[str, int] = {}
    arrays: dict[str, list[np.ndarray]] = defaultdict(list)
    report = LoadReport(source=source)
    for part in parts:
        renamed = np.array([names.setdefault(name, len(names)) for name in part.names], dtype=np.int64)
        for key in _PARTS:
            value = part.parts[key]
            if key == "rows":
                value = value + report.total_rows
            elif key == "dd_names" and len(value):
                value = renamed[value]
            arrays[key].append(value)
        report.first_skipped.extend((row + report.total_rows, detail) for row, detail in part.report.first_skipped)
        del report.first_skipped[report.max_examples:]
        report.total_rows += part.report.total_rows
        report.loaded += part.report.loaded
        report.skipped.update(part.report.skipped)
    joined = {key: np.concatenate(arrays[key]).astype(dtype, copy=False) for key, dtype in _PARTS.items()}
    return _Parsed(joined, list(names), report)


def _read_sequentially(path: Path, kb: KnowledgeBase, limit: int | None) -> _Parsed:
    try:
        return _read(path, kb, limit, _layout_blocks)
    except _Irregular:
        return _read(path, kb, limit, _csv_blocks)


def load_patients(path: str | Path, kb: KnowledgeBase, limit: int | None = None) -> PatientSet:
    """Read a DDXPlus patients CSV (or release zip). Bad rows are skipped and counted in ``.report``. A whole file
    of at least ``_CACHE_MIN_BYTES`` is parsed once per content: later loads read the parse from the cache
    (``settings.cache_dir()``), keyed by the sha256 of the file's bytes, of the KB and of this reader's code."""
    path = Path(path)
    if not path.is_file():
        raise PatientFileError(f"{path} does not exist; give the path of a DDXPlus patients CSV or release zip.")
    try:
        cached = _ParseCache.of(path, kb) if limit is None else None
        parsed = cached.read() if cached is not None else None
        if parsed is None:
            parsed = (_read_in_parts(path, kb) if limit is None else None) or _read_sequentially(path, kb, limit)
            if cached is not None:
                cached.write(parsed)
    except UnicodeDecodeError as exc:
        raise PatientFileError(_not_utf8(path, exc)) from None
    except (csv.Error, zipfile.BadZipFile, OSError) as exc:
        raise PatientFileError(f"{path} cannot be read as a patients file ({exc}).") from None
    return _assemble(kb, parsed)


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    """The refusal of a CSV that is not UTF-8, naming its first such line: the parser decodes blocks, so its error
    knows no line number; a zip's member is not searched."""
    if not zipfile.is_zipfile(path):
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as bad:
                    return (f"{path} line {number} is not UTF-8 text (byte {bad.start + 1} of the line); save it as "
                            "a UTF-8 CSV file.")
    return f"{path} cannot be read as a patients file ({exc}); save it as a UTF-8 CSV file."


# Below this size a parse takes a few milliseconds: no cache entry is worth its file.
_CACHE_MIN_BYTES = 1 << 22
# Entries kept: the official splits and a few more. A split's entry is about 0.4 of its CSV's size.
_CACHE_ENTRIES = 8
_CACHE_PREFIX = "ddxplus-patients-"
_REPORT_FIELDS = ("total_rows", "loaded", "skipped", "first_skipped")


@cache
def _reader_digest() -> str:
    """The sha256 of the code a parse depends on (this reader and the KB's lookups): a changed rule never serves
    an entry parsed under the old one."""
    digest = hashlib.sha256()
    for module in (__file__, kb_module.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()


@dataclass
class _ParseCache:
    """One cache entry: a whole file's ``_Parsed`` as an uncompressed ``.npz`` (no pickles), written atomically.
    An entry that cannot be read or does not hold together is parsed again and replaced."""

    path: Path
    source: str
    kb: KnowledgeBase

    @classmethod
    def of(cls, path: Path, kb: KnowledgeBase) -> _ParseCache | None:
        if path.stat().st_size < _CACHE_MIN_BYTES:
            return None
        file_digest, _ = sha256_of(path)
        key = hashlib.sha256(f"{_reader_digest()}\n{kb.content_digest}\n{file_digest}".encode()).hexdigest()
        return cls(cache_dir() / f"{_CACHE_PREFIX}{key[:32]}.npz", path.name, kb)

    def read(self) -> _Parsed | None:
        try:
            with np.load(self.path, allow_pickle=False) as stored:
                parts = {key: stored[key] for key in _PARTS}
                names = stored["names"].tolist()
                fields = json.loads(str(stored["report"]))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            return None
        if not self._consistent(parts, names):
            return None
        report = LoadReport(source=self.source, total_rows=int(fields["total_rows"]), loaded=int(fields["loaded"]),
                            skipped=Counter(fields["skipped"]),
                            first_skipped=[(int(row), str(detail)) for row, detail in fields["first_skipped"]])
        return _Parsed(parts, names, report)

    def _consistent(self, parts: dict[str, np.ndarray], names: list[str]) -> bool:
        n = len(parts["rows"])
        return (all(parts[key].dtype == np.dtype(dtype) and parts[key].ndim == 1 for key, dtype in _PARTS.items())
                and all(len(parts[key]) == n for key in ("age", "sex", "pathology", "initial_root", "ev_counts",
                                                          "dd_counts"))
                and int(parts["ev_counts"].sum()) == len(parts["ev_items"])
                and int(parts["dd_counts"].sum()) == len(parts["dd_names"]) == len(parts["dd_columns"])
                == len(parts["dd_masses"])
                and _within(parts["ev_items"], len(self.kb.items)) and _within(parts["dd_names"], len(names))
                and _within(parts["dd_columns"], self.kb.n_pathologies)
                and _within(parts["pathology"], self.kb.n_pathologies)
                and _within(parts["initial_root"], len(self.kb.roots)))

    def write(self, parsed: _Parsed) -> None:
        """Keep ``parsed``; a cache folder that cannot be written only costs the next load a parse."""
        report = {key: getattr(parsed.report, key) for key in _REPORT_FIELDS}
        arrays: dict[str, Any] = {**parsed.parts, "names": np.array(parsed.names, dtype=str),
                                  "report": np.array(json.dumps(report))}
        try:
            with replaced_in_one_step(self.path) as handle:
                np.savez(handle, allow_pickle=False, **arrays)
            entries = sorted(self.path.parent.glob(f"{_CACHE_PREFIX}*.npz"), key=lambda entry: entry.stat().st_mtime)
            for old in entries[:-_CACHE_ENTRIES]:
                old.unlink(missing_ok=True)
        except OSError as exc:
            logger.info("The parsed patients could not be cached in %s (%s).", self.path.parent, exc)


def _within(values: np.ndarray, size: int) -> bool:
    return not len(values) or (int(values.min()) >= 0 and int(values.max()) < size)
