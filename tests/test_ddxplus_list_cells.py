"""The bulk reader's list cells (``patients._list_cells``, Arrow's kernels) against the reader they replaced, kept
here as ``_python_list_cells`` (one Python string per piece, ``shapes``/``distinct``/``parse_numbers``): the same
ok flags, entries, distinct strings in first-seen order and masses, over the sample and fuzzed cells. Then whole
fuzzed files against the row parser row by row, and Arrow's number cast against ``float``.
"""

from __future__ import annotations

import csv
import random
import re
from dataclasses import dataclass

import numpy as np
import pytest

from medeval_core.benchmarks.ddxplus import patients as module
from medeval_core.benchmarks.ddxplus.kb import load_kb
from medeval_core.benchmarks.ddxplus.patients import (
    _DIFFERENTIAL_SYNTAX,
    _EVIDENCE_SYNTAX,
    REQUIRED_COLUMNS,
    _BadRow,
    _list_cells,
    _Lists,
    _RowParser,
    distinct,
    spans,
)
from medeval_core.benchmarks.ddxplus.scoring import parse_numbers, shape_table, shapes
from tests.ddxplus_fixtures import ddxplus_dir, hard_number_texts, sample_csv

# The replaced reader ------------------------------------------------------------------------------------------

_LIST_SHAPES = shape_table(b"[], \n.eE+-")
_SHAPE_NUMBER = rb"-?d+(?:\.d+)?(?:[eE][-+]?d+)?"
_NO_ENTRIES = re.compile(rb"(?:\[\]\n)*")


@dataclass(frozen=True)
class _PythonSyntax:
    first: re.Pattern[bytes]
    between: re.Pattern[bytes]
    last: re.Pattern[bytes]
    has_masses: bool
    merged: str | None

    @classmethod
    def of(cls, before: bytes, after: bytes, has_masses: bool, merged: str | None = None) -> _PythonSyntax:
        return cls(first=re.compile(rb"(?:\[\]\n)*\[" + before),
                   between=re.compile(after + rb"(?:, |\](?:\n\[\])*\n\[)" + before),
                   last=re.compile(after + rb"\](?:\n\[\])*\n"), has_masses=has_masses, merged=merged)


_PYTHON_EVIDENCE = _PythonSyntax.of(b"", b"", has_masses=False, merged="', '")
_PYTHON_DIFFERENTIAL = _PythonSyntax.of(rb"\[", rb", " + _SHAPE_NUMBER + rb"\]", has_masses=True)


def _python_list_cells(cells: list[str], syntax: _PythonSyntax) -> _Lists:
    n = len(cells)
    text = "\n".join(cells)
    if text.count("\n") != n - 1 or "\x00" in text:
        odd = np.array(["\n" in cell or "\x00" in cell for cell in cells], dtype=bool)
        return _python_without(cells, odd, syntax)
    if syntax.merged:
        text = text.replace(syntax.merged, "\x00")
    pieces = (text + "\n").split("'")
    outside = pieces[0::2]
    if syntax.has_masses:
        shape_codes, distinct_shapes, joined = shapes(outside, _LIST_SHAPES)
    else:
        shape_codes, distinct_shapes = distinct(outside)
    newlines = np.array([shape.count("\n" if isinstance(shape, str) else b"\n") for shape in distinct_shapes],
                        dtype=np.int64)[shape_codes]
    if int(newlines.sum()) != n:
        odd = np.array([cell.count("'") % 2 == 1 for cell in cells], dtype=bool)
        return _python_without(cells, odd, syntax)
    ends = np.cumsum(newlines)
    starts = ends - newlines
    rows = ends[:-1]
    encoded = [shape if isinstance(shape, bytes) else shape.encode() for shape in distinct_shapes]
    piece_ok = np.array([syntax.between.fullmatch(shape) is not None for shape in encoded], dtype=bool)[shape_codes]
    first, last = encoded[shape_codes[0]], encoded[shape_codes[-1]]
    if len(outside) == 1:
        piece_ok[0] = _NO_ENTRIES.fullmatch(first) is not None
    else:
        piece_ok[0] = syntax.first.fullmatch(first) is not None
        piece_ok[-1] = syntax.last.fullmatch(last) is not None
    bad = spans(n, starts[~piece_ok], ends[~piece_ok])
    inside = pieces[1::2]
    if syntax.merged:
        per_piece = np.array([piece.count("\x00") for piece in inside], dtype=np.int64) + 1
        inside = "\x00".join(inside).split("\x00") if inside else []
        rows = np.repeat(rows, per_piece)
    codes, raw = distinct(inside)
    texts = [None if "\\" in value else value for value in raw]
    masses = None
    if syntax.has_masses:
        masses = parse_numbers(joined, outside, piece_ok)[1:]
        bad |= np.bincount(rows[~np.isfinite(masses)], minlength=n) > 0
    return _Lists(ok=~bad, counts=np.bincount(rows, minlength=n), rows=rows, codes=codes, texts=texts,
                  masses=masses)


