"""Reading a big patients file in parallel parts gives exactly what one sequential read gives: the same arrays,
rows numbered through the file, the differential's names in first-seen order, the same report; a part that is not
in the released layout sends the whole file to the sequential reader."""

from __future__ import annotations

import numpy as np
import pytest

from medeval_core.benchmarks.ddxplus import patients as module
from medeval_core.benchmarks.ddxplus.kb import load_kb
from tests.ddxplus_fixtures import ddxplus_dir, sample_csv


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


@pytest.fixture
def parallel(monkeypatch):
    """Every file of a few hundred kB is read in ``parts`` parts (as many CPUs pretended)."""
    def use(parts: int) -> None:
        monkeypatch.setattr(module, "_PARALLEL_MIN_BYTES", 2)
        monkeypatch.setattr(module.os, "sched_getaffinity", lambda pid: set(range(parts)), raising=False)
    return use


def varied_file(tmp_path, *, blank_line_at: int | None = None):
    """The sample three times over, with skipped rows in every third (an unknown code, a malformed cell, an
    unknown pathology), a differential name first written in French far into the file, a BOM and CRLF ends."""
    header, *rows = sample_csv().read_text(encoding="utf-8").splitlines()
    rows = rows * 3
    third = len(rows) // 3
    rows[5] = rows[5].rsplit(",", 1)[0] + ",E_9999"
    rows[third + 7] = rows[third + 7].replace("[", "(", 1)
    age, differential, _, evidences, initial = rows[2 * third + 11].split('"')
    rows[2 * third + 11] = '"'.join([age, differential, ",M,Not a pathology,", evidences, initial])
    age, differential, middle, evidences, initial = rows[2 * third + 20].split('"')
    first_name = differential.split("'")[1]
    differential = differential.replace(f"'{first_name}'", "'IVRS ou virémie'", 1)
    rows[2 * third + 20] = '"'.join([age, differential, middle, evidences, initial])
    if blank_line_at is not None:
        rows.insert(blank_line_at, "")
    path = tmp_path / "patients.csv"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join([header, *rows, ""]).encode("utf-8"))
    return path


def assert_same_read(a, b) -> None:
    assert a.names == b.names
    for key, dtype in module._PARTS.items():
        assert a.parts[key].dtype == np.dtype(dtype) == b.parts[key].dtype
        np.testing.assert_array_equal(a.parts[key], b.parts[key], err_msg=key)
    assert (a.report.total_rows, a.report.loaded, a.report.skipped, a.report.first_skipped) == (
        b.report.total_rows, b.report.loaded, b.report.skipped, b.report.first_skipped)


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_parts_joined_are_the_sequential_read(tmp_path, kb, parallel, parts):
    path = varied_file(tmp_path)
    parallel(parts)
    joined = module._read_in_parts(path, kb)
    assert joined is not None
    sequential = module._read_sequentially(path, kb, None)
    assert_same_read(joined, sequential)
    assert sequential.report.n_skipped >= 3 and "IVRS ou virémie" in sequential.names
    # The later parts' skipped rows keep their row numbers in the file.
    assert [row for row, _ in joined.report.first_skipped] == [5, 1066 + 7, 2 * 1066 + 11]


def test_the_whole_load_reads_in_parts(tmp_path, kb, parallel, monkeypatch):
    monkeypatch.setenv("MEDEVAL_CACHE_DIR", str(tmp_path / "cache"))
    path = varied_file(tmp_path)
    sequential = module.load_patients(path, kb)
    parallel(2)
    joined = []
    real = module._read_in_parts
    monkeypatch.setattr(module, "_read_in_parts", lambda *args: joined.append(real(*args)) or joined[-1])
    in_parts = module.load_patients(path, kb)
    assert len(joined) == 1 and joined[0] is not None
    assert in_parts.cases() == sequential.cases() and in_parts.report.summary() == sequential.report.summary()
    np.testing.assert_array_equal(in_parts.item_matrix(), sequential.item_matrix())
    np.testing.assert_array_equal(in_parts.differential, sequential.differential)


def test_a_part_out_of_layout_sends_the_file_to_the_sequential_reader(tmp_path, kb, parallel, monkeypatch):
    """A blank line just where the file is cut: the second part starts with it, which the layout reader refuses
    (a block never starts with one when read in sequence), so the whole file is read sequentially."""
    path = varied_file(tmp_path)
    data = path.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    path.write_bytes(data[:cut] + b"\r\n" + data[cut:])
    data = path.read_bytes()
    assert data.index(b"\n", len(data) // 2) + 1 == cut  # the cut still falls before the blank line
    parallel(2)
    assert module._read_part(kb, path, cut, len(data)) is None
    assert module._read_in_parts(path, kb) is None
    monkeypatch.setenv("MEDEVAL_CACHE_DIR", str(tmp_path / "cache"))
    sequential = module._read_sequentially(path, kb, None)
    loaded = module.load_patients(path, kb)
    assert loaded.report.total_rows == sequential.report.total_rows == 3 * 1066
    assert loaded.cases() == module._assemble(kb, sequential).cases()
