"""The curated test catalogue (``prompts/sdbench_tests.json``): one entry per orderable test or panel with its
aliases, CPT/HCPCS codes, kind and a normal-range result, shared by the offline gatekeeper and the costing.

A name is looked up by its normalised word set (lower case, punctuation as spaces, ``xray`` as ``x ray``, filler
words such as "serum", "level" and "test" dropped, word order ignored), so "X-Ray Knee", "knee x-ray" and "knee
radiograph" (an alias) find one entry. Names the table lacks fall back to sentence-embedding similarity
(``medeval_core.embeddings``) with a threshold, and never across imaging modalities: "MRI knee" is not "X-ray
knee" however close the sentences are.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from medeval_core.prompts import PromptError, load_json, prompt_path

CATALOG_FILE = "sdbench_tests"
Kind = Literal["lab", "imaging", "procedure"]
EMBEDDING_THRESHOLD = 0.80
"""Cosine similarity at or above which an unknown name is taken for a catalogue entry (pricing and normal
results); measured on the shared cases' test names (see the SDBench notes in the README)."""

_FILLER = frozenset({"a", "an", "the", "of", "for", "and", "with", "please", "order", "stat", "serum", "plasma",
                     "blood", "level", "levels", "test", "tests", "testing", "scan", "exam",
                     "examination", "measurement", "count", "analysis", "assay", "screen", "screening", "panel",
                     "profile", "value", "values", "result", "results", "total", "quantitative", "random", "me",
                     "to", "in", "on", "get", "check", "obtain", "repeat", "urgent", "bilateral", "right", "left"})
# Words that are a test in themselves even though they read as filler elsewhere ("CBC" versus "count").
_KEEP_ALONE = frozenset({"blood", "urine", "count", "screen", "total", "panel"})
_MODALITIES = {
    "x ray": "radiograph", "xray": "radiograph", "radiograph": "radiograph", "radiography": "radiograph",
    "film": "radiograph", "ct": "ct", "cat": "ct", "tomography": "ct", "mri": "mri", "mr": "mri",
    "magnetic": "mri", "mra": "mri", "ultrasound": "ultrasound", "ultrasonography": "ultrasound",
    "sonogram": "ultrasound", "sonography": "ultrasound", "doppler": "ultrasound", "duplex": "ultrasound",
    "echocardiogram": "ultrasound", "echo": "ultrasound", "echocardiography": "ultrasound", "pet": "nuclear",
    "scintigraphy": "nuclear", "nuclear": "nuclear", "mammogram": "mammography", "mammography": "mammography",
    "fluoroscopy": "fluoroscopy", "barium": "fluoroscopy", "angiography": "angiography", "angiogram":
    "angiography",
}
_IMAGING_WORDS = frozenset(_MODALITIES) | {"imaging", "scan", "ray"}
_PROCEDURE_WORDS = frozenset({"biopsy", "scopy", "endoscopy", "puncture", "aspiration", "aspirate", "centesis",
                              "ecg", "ekg", "eeg", "emg", "electrocardiogram", "conduction", "spirometry",
                              "audiometry", "consult", "study"})


_vector_cache: dict[str, Any] = {}
_vector_lock = threading.Lock()
VECTOR_CACHE_SIZE = 50_000


def embed(texts: Sequence[str]) -> Any:
    """Unit vectors of ``texts`` (``medeval_core.embeddings.encode``), remembered per text: the same test names
    and questions recur across cases, and each encoder call has a fixed cost, so only unseen texts are encoded,
    together in one call."""
    import numpy as np

    from medeval_core.embeddings import DIMENSIONS, encode

    with _vector_lock:
        missing = list(dict.fromkeys(text for text in texts if text not in _vector_cache))
    if missing:
        vectors = encode(missing)
        with _vector_lock:
            if len(_vector_cache) + len(missing) > VECTOR_CACHE_SIZE:
                _vector_cache.clear()
            _vector_cache.update(zip(missing, vectors, strict=True))
    with _vector_lock:
        found = [_vector_cache[text] for text in texts if text in _vector_cache]
    if len(found) < len(texts):  # cleared meanwhile by another thread: encode them all
        return encode(list(texts))
    return np.stack(found) if found else np.zeros((0, DIMENSIONS), dtype=np.float32)


class CatalogError(ValueError):
    """The test catalogue file is missing or malformed; restore it from the repository."""


def plain(text: str) -> str:
    """Lower-case ASCII words separated by single spaces (``X-Ray`` -> ``x ray``, ``CD4+`` -> ``cd4``)."""
    text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii").lower()
    text = text.replace("&", " and ").replace("xray", "x ray").replace("x-ray", "x ray")
    return re.sub(r"[^a-z0-9]+", " ", text).strip()