def _python_without(cells: list[str], odd: np.ndarray, syntax: _PythonSyntax) -> _Lists:
    lists = _python_list_cells(["[]" if skip else cell for cell, skip in zip(cells, odd, strict=True)], syntax)
    lists.ok &= ~odd
    return lists


# Fuzzed cells -------------------------------------------------------------------------------------------------

_NUMBERS = ["1e-5", ".5", "5.", "+1", "-0", "0", "1e400", "-1e400", "1E5", "007", "0.5e+3", "4.9e-324", "1e-400",
            "nan", "inf", "1_0", "0x1", "1e", "-.5", "12345678901234567890123", "0.1000000000000000055511151231257827",
            "1e0000000000000000005", " 0.5", "0.5 ", "\u0661"]
_NAMES = ["Pneumonie", "IVRS ou virémie", "Bronchite", "URTI ", " URTI", "É_91", "日本", "E\\_91", "", ", ", ",",
          "'", "a\nb", "a\x00b", "a\tb", "\"", "E_91\r"]


def _mutate(cell: str, rng: random.Random) -> str:
    """One random change of the kinds a hand-edited or foreign file has."""
    kind = rng.randrange(24)
    at = rng.randrange(len(cell) + 1)
    quotes = [i for i, char in enumerate(cell) if char == "'"]
    if kind == 0:
        return cell[:at] + "'" + cell[at:]
    if kind == 1:
        return cell[:at] + rng.choice(["\\", "\\'", "\\\\"]) + cell[at:]
    if kind == 2 and len(quotes) >= 2:
        k = rng.randrange(len(quotes) // 2) * 2
        return cell[:quotes[k] + 1] + rng.choice(_NAMES) + cell[quotes[k + 1]:]
    if kind == 3:
        return cell.replace(", ", rng.choice([",  ", " , ", ",", ",\t", "\t, "]), rng.randint(1, 3))
    if kind == 4:
        return re.sub(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", lambda m: rng.choice(_NUMBERS) if rng.random() < 0.4
                      else m.group(0), cell)
    if kind == 5:
        return rng.choice(["[]", "[ ]", "", "()", "[[]]", "[[], []]", "[,]", "['']", "[['', 0]]", "[', ']",
                           "[', ', 'E_91']", "['E_91', ', ']", "['', ', '']", "[''', ''']", "[['x', 1], ]"])
    if kind == 6:
        return "[" + cell + "]"
    if kind == 7:
        return cell[:at] + rng.choice(["\n", "\r\n", "\r", "\x00", "\t", " "]) + cell[at:]
    if kind == 8:
        return cell[:-1] + ",]" if cell.endswith("]") else cell + ","
    if kind == 9 and len(quotes) >= 2:
        k = rng.randrange(len(quotes) // 2) * 2
        entry = cell[quotes[k]:quotes[k + 1] + 1]
        return cell.replace(entry, f"{entry}, {entry}", 1)
    if kind == 10:
        return cell.replace("'", '"', rng.randint(1, 4))
    if kind == 11:
        return cell.replace("[", "(", 1) if rng.random() < 0.5 else cell.replace("]]", "])", 1)
    if kind == 12:
        return " " + cell if rng.random() < 0.5 else cell + " "
    if kind == 13:
        return cell.replace("', '", "'\x00'", 1)
    if kind == 14:
        return cell[:at] + cell[at + rng.randint(1, 6):]
    if kind == 15:
        return cell.replace("], [", "],[", 1)
    return cell


def _fuzzed(cells: list[str], rng: random.Random, share: float) -> list[str]:
    out = []
    for cell in cells:
        while rng.random() < share:
            cell = _mutate(cell, rng)
        out.append(cell)
    return out


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


@pytest.fixture(scope="module")
def sample_rows() -> list[list[str]]:
    with sample_csv().open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))[1:]


def assert_same_lists(new: _Lists, old: _Lists) -> None:
    np.testing.assert_array_equal(new.ok, old.ok, err_msg="ok")
    np.testing.assert_array_equal(new.counts, old.counts, err_msg="counts")
    np.testing.assert_array_equal(new.rows, old.rows, err_msg="rows")
    assert new.texts == old.texts
    np.testing.assert_array_equal(new.codes, old.codes, err_msg="codes")
    if old.masses is not None:
        assert new.masses is not None
        # A cell that is not ok is read by the row parser: only the ok cells' masses are used.
        used = new.ok[new.rows]
        assert np.array_equal(new.masses[used], old.masses[used])
        assert np.array_equal(np.signbit(new.masses[used]), np.signbit(old.masses[used]))


