"""The DDXPlus knowledge base: ``release_evidences.json`` and ``release_conditions.json``.

Codes are the truth (``E_55``, ``V_89``, the condition keys); display texts are cleaned copies for people. The
English release carries translation quirks ("palace" for palate, "haunting" for shooting pain) and the
conditions file inconsistent ICD-10 casing plus one wrong code (SLE is M32, not M34): only the display copies
are corrected, never the codes a prediction or a patient file refers to.

Everything the simulator, the metrics and the agents need as arrays is built here once: roots (one per
evidence), items (a binary root, or one ``root_@_value`` per possible value of a categorical/multi-choice root),
which item is a root's default value, and each pathology's KB roots.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from medeval_core.data.files import read_json

EVIDENCES_FILE = "release_evidences.json"
CONDITIONS_FILE = "release_conditions.json"
VALUE_SEPARATOR = "_@_"
Language = Literal["en", "fr"]

# Display fixes for the English release's machine translations, keyed by the French source text so that a
# correct English text elsewhere is never touched. Codes keep their original meaning.
_ENGLISH_FIXES_BY_FRENCH = {
    "palais": "palate",
    "lancinante": "shooting",
    "déchirante": "tearing",
    "pénible": "nagging",
    "un coup de couteau": "stabbing",
    "une pulsation": "throbbing",
    "épeurante": "frightening",
    "ischio(D)": "hamstring(R)",
    "ischio(G)": "hamstring(L)",
    "Caraibes": "Caribbean",
    "N": "no",
    "O": "yes",
    "NA": "not applicable",
}
_FRENCH_FIXES = {"Océeanie": "Océanie", "N": "non", "O": "oui", "NA": "sans objet"}
# Conditions whose released ICD-10 code is wrong; the released code stays in ``icd10_released``.
_ICD10_FIXES = {"SLE": "M32"}


class KnowledgeBaseError(ValueError):
    """The KB files are missing or not in the DDXPlus release format; the message says what to do."""


def root_of(item: str) -> str:
    """``E_54_@_V_161`` -> ``E_54``; a binary code is its own root."""
    return item.split(VALUE_SEPARATOR, 1)[0]


def clean_text(text: str) -> str:
    """Typographic normalisation shared by every display text: NFC, straight apostrophes, single spaces."""
    text = unicodedata.normalize("NFC", text).replace("\u2019", "'").replace("\u2018", "'")
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class Evidence:
    code: str
    data_type: Literal["B", "C", "M"]
    question_en: str
    question_fr: str
    is_antecedent: bool
    default_value: str | None
    possible_values: tuple[str, ...]
    value_meaning: dict[str, dict[str, str]]
    parent: str | None

    @property
    def binary(self) -> bool:
        return self.data_type == "B"

    def question(self, language: Language = "en") -> str:
        return clean_text((self.question_en if language == "en" else self.question_fr) or self.question_fr
                          or self.question_en)

    def value_text(self, value: str, language: Language = "en") -> str:
        """Cleaned display text of one value code (numeric scale values are shown as they are)."""
        meaning = self.value_meaning.get(value)
        if not meaning:
            return value
        french = meaning.get("fr", "")
        if language == "fr":
            raw = _FRENCH_FIXES.get(french, french or meaning.get("en", value))
        else:
            raw = _ENGLISH_FIXES_BY_FRENCH.get(french) or meaning.get("en") or french or value
        return clean_text(raw)


@dataclass(frozen=True)
class Condition:
    name: str
    name_en: str
    name_fr: str
    icd10_released: str
    severity: int | None
    symptoms: tuple[str, ...]
    antecedents: tuple[str, ...]

    @property
    def icd10(self) -> str:
        """Display ICD-10 code(s): upper case, comma-separated codes spaced, known errors fixed."""
        fixed = _ICD10_FIXES.get(self.name_en) or _ICD10_FIXES.get(self.name)
        if fixed:
            return fixed
        return ", ".join(part.strip().upper() for part in self.icd10_released.split(","))

    def display_name(self, language: Language = "en") -> str:
        return clean_text((self.name_en if language == "en" else self.name_fr) or self.name)

    @property
    def roots(self) -> tuple[str, ...]:
        return self.symptoms + self.antecedents


@dataclass
class KnowledgeBase:
    evidences: dict[str, Evidence]
    conditions: list[Condition]
    language: Language
    roots: list[str] = field(init=False)
    root_index: dict[str, int] = field(init=False)
    items: list[str] = field(init=False)
    item_index: dict[str, int] = field(init=False)
    pathology_names: list[str] = field(init=False)

    @cached_property
    def content_digest(self) -> str:
        """The sha256 of everything the KB holds (codes, values, conditions, texts, language): what a parse of a
        patients file against it depends on, so cached parses are keyed by it."""
        return hashlib.sha256(repr((self.language, self.evidences, self.conditions)).encode()).hexdigest()

    def __post_init__(self) -> None:
        self.roots = list(self.evidences)
        self.root_index = {code: i for i, code in enumerate(self.roots)}
        items: list[str] = []
        for code, evidence in self.evidences.items():
            if evidence.binary:
                items.append(code)
            else:
                items.extend(f"{code}{VALUE_SEPARATOR}{value}" for value in evidence.possible_values)
        self.items = items
        self.item_index = {item: i for i, item in enumerate(items)}
        self.pathology_names = [condition.name for condition in self.conditions]
        self._texts: dict[tuple[str, ...], str] = {}
        self._name_lookup: dict[str, int] = {}
        for i, condition in enumerate(self.conditions):
            for name in (condition.name, condition.name_en, condition.name_fr):
                if name:
                    self._name_lookup.setdefault(name, i)
                    self._name_lookup.setdefault(clean_text(name).casefold(), i)

    # Lookups ----------------------------------------------------------------------------------------------

    @property
    def n_pathologies(self) -> int:
        return len(self.conditions)

    @property
    def n_roots(self) -> int:
        return len(self.roots)

    @cached_property
    def tie_rank(self) -> np.ndarray:
        """Each pathology's index in the official code: its key's position in the sorted keys of
        release_conditions.json (mila-iqia/ddxplus ``sim_utils.load_and_check_data``), which decides among equal
        top masses (``medeval_core.benchmarks.ddxplus.metrics.official_top``)."""
        ordered = {name: rank for rank, name in enumerate(sorted(self.pathology_names))}
        return np.asarray([ordered[name] for name in self.pathology_names], dtype=np.int64)

    def tie_rank_of(self, name: str) -> int | None:
        """``tie_rank`` of a pathology given by any of its names; None for a name outside the KB."""
        index = self.pathology_index(name)
        return None if index is None else int(self.tie_rank[index])

    def pathology_index(self, name: str) -> int | None:
        """Index of a pathology given by its key, English or French name (exact, then case/space-insensitive)."""
        found = self._name_lookup.get(name)
        if found is None:
            found = self._name_lookup.get(clean_text(name).casefold())
        return found

    @cached_property
    def children_of(self) -> dict[str, list[str]]:
        children: dict[str, list[str]] = {}
        for code, evidence in self.evidences.items():
            if evidence.parent is not None:
                children.setdefault(evidence.parent, []).append(code)
        return children

    def question_text(self, root: str, language: Language | None = None) -> str:
        """Cleaned question of a root, cached: consultations ask the same few hundred questions millions of times."""
        key = (root, language or self.language)
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = self.evidences[root].question(key[1])
        return text

    def value_text(self, root: str, value: str, language: Language | None = None) -> str:
        key = (root, value, language or self.language)
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = self.evidences[root].value_text(value, key[2])
        return text

    # Arrays -----------------------------------------------------------------------------------------------

    @cached_property
    def item_root(self) -> np.ndarray:
        """Root index of every item."""
        return np.array([self.root_index[root_of(item)] for item in self.items], dtype=np.int64)

    @cached_property
    def item_is_default(self) -> np.ndarray:
        """True for the items that mean 'nothing to report' (a root's default value): never a positive evidence."""
        flags = np.zeros(len(self.items), dtype=bool)
        for i, item in enumerate(self.items):
            root, _, value = item.partition(VALUE_SEPARATOR)
            evidence = self.evidences[root]
            flags[i] = not evidence.binary and value == evidence.default_value
        return flags

    @cached_property
    def root_parent(self) -> np.ndarray:
        """Parent root index of every root, -1 for a root without parent."""
        return np.array([self.root_index[e.parent] if e.parent else -1 for e in self.evidences.values()],
                        dtype=np.int64)

    @cached_property
    def condition_roots(self) -> np.ndarray:
        """(pathologies x roots) bool: the roots a pathology's KB entry lists (symptoms and antecedents)."""
        mask = np.zeros((self.n_pathologies, self.n_roots), dtype=bool)
        for k, condition in enumerate(self.conditions):
            for root in condition.roots:
                if root in self.root_index:
                    mask[k, self.root_index[root]] = True
        return mask

    def search_questions(self, text: str, language: Language | None = None, limit: int = 20) -> list[str]:
        """Root codes whose question (or code) contains every word of ``text``, case- and accent-insensitive."""
        words = [_fold(word) for word in text.split()]
        language = language or self.language
        hits = []
        for code, evidence in self.evidences.items():
            haystack = _fold(f"{code} {evidence.question(language)}")
            if all(word in haystack for word in words):
                hits.append(code)
        return hits[:limit]


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _read_json(path: Path) -> Any:
    return read_json(
        path, KnowledgeBaseError,
        missing=f"is missing; point --kb (or MEDEVAL_DATA_DIR/ddxplus) at a folder holding the DDXPlus release "
                f"files {EVIDENCES_FILE} and {CONDITIONS_FILE}, or run `python -m medeval_core data fetch ddxplus`.",
        invalid="is not valid JSON; download the release file again")


def _value_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _parse_evidence(code: str, raw: Any, known: set[str]) -> Evidence:
    if not isinstance(raw, dict) or raw.get("data_type") not in ("B", "C", "M"):
        raise KnowledgeBaseError(f"Evidence {code!r} in {EVIDENCES_FILE} has no valid data_type (B, C or M).")
    parent = raw.get("code_question")
    # Some binary antecedents point at a code_question that is not in the KB: they are roots of their own.
    parent = parent if parent in known and parent != code else None
    meaning = raw.get("value_meaning") or {}
    return Evidence(
        code=code,
        data_type=raw["data_type"],
        question_en=str(raw.get("question_en") or ""),
        question_fr=str(raw.get("question_fr") or ""),
        is_antecedent=bool(raw.get("is_antecedent", False)),
        default_value=_value_str(raw.get("default_value")),
        possible_values=tuple(str(v) for v in raw.get("possible-values") or ()),
        value_meaning={str(k): dict(v) for k, v in meaning.items() if isinstance(v, dict)},
        parent=parent,
    )


def _detect_language(raw_conditions: dict[str, Any]) -> Language:
    """The release's language is the one its condition keys are written in (English release: English keys)."""
    french = sum(1 for key, c in raw_conditions.items() if key == c.get("cond-name-fr") != c.get("cond-name-eng"))
    english = sum(1 for key, c in raw_conditions.items() if key == c.get("cond-name-eng") != c.get("cond-name-fr"))
    return "fr" if french > english else "en"


def load_kb(folder: str | Path, language: Language | None = None) -> KnowledgeBase:
    """Read the two KB files from ``folder``. ``language`` (display texts) defaults to the release's language."""
    folder = Path(folder)
    raw_evidences = _read_json(folder / EVIDENCES_FILE)
    raw_conditions = _read_json(folder / CONDITIONS_FILE)
    if not isinstance(raw_evidences, dict) or not isinstance(raw_conditions, dict):
        raise KnowledgeBaseError(f"{folder} does not hold DDXPlus KB files (expected JSON objects keyed by code).")
    known = set(raw_evidences)
    evidences = {code: _parse_evidence(code, raw, known) for code, raw in raw_evidences.items()}
    conditions = []
    for key, raw in raw_conditions.items():
        if not isinstance(raw, dict):
            raise KnowledgeBaseError(f"Condition {key!r} in {CONDITIONS_FILE} is not an object.")
        severity = raw.get("severity")
        conditions.append(Condition(
            name=key,
            name_en=str(raw.get("cond-name-eng") or key),
            name_fr=str(raw.get("cond-name-fr") or key),
            icd10_released=str(raw.get("icd10-id") or ""),
            severity=int(severity) if isinstance(severity, int | float) else None,
            symptoms=tuple(raw.get("symptoms") or ()),
            antecedents=tuple(raw.get("antecedents") or ()),
        ))
    return KnowledgeBase(evidences=evidences, conditions=conditions,
                         language=language or _detect_language(raw_conditions))
