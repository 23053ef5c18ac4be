"""The curated test catalogue (``prompts/sdbench_tests.json``): one entry per orderable test or panel with its
aliases, CPT/HCPCS codes, kind and a normal-range result, shared by the offline gatekeeper and the costing.

A name is looked up by its normalised word set (lower case, punctuation as spaces, ``xray`` as ``x ray``, filler words
such as "serum", "level" and "test" dropped, word order ignored), after the naming vocabulary
(``prompts/sdbench_test_vocabulary.json``, ``TestVocabulary``) has put it in the catalogue's words: British spellings,
modality and body-site names ("roentgenogram of the thorax" -> "x ray chest"), words that never change the test, further
names of each test (LOINC-style long names), so "X-Ray Knee", "knee x-ray" and "plain film of the knee" find one entry.
An order that lists a panel's parts ("TSH and free T4") is that panel. Names still unknown fall back to
sentence-embedding similarity (``medeval_core.models.embeddings``; the catalogue's name vectors are computed once and
kept in the cache folder) with a threshold, and never across imaging modalities: "MRI knee" is not "X-ray knee" however
close the sentences are.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from medeval_core.prompts import PromptError, load_json, prompt_path

CATALOG_FILE = "sdbench_tests"
VOCABULARY_FILE = "sdbench_test_vocabulary"
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
    """Unit vectors of ``texts`` (``medeval_core.models.embeddings.encode``), remembered per text: the same test names
    and questions recur across cases, and each encoder call has a fixed cost, so only unseen texts are encoded,
    together in one call."""
    import numpy as np

    from medeval_core.models.embeddings import DIMENSIONS, encode

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


# Every modality word in one pattern, as whole words: one scan of a name instead of one search per word (no word
# starts another's match: "x ray" is the only one of two words).
_MODALITY_WORDS = re.compile(r"\b(?:" + "|".join(map(re.escape, _MODALITIES)) + r")\b")


def modalities(text: str) -> frozenset[str]:
    """The imaging modalities a name mentions (``chest x-ray`` -> {radiograph})."""
    return frozenset(_MODALITIES[word] for word in _MODALITY_WORDS.findall(plain(text)))


def guess_kind(text: str) -> Kind:
    words = {_singular(word) for word in plain(text).split()}
    if words & _IMAGING_WORDS or modalities(text):
        return "imaging"
    if words & _PROCEDURE_WORDS or any(w.endswith(("scopy", "centesis", "graphy")) for w in words):
        return "procedure"
    return "lab"


def _whole_words(phrases: Sequence[str]) -> re.Pattern[str] | None:
    """One pattern for ``phrases`` as whole words, longest first (so "plain film" is taken before "film")."""
    ordered = sorted({plain(p) for p in phrases if plain(p)}, key=lambda p: (-len(p), p))
    return re.compile(r"\b(?:" + "|".join(map(re.escape, ordered)) + r")\b") if ordered else None


class TestVocabulary(BaseModel):
    """The catalogue's naming vocabulary (``prompts/sdbench_test_vocabulary.json``; its ``about`` names the
    sources): it rewrites a name into the catalogue's words before the word-set look-up."""

    __test__ = False  # not a pytest class, whatever its name

    about: str = ""
    spelling: dict[str, str] = Field(default_factory=dict)
    phrases: dict[str, str] = Field(default_factory=dict)
    imaging_sites: dict[str, str] = Field(default_factory=dict)
    dropped: list[str] = Field(default_factory=list)
    names: dict[str, list[str]] = Field(default_factory=dict)
    panels: dict[str, list[str]] = Field(default_factory=dict)
    _stem: re.Pattern[str] | None = PrivateAttr(default=None)
    _phrases: dict[str, str] = PrivateAttr(default_factory=dict)
    _sites: dict[str, str] = PrivateAttr(default_factory=dict)
    _phrase: re.Pattern[str] | None = PrivateAttr(default=None)
    _site: re.Pattern[str] | None = PrivateAttr(default=None)
    _drop: re.Pattern[str] | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        # the spellings at the start of a word, longest first ("haemat" before "haem")
        stems = sorted(map(re.escape, self.spelling), key=lambda stem: -len(stem))
        self._stem = re.compile(r"\b(?:" + "|".join(stems) + ")") if stems else None
        self._phrases = {plain(k): v for k, v in self.phrases.items()}
        self._sites = {plain(k): v for k, v in self.imaging_sites.items()}
        self._phrase = _whole_words(list(self._phrases))
        self._site = _whole_words(list(self._sites))
        self._drop = _whole_words(self.dropped)

    def rewritten(self, name: str) -> str:
        """``name`` with the catalogue's spellings, phrases and body sites, every word kept (what is encoded:
        "full blood picture" keeps the "full" that tells it from a blood film)."""
        text = plain(name)
        if self._stem is not None:
            text = self._stem.sub(lambda m: self.spelling[m.group(0)], text)
        if self._phrase is not None:
            text = self._phrase.sub(lambda m: self._phrases[m.group(0)], text)
        if self._site is not None and modalities(text):
            text = self._site.sub(lambda m: self._sites[m.group(0)], text)
        return " ".join(text.split()) or plain(name)

    def canonical(self, name: str) -> str:
        """``name`` in the catalogue's words without the words that never change the test (what is looked up);
        the plain name when nothing of it would be left."""
        text = self.rewritten(name)
        if self._drop is not None:
            text = self._drop.sub(" ", text)
        return " ".join(text.split()) or plain(name)