def _singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("ses"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def name_key(text: str) -> frozenset[str]:
    """The word set a name is looked up by: singular words, filler dropped unless nothing else is left."""
    words = [_singular(w) for w in plain(text).split()]
    kept = [w for w in words if w not in _FILLER]
    if not kept:
        kept = [w for w in words if w in _KEEP_ALONE] or words
    return frozenset(kept)


def modalities(text: str) -> frozenset[str]:
    """The imaging modalities a name mentions (``chest x-ray`` -> {radiograph})."""
    words = plain(text)
    found = {modality for word, modality in _MODALITIES.items() if re.search(rf"\b{word}\b", words)}
    return frozenset(found)


def guess_kind(text: str) -> Kind:
    words = {_singular(word) for word in plain(text).split()}
    if words & _IMAGING_WORDS or modalities(text):
        return "imaging"
    if words & _PROCEDURE_WORDS or any(w.endswith(("scopy", "centesis", "graphy")) for w in words):
        return "procedure"
    return "lab"


class CatalogEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    codes: list[str] = Field(min_length=1)
    kind: Kind
    normal: str = Field(min_length=1)


class CatalogMatch(BaseModel):
    """A name taken for a catalogue entry: exactly (its name or an alias) or by embedding similarity."""

    model_config = ConfigDict(frozen=True)

    entry: CatalogEntry
    method: Literal["alias", "embedding"]
    matched: str
    similarity: float = 1.0


class _CatalogFile(BaseModel):
    about: str = ""
    tests: list[CatalogEntry] = Field(min_length=1)


class TestCatalog:
    """The catalogue, its exact-name index and (built on first use) its embedding index."""

    __test__ = False  # not a pytest class, whatever its name

    def __init__(self, entries: list[CatalogEntry], source: str = "") -> None:
        self.entries = entries
        self.source = source
        self._by_key: dict[frozenset[str], CatalogEntry] = {}
        self._names: list[tuple[str, CatalogEntry]] = []
        for entry in entries:
            for name in (entry.name, *entry.aliases):
                self._by_key.setdefault(name_key(name), entry)
                self._names.append((name, entry))
        self._vectors: Any = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries)

    def exact(self, name: str) -> CatalogEntry | None:
        """The entry whose name or alias has the same word set as ``name``."""
        return self._by_key.get(name_key(name))

    def _name_vectors(self) -> Any:
        with self._lock:
            if self._vectors is None:
                self._vectors = embed([name for name, _ in self._names])
            return self._vectors

    def match(self, name: str, threshold: float = EMBEDDING_THRESHOLD) -> CatalogMatch | None:
        """``name`` as a catalogue entry: exactly, else the most similar name at or above ``threshold`` whose
        imaging modality agrees; None when nothing qualifies."""
        entry = self.exact(name)
        if entry is not None:
            return CatalogMatch(entry=entry, method="alias", matched=entry.name)
        scores = self._name_vectors() @ embed([name])[0]
        wanted = modalities(name)
        for index in sorted(range(len(self._names)), key=lambda i: -float(scores[i]))[:5]:
            if float(scores[index]) < threshold:
                break
            candidate_name, candidate = self._names[index]
            if modalities(candidate_name) == wanted or modalities(candidate.name) == wanted:
                return CatalogMatch(entry=candidate, method="embedding", matched=candidate_name,
                                    similarity=float(scores[index]))
        return None


@cache
def _catalog_at(path: str, mtime_ns: int) -> TestCatalog:
    data = load_json(CATALOG_FILE, Path(path).parent)
    try:
        parsed = _CatalogFile.model_validate(data)
    except ValueError as exc:
        raise CatalogError(f"{path} is not a valid test catalogue ({exc}); restore it from the repository.") from None
    return TestCatalog(parsed.tests, source=path)


def load_catalog(prompts_dir: Path | None = None) -> TestCatalog:
    """The test catalogue under ``prompts_dir`` (cached per file state)."""
    path = prompt_path(CATALOG_FILE, prompts_dir, suffix=".json")
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        raise CatalogError(f"{path} is missing; restore it from the repository.") from None
    try:
        return _catalog_at(str(path), mtime)
    except PromptError as exc:
        raise CatalogError(str(exc)) from None


# Orders too vague to answer: the gatekeeper asks for the specific test instead (the paper's rule).
VAGUE_ORDERS = frozenset(name_key(text) for text in (
    "blood work", "bloodwork", "blood tests", "labs", "all labs", "routine labs", "basic labs", "lab work",
    "laboratory tests", "labs and imaging", "all tests", "everything", "imaging", "any imaging", "full workup",
    "complete workup", "workup", "tests", "investigations", "all investigations", "screening tests",
    "routine bloods", "bloods", "a scan", "scans", "standard labs", "the usual labs", "all blood tests",
    "more tests", "basic workup", "imaging studies", "some imaging", "some tests", "some labs",
))


def is_vague(order: str) -> bool:
    """Whether ``order`` names no specific test ("blood work", "all labs", "imaging")."""
    key = name_key(order)
    return not key or key in VAGUE_ORDERS or plain(order) in {"labs", "tests", "imaging", "bloods", "everything"}