@pytest.mark.parametrize("share", [0.0, 0.02, 0.3, 0.9])
def test_list_cells_are_read_as_the_python_reader_read_them(sample_rows, share):
    rng = random.Random(int(share * 100) + 1)
    columns = ((1, _DIFFERENTIAL_SYNTAX, _PYTHON_DIFFERENTIAL), (4, _EVIDENCE_SYNTAX, _PYTHON_EVIDENCE))
    for column, syntax, python_syntax in columns:
        cells = _fuzzed([row[column] for row in sample_rows] * 2, rng, share)
        start = 0
        while start < len(cells):
            stop = start + rng.choice([1, 2, 3, 17, 100, 1000])
            block = cells[start:stop]
            assert_same_lists(_list_cells(block, syntax), _python_list_cells(block, python_syntax))
            start = stop


def test_list_cells_of_no_rows():
    for syntax in (_DIFFERENTIAL_SYNTAX, _EVIDENCE_SYNTAX):
        lists = _list_cells([], syntax)
        assert len(lists.ok) == len(lists.counts) == len(lists.rows) == len(lists.codes) == 0 and lists.texts == []


def _row_parser_read(kb, rows: list[list[str]]) -> tuple[list[int], list[tuple], list[str]]:
    parser = _RowParser(kb, list(REQUIRED_COLUMNS))
    loaded, values, reasons = [], [], []
    for i, row in enumerate(rows):
        try:
            values.append(parser.parse(row))
            loaded.append(i)
        except _BadRow as bad:
            reasons.append(bad.reason)
    return loaded, values, reasons


# literal_eval warns of the invalid escapes the fuzzing writes.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("layout", ["released", "csv module"])
def test_fuzzed_files_load_as_the_row_parser_reads_them(tmp_path, kb, sample_rows, monkeypatch, layout):
    """Whole rows fuzzed (list cells as above, scalar fields too), in small blocks: the loaded patients, their
    values and the skip reasons are the row parser's, row by row."""
    monkeypatch.setattr(module, "_BLOCK_CHARS", 1 << 14)
    monkeypatch.setattr(module, "_BLOCK_ROWS", 61)
    rng = random.Random(11 if layout == "released" else 12)
    rows = [list(row) for row in sample_rows * 2]
    for row in rows:
        if rng.random() < 0.3:
            row[1] = _fuzzed([row[1]], rng, 0.5)[0]
        if rng.random() < 0.3:
            row[4] = _fuzzed([row[4]], rng, 0.5)[0]
        if rng.random() < 0.05:
            row[rng.choice([0, 2, 3, 5])] = rng.choice(["", " 40", "40.0", "x", "f", " M", "URTI ", "E_91", "-1"])
    path = tmp_path / "patients.csv"
    if layout == "released":
        # Cells holding a double quote would leave the layout: written without one, as the release writes them.
        rows = [[cell.replace('"', "'") for cell in row] for row in rows]
        lines = [",".join(REQUIRED_COLUMNS)] + [f'{a},"{d}",{s},{p},"{e}",{i}' for a, d, s, p, e, i in rows]
        path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8", newline="")
    else:
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(REQUIRED_COLUMNS)
            writer.writerows(rows)
    with path.open(newline="", encoding="utf-8") as handle:
        read_rows = [row for row in list(csv.reader(handle))[1:] if row]
    patients = module.load_patients(path, kb)
    loaded, values, reasons = _row_parser_read(kb, read_rows)
    assert patients.report.total_rows == len(read_rows)
    assert patients.rows.tolist() == loaded
    assert sorted(patients.report.skipped.elements()) == sorted(reasons)
    assert 0 < len(loaded) < len(read_rows)
    for i, (age, sex, pathology, initial_root, evidences, pairs) in enumerate(values):
        assert (patients.age[i], patients.sex[i], patients.pathology[i], patients.initial_root[i]) == (
            age, sex, pathology, initial_root)
        assert patients.evidences[i] == evidences
        assert patients.differential_pairs[i] == pairs


def test_arrow_reads_each_mass_as_float_does():
    """Arrow's cast (fast_float) gives ``float``'s double for every mass the syntax lets through: long mantissas,
    subnormals, exponents out of range, exact halfway cases, -0."""
    texts = hard_number_texts(7, 120_000)
    cells = [f"[['URTI', {text}], ['Bronchitis', {text}]]" for text in texts]
    lists = _list_cells(cells, _DIFFERENTIAL_SYNTAX)
    expected = np.repeat([float(text) for text in texts], 2)
    assert lists.masses is not None
    assert np.array_equal(lists.masses, expected) and np.array_equal(np.signbit(lists.masses), np.signbit(expected))
    np.testing.assert_array_equal(lists.ok, np.isfinite(expected[::2]))


def test_a_block_of_blank_lines_alone_is_no_rows(tmp_path, kb, monkeypatch):
    """Trailing blank lines that fill whole blocks give blocks of no rows (the Python reader recursed on them)."""
    monkeypatch.setattr(module, "_BLOCK_CHARS", 1 << 12)
    path = tmp_path / "patients.csv"
    path.write_text(sample_csv().read_text(encoding="utf-8") + "\n" * 20_000, encoding="utf-8")
    parsed = module._read_sequentially(path, kb, None)
    assert parsed.report.total_rows == parsed.report.loaded == 1066
