"""The parse cache of DDXPlus patient files: a whole file is parsed once per content (and KB, and reader code);
later loads read the parse back, equal in every array and in the report; anything doubtful is parsed again."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from medeval_core.benchmarks.ddxplus import patients as module
from medeval_core.benchmarks.ddxplus.kb import load_kb
from medeval_core.benchmarks.ddxplus.patients import PatientSet, load_patients
from tests.ddxplus_fixtures import ddxplus_dir, sample_csv


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder, and every file big enough to be cached."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("MEDEVAL_CACHE_DIR", str(folder))
    monkeypatch.setattr(module, "_CACHE_MIN_BYTES", 0)
    return folder


@pytest.fixture
def parses(monkeypatch):
    """How many times a file was really parsed."""
    calls = []
    real = module._read

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "_read", counted)
    return calls


def with_bad_rows(tmp_path):
    """The sample with two rows that are skipped (an unknown code, a malformed list cell)."""
    lines = sample_csv().read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = lines[3].rstrip("\r\n").rsplit(",", 1)[0] + ",E_9999\n"
    lines[5] = lines[5].replace("[", "(", 1)
    path = tmp_path / "patients.csv"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def assert_same(a: PatientSet, b: PatientSet) -> None:
    for name in ("rows", "age", "sex", "pathology", "initial_root", "differential"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.item_matrix(), b.item_matrix())
    assert list(a.evidences) == list(b.evidences) and list(a.differential_pairs) == list(b.differential_pairs)
    assert a.cases() == b.cases()
    assert (a.report.total_rows, a.report.loaded, a.report.skipped, a.report.examples) == (
        b.report.total_rows, b.report.loaded, b.report.skipped, b.report.examples)


def test_a_second_load_reads_the_parse_back(tmp_path, kb, cache, parses):
    path = with_bad_rows(tmp_path)
    first = load_patients(path, kb)
    assert len(parses) == 1 and len(list(cache.glob("ddxplus-patients-*.npz"))) == 1
    assert first.report.n_skipped == 2
    again = load_patients(path, kb)
    assert len(parses) == 1
    assert_same(first, again)
    # Another name for the same bytes: the same entry, reported under its own name.
    copy = tmp_path / "copy.csv"
    shutil.copyfile(path, copy)
    renamed = load_patients(copy, kb)
    assert len(parses) == 1 and renamed.report.source == "copy.csv" and first.report.source == "patients.csv"


def test_changed_bytes_another_kb_or_a_limit_are_parsed(tmp_path, kb, cache, parses):
    path = with_bad_rows(tmp_path)
    before = load_patients(path, kb)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = sample_csv().read_text(encoding="utf-8").splitlines(keepends=True)[3]
    path.write_text("".join(lines), encoding="utf-8")
    after = load_patients(path, kb)
    assert len(parses) == 2 and after.report.n_skipped == before.report.n_skipped - 1
    french = load_kb(ddxplus_dir(), language="fr")
    assert french.content_digest != kb.content_digest
    load_patients(path, french)
    assert len(parses) == 3
    limited = load_patients(path, kb, limit=10)
    assert len(parses) == 4 and len(limited) == 10


@pytest.mark.parametrize("damage", ["truncated", "not a zip", "out of range"])
def test_a_damaged_entry_is_parsed_again_and_replaced(tmp_path, kb, cache, parses, damage):
    path = with_bad_rows(tmp_path)
    first = load_patients(path, kb)
    [entry] = cache.glob("ddxplus-patients-*.npz")
    if damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:5000])
    elif damage == "not a zip":
        entry.write_bytes(b"\x00" * 100)
    else:  # well formed, but an evidence item the KB does not have
        with np.load(entry) as stored:
            arrays = {key: stored[key] for key in stored.files}
        arrays["ev_items"][0] = len(kb.items)
        with entry.open("wb") as handle:
            np.savez(handle, **arrays)
    again = load_patients(path, kb)
    assert len(parses) == 2
    assert_same(first, again)
    load_patients(path, kb)
    assert len(parses) == 2  # the replaced entry is good


def test_no_cache_for_small_files_or_where_it_cannot_be_written(tmp_path, kb, monkeypatch, parses):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("MEDEVAL_CACHE_DIR", str(blocked / "cache"))
    monkeypatch.setattr(module, "_CACHE_MIN_BYTES", 0)
    path = with_bad_rows(tmp_path)
    assert_same(load_patients(path, kb), load_patients(path, kb))
    assert len(parses) == 2
    monkeypatch.setattr(module, "_CACHE_MIN_BYTES", 1 << 22)
    monkeypatch.setenv("MEDEVAL_CACHE_DIR", str(tmp_path / "cache"))
    load_patients(path, kb)
    assert len(parses) == 3 and not (tmp_path / "cache").exists()


def test_old_entries_are_pruned(tmp_path, kb, cache, monkeypatch):
    monkeypatch.setattr(module, "_CACHE_ENTRIES", 2)
    lines = sample_csv().read_text(encoding="utf-8").splitlines(keepends=True)
    for count in (50, 60, 70):
        path = tmp_path / f"first-{count}.csv"
        path.write_text("".join(lines[:count]), encoding="utf-8")
        load_patients(path, kb)
    assert len(list(cache.glob("ddxplus-patients-*.npz"))) == 2
    assert not list(cache.glob("*.tmp"))