# An order that lists several tests ("TSH and free T4", "PT/INR and aPTT", "CBC w/ diff").
_LIST_SEPARATORS = re.compile(r"\s*(?:,|/|\+|&|;|\band\b|\bwith\b|\bw\b|\bplus\b|\bincluding\b)\s*", re.I)


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
    """The catalogue, its exact-name index (through the vocabulary) and its embedding index (built on first use,
    its vectors kept in the cache folder)."""

    __test__ = False  # not a pytest class, whatever its name

    def __init__(self, entries: list[CatalogEntry], source: str = "",
                 vocabulary: TestVocabulary | None = None) -> None:
        self.entries = entries
        self.source = source
        self.vocabulary = vocabulary or TestVocabulary()
        by_name = {entry.name: entry for entry in entries}
        unknown = sorted({name for name in [*self.vocabulary.names, *self.vocabulary.panels,
                                            *(part for parts in self.vocabulary.panels.values() for part in parts)]
                          if name not in by_name})
        if unknown:
            raise CatalogError(f"The test vocabulary names tests the catalogue lacks ({', '.join(unknown[:5])}); "
                               "restore both files from the repository.")
        self._by_key: dict[frozenset[str], CatalogEntry] = {}
        self._names: list[tuple[str, CatalogEntry]] = []
        for entry in entries:
            for name in (entry.name, *entry.aliases, *self.vocabulary.names.get(entry.name, [])):
                self._by_key.setdefault(self.key(name), entry)
                self._names.append((name, entry))
        for entry in entries:  # the plain word sets too, where the vocabulary's rewriting left no entry behind
            for name in (entry.name, *entry.aliases):
                self._by_key.setdefault(name_key(name), entry)
        self._rows: dict[str, list[int]] = {}
        for row, (_, entry) in enumerate(self._names):
            self._rows.setdefault(entry.name, []).append(row)
        self._parts: dict[str, frozenset[str]] = {}
        for panel, parts in self.vocabulary.panels.items():
            self._parts[panel] = frozenset(parts)
        self._holders_by_name: dict[str, frozenset[str]] = {}
        self._vectors: Any = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries)

    def key(self, name: str) -> frozenset[str]:
        """The word set ``name`` is looked up by, once the vocabulary has put it in the catalogue's words."""
        return name_key(self.vocabulary.canonical(name))

    def exact(self, name: str) -> CatalogEntry | None:
        """The entry whose name, alias or vocabulary name has the same word set as ``name``."""
        return self._by_key.get(self.key(name)) or self._by_key.get(name_key(name))

    def parts(self, panel: CatalogEntry) -> frozenset[str]:
        """The names of the catalogue tests ``panel`` reports (empty for a single test)."""
        return self._parts.get(panel.name, frozenset())

    def holds(self, panel: CatalogEntry, entry: CatalogEntry) -> bool:
        """Whether a result of ``panel`` holds the result of ``entry``: the same test, one of its tests, or a
        panel all of whose tests it reports (a metabolic panel holds the electrolytes)."""
        return entry == panel or entry.name in self.parts(panel) or (
            bool(self.parts(entry)) and self.parts(entry) <= self.parts(panel))

    def _holders(self, entry: CatalogEntry) -> frozenset[str]:
        """The names of the entries that hold ``entry`` (``holds``), worked out once per entry."""
        found = self._holders_by_name.get(entry.name)
        if found is None:
            found = frozenset(panel.name for panel in self.entries if self.holds(panel, entry))
            self._holders_by_name[entry.name] = found
        return found

    def resolve(self, name: str) -> CatalogEntry | None:
        """``name`` as one catalogue entry without embeddings: exactly, else an order that lists tests of one
        panel ("TSH and free T4", "transaminases and bilirubin": the panel; "Na K Cl HCO3": the electrolytes;
        "total and direct bilirubin": the one test named)."""
        entry = self.exact(name)
        if entry is not None:
            return entry
        pieces = [piece for piece in _LIST_SEPARATORS.split(name) if piece and plain(piece)]
        if len(pieces) < 2:
            return self._listed_in_words(name)
        found = [self.exact(piece) or self._listed_in_words(piece) for piece in pieces]
        return self._holding([entry for entry in found if entry is not None])

    def _listed_in_words(self, name: str) -> CatalogEntry | None:
        """A list without separators ("Na K Cl HCO3", "transaminases" as "alt ast"), only when every word is a
        test."""
        found = [self.exact(word) for word in self.vocabulary.canonical(name).split()]
        if len(found) < 2 or any(entry is None for entry in found):
            return None
        return self._holding([entry for entry in found if entry is not None])

    def _holding(self, found: Sequence[CatalogEntry]) -> CatalogEntry | None:
        """The one test of ``found``, else the smallest panel that holds every test (and panel) of it."""
        named = {entry.name: entry for entry in found}
        if len(named) <= 1:
            return next(iter(named.values()), None)
        holding_all = frozenset.intersection(*(self._holders(entry) for entry in named.values()))
        holding = [panel for panel in self.entries if panel.name in holding_all]
        return min(holding, key=lambda panel: len(self.parts(panel)), default=None)

    def names(self) -> list[str]:
        return [name for name, _ in self._names]

    def name_vectors(self, entry: CatalogEntry) -> Any:
        """The unit vectors of ``entry``'s names (its name, aliases and vocabulary names), one row each."""
        return self._name_vectors()[self._rows[entry.name]]

    def _name_vectors(self) -> Any:
        with self._lock:
            if self._vectors is None:
                from medeval_core.models.embeddings import encode_cached
                from medeval_core.settings import cache_dir

                self._vectors = encode_cached(self.names(), cache_dir())
            return self._vectors

    def match(self, name: str, threshold: float = EMBEDDING_THRESHOLD, vector: Any = None) -> CatalogMatch | None:
        """``name`` as a catalogue entry: exactly, else the most similar name at or above ``threshold`` whose
        imaging modality agrees; None when nothing qualifies. ``vector``: ``name``'s embedding when already
        computed (a turn's orders are encoded together)."""
        import numpy as np

        entry = self.resolve(name)
        if entry is not None:
            return CatalogMatch(entry=entry, method="alias", matched=entry.name)
        scores = self._name_vectors() @ (vector if vector is not None else embed([self.vocabulary.rewritten(name)])[0])
        wanted = modalities(name) or modalities(self.vocabulary.rewritten(name))
        for index in map(int, np.argsort(-scores, kind="stable")[:5]):
            if float(scores[index]) < threshold:
                break
            candidate_name, candidate = self._names[index]
            if modalities(candidate_name) == wanted or modalities(candidate.name) == wanted:
                return CatalogMatch(entry=candidate, method="embedding", matched=candidate_name,
                                    similarity=float(scores[index]))
        return None


@cache
def _catalog_at(path: str, mtime_ns: int, vocabulary_mtime_ns: int) -> TestCatalog:
    data = load_json(CATALOG_FILE, Path(path).parent)
    try:
        parsed = _CatalogFile.model_validate(data)
    except ValueError as exc:
        raise CatalogError(f"{path} is not a valid test catalogue ({exc}); restore it from the repository.") from None
    try:
        vocabulary = TestVocabulary.model_validate(load_json(VOCABULARY_FILE, Path(path).parent))
    except ValueError as exc:
        raise CatalogError(f"The test vocabulary beside {path} is not valid ({exc}); restore it from the "
                           "repository.") from None
    return TestCatalog(parsed.tests, source=path, vocabulary=vocabulary)


def load_catalog(prompts_dir: Path | None = None) -> TestCatalog:
    """The test catalogue under ``prompts_dir`` (cached per file state)."""
    path = prompt_path(CATALOG_FILE, prompts_dir, suffix=".json")
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        raise CatalogError(f"{path} is missing; restore it from the repository.") from None
    vocabulary = path.with_name(f"{VOCABULARY_FILE}.json")
    try:
        return _catalog_at(str(path), mtime, vocabulary.stat().st_mtime_ns if vocabulary.is_file() else 0)
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
