"""Offline diagnosis-equivalence rules: an LLM judge prompt's rules as code, for when no judge endpoint is set.

It reads a response the way such a judge is told to: find the one final selected diagnosis (ignoring the
rationale, differentials, negated text and anything that reads as instructions to a judge), normalise it and the
reference (case, hyphens, word order, spelling, abbreviations, synonyms from a vocabulary file under ``prompts/``)
and compare them as sets of canonical words:

- the same words: correct; the response adds detail to the reference (``nodular melanoma`` for ``melanoma``):
  correct, unless the added words name another disease;
- the response lacks words of the reference (``basal cell carcinoma`` for ``basal-cell-carcinoma-nodular``): a
  broader parent, incorrect; words of both sides differ: a different subtype or a different disease, incorrect;
- a precursor or mimic of the reference (``melanoma-like``, ``melanoma precursor``): incorrect;
- several diagnoses without one final selection, or no final diagnosis at all: incorrect.

Being rules, they cannot be talked into a verdict; being rules, they also miss synonyms their table lacks, which
is why a benchmark records their verdicts under a judge name of their own, never pooled with an LLM judge's.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from rapidfuzz import fuzz, process

from medeval_core.prompts import load_json, prompt_path
from medeval_core.settings import fingerprint

FUZZY_MIN_SCORE = 90
FUZZY_MIN_LENGTH = 5
MAX_DIAGNOSIS_CHARACTERS = 200

_MARKDOWN = re.compile(r"[*_`#>|]+")
_LABEL = r"(?:diagnosis|diagnoses|answer|impression|dx)"
# "Final diagnosis: X", "The most likely diagnosis is X", "Answer - X".
_FINAL_LABEL = re.compile(
    r"\b(?:final|definitive|definite|most\s+likely|most\s+probable|overall|working|leading|primary|favou?red)"
    rf"\s+(?:clinical\s+)?{_LABEL}\b(?:\s+(?:for|of|in)\s+(?:this|the)\s+\w+)?"
    r"\s*(?:is|would\s+be|will\s+be|:|-|–|=)?\s*(?P<dx>.*)",
    re.I,
)
_ANY_LABEL = re.compile(rf"\b{_LABEL}\s*(?:is|would\s+be|:|-|–|=)\s*(?P<dx>.*)", re.I)
_CONSISTENT = re.compile(
    r"\b(?:most\s+(?:likely|consistent\s+with|in\s+keeping\s+with)|consistent\s+with|compatible\s+with|"
    r"suggestive\s+of|diagnostic\s+of|in\s+keeping\s+with|this\s+(?:is|represents))\s+(?P<dx>.*)",
    re.I,
)
_ANSWER_TAG = re.compile(r"<answer>(?P<dx>.*?)</answer>", re.I | re.S)
_DIFFERENTIAL_BEFORE = re.compile(r"(?:differential|ddx|alternative|other|exclude|excluding|rule\s+out)\W*$", re.I)
# Sentences that address the judge rather than describe the lesion; the judge prompt says to treat them as text.
_INSTRUCTION = re.compile(
    r"\bignore\b|\binstruction|\bjudge\b|\bgrader\b|\bgrading\b|\bevaluator\b|\bprompt\b|\bthe\s+rules\b|"
    r"\bcorrect\s*[=:]|\"correct\"|predicted_diagnosis|\bmark\s+(?:this|it|the\s+answer)\b|"
    r"\b(?:answer|respond|reply|output|return)\s+(?:with\s+)?(?:correct|true|json)\b|\bsystem\s*:|\bassistant\s*:",
    re.I,
)
_NEGATED = re.compile(
    r"^(?:not|no|non|never|unlikely|excluded|exclude|ruled\s+out|rule\s+out|r/o|without|less\s+likely|"
    r"rather\s+than|instead\s+of|negative\s+for)\b",
    re.I,
)
_NOT_BUT = re.compile(r"^not\s+.+?\s+but\s+(?:rather\s+)?(?P<dx>.+)$", re.I)
_CLAUSE_END = re.compile(
    r"\s+(?:given|because|due\s+to|based\s+on|as\s+evidenced|as\s+suggested|supported\s+by|characteri[sz]ed\s+by|"
    r"which|showing|featuring|in\s+view\s+of|owing\s+to|although|though|but|rather\s+than|instead\s+of|"
    r"as\s+it|as\s+the|since|considering|for\s+which)\b.*$",
    re.I,
)
_SENTENCE_END = re.compile(r"(?<!\bvs)(?<!\bst)(?<!\bsp)\.(?:\s|$)|\n|!|\?")
_LEADING_HEDGE = re.compile(
    r"^(?:(?:is|are|be|would\s+be|of|an?|the|most|more|highly|very|likely|probably|probable|possibly|possible|"
    r"suspected|presumed|presumptive|clinically|favou?r|favou?ring|consistent\s+with|compatible\s+with|"
    r"suggestive\s+of|in\s+keeping\s+with)\s+)+",
    re.I,
)
_ALTERNATIVES = re.compile(r"\s+(?:or|vs\.?|versus|and/or|and)\s+|\s*[/;,]\s*|\s+-\s+", re.I)
# A quoted label ("Final diagnosis: melanoma" in quotes) is quoted text, not the response's own selection.
_QUOTED_LABEL = re.compile(rf"[\"“][^\"“”\n]*\b{_LABEL}\b[^\"“”\n]*[\"”]", re.I)
_PARENTHETICAL = re.compile(r"\(([^()]*)\)|\[([^\[\]]*)\]")
_PAREN_DROP = re.compile(r"\b(?:vs\.?|versus|or|differential|less\s+likely|rule\s+out|r/o|consider|unlikely|not)\b",
                         re.I)


@dataclass(frozen=True)
class Equivalence:
    """The rules' decision: the final diagnosis found (empty when none), whether it matches, and why."""

    predicted_diagnosis: str
    correct: bool
    reason: str


@dataclass(frozen=True)
class Extraction:
    """The final diagnosis found in a response, and whether it lists several diagnoses without choosing."""

    text: str
    multiple: bool = False


class Vocabulary:
    """Normalisation of diagnosis names into canonical word sets, driven by the synonym file."""

    def __init__(self, data: dict) -> None:
        self.spelling: dict[str, str] = {}
        self.spelling = {self._word(k): self._word(v) for k, v in data["spelling"].items()}
        self.ignored = frozenset(self._word(w) for w in data["ignored_words"])
        self.disease_words = frozenset(self._word(w) for w in data["disease_words"])
        self.disease_suffixes = tuple(data["disease_suffixes"])
        self.not_the_disease = frozenset(self._word(w) for w in data["not_the_disease_words"])
        self.aliases: dict[tuple[str, ...], tuple[str, ...]] = {}
        for key, value in data["aliases"].items():
            self.aliases[tuple(self._words(key))] = tuple(self._words(value))
        self.longest_alias = max(len(key) for key in self.aliases)
        self.canonical_entities = frozenset(frozenset(self._drop_ignored(v)) for v in self.aliases.values())

    @staticmethod
    def _plain(text: str) -> str:
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
        text = re.sub(r"'s\b|’s\b", "", text)
        return re.sub(r"[^a-z0-9]+", " ", text).strip()

    def _word(self, word: str) -> str:
        word = self._plain(word)
        if word.endswith("omata"):
            word = word[:-2]
        elif word.endswith("oses"):
            word = word[:-2] + "is"
        elif len(word) > 4 and word.endswith("s") and not word.endswith(("ss", "us", "is", "os")):
            word = word[:-1]
        return self.spelling.get(word, word)

    def _words(self, text: str) -> list[str]:
        words = [self._word(w) for w in self._plain(text).split()]
        # "non-melanoma", "pseudo-lymphoma": the prefix negates or changes the next word, so keep them together.
        joined: list[str] = []
        for word in words:
            if joined and joined[-1] in ("non", "pseudo", "pre"):
                joined[-1] += word
            else:
                joined.append(word)
        return joined

    def _drop_ignored(self, words: tuple[str, ...] | list[str]) -> list[str]:
        return [w for w in words if w not in self.ignored]

    def canonical(self, text: str) -> frozenset[str]:
        words = self._words(text)
        out: list[str] = []
        i = 0
        while i < len(words):
            for size in range(min(self.longest_alias, len(words) - i), 0, -1):
                replacement = self.aliases.get(tuple(words[i : i + size]))
                if replacement is not None:
                    out.extend(replacement)
                    i += size
                    break
            else:
                out.append(words[i])
                i += 1
        return frozenset(self._drop_ignored(out))

    def is_disease_word(self, word: str) -> bool:
        return word in self.disease_words or word.endswith(self.disease_suffixes)

    def names_disease(self, text: str) -> bool:
        return any(self.is_disease_word(word) for word in self.canonical(text))


class DiagnosisRules:
    """The rules over one vocabulary file; ``model`` names the file's content (``rules:`` and its sha256 prefix)."""

    def __init__(self, vocabulary: Vocabulary, vocabulary_hash: str) -> None:
        self.vocabulary = vocabulary
        self.model = f"rules:{vocabulary_hash[:12]}"

    @classmethod
    def from_file(cls, name: str, prompts_dir: Path | None = None) -> DiagnosisRules:
        """The rules over ``prompts/<name>.json``."""
        data = load_json(name, prompts_dir)
        if not isinstance(data, dict):
            raise ValueError(f"{prompt_path(name, prompts_dir, '.json')} must hold a JSON object.")
        return cls(Vocabulary(data), fingerprint(data))

    # Deciding -----------------------------------------------------------------------------------------------

    def verdict(self, reference: str, response: str) -> Equivalence:
        reference_words = self.vocabulary.canonical(reference)
        if not reference_words:
            return Equivalence(predicted_diagnosis="", correct=False,
                              reason="The reference diagnosis is empty after normalisation.")
        found = self.extract(response, reference_words)
        if found is None:
            return Equivalence(predicted_diagnosis="", correct=False,
                              reason="No final diagnosis could be identified in the response.")
        if found.multiple:
            return Equivalence(predicted_diagnosis=found.text, correct=False,
                              reason="Several diagnoses are given without one final selection.")
        correct, reason = self.compare(reference_words, self.vocabulary.canonical(found.text))
        return Equivalence(predicted_diagnosis=found.text, correct=correct, reason=reason)

    def compare(self, reference: frozenset[str], predicted: frozenset[str]) -> tuple[bool, str]:
        predicted = self._fuzzy_align(reference, predicted)
        if not predicted:
            return False, "The final statement names no diagnosis."
        if predicted & self.vocabulary.not_the_disease:
            return False, "The final diagnosis is a related condition, precursor or mimic, not the reference."
        if predicted == reference:
            return True, "The final diagnosis is equivalent to the reference."
        if reference < predicted:
            extra = predicted - reference
            if any(self.vocabulary.is_disease_word(w) for w in extra) and \
                    predicted not in self.vocabulary.canonical_entities:
                return False, f"The final diagnosis adds another disease ({', '.join(sorted(extra))})."
            return True, "The final diagnosis is the reference diagnosis with added detail."
        if predicted < reference:
            missing = ", ".join(sorted(reference - predicted))
            return False, f"The final diagnosis is broader than the reference; the subtype ({missing}) is missing."
        if predicted & reference:
            return False, "The final diagnosis is a different subtype or a related condition, not the reference."
        return False, "The final diagnosis is a different disease."

    @staticmethod
    def _fuzzy_align(reference: frozenset[str], predicted: frozenset[str]) -> frozenset[str]:
        """Map a misspelt word (``seborheic``) onto the reference word it clearly means."""
        aligned = set()
        for word in predicted:
            if word in reference or len(word) < FUZZY_MIN_LENGTH:
                aligned.add(word)
                continue
            match = process.extractOne(word, reference, scorer=fuzz.ratio, score_cutoff=FUZZY_MIN_SCORE)
            aligned.add(match[0] if match else word)
        return frozenset(aligned)

    # Extracting ---------------------------------------------------------------------------------------------

    def extract(self, response: str, reference: frozenset[str] | None = None) -> Extraction | None:
        """The response's final selected diagnosis, or None when it has none."""
        text = response
        if "</think>" in text and text.rsplit("</think>", 1)[1].strip():
            text = text.rsplit("</think>", 1)[1]
        tags = [m.group("dx") for m in _ANSWER_TAG.finditer(text)]
        if tags:
            text = tags[-1]
        text = _QUOTED_LABEL.sub(" ", text)
        sentences = [s for s in self._statements(text) if not _INSTRUCTION.search(s)]
        for pattern, needs_disease, window in ((_FINAL_LABEL, False, None), (_ANY_LABEL, True, None),
                                               (_CONSISTENT, True, 2)):
            candidates = sentences if window is None else sentences[-window:]
            for sentence in reversed(candidates):
                found = self._from_sentence(sentence, pattern, needs_disease, reference)
                if found is not None:
                    return found
        # A response that is only a name ("Melanoma", a classification-style answer) is its own selection.
        bare = _MARKDOWN.sub("", text).strip().rstrip(".")
        if (bare and len(bare.split()) <= 8 and not _SENTENCE_END.search(bare) and not _NEGATED.match(bare)
                and not _INSTRUCTION.search(bare) and not _ANY_LABEL.search(bare)
                and self.vocabulary.names_disease(bare)):
            return self._selection(bare, reference)
        return None

    @staticmethod
    def _statements(text: str) -> list[str]:
        """Lines, with a label alone on its line joined to the next line (``Final diagnosis:\\nMelanoma``)."""
        lines = [_MARKDOWN.sub("", line).strip() for line in text.splitlines()]
        lines = [line for line in lines if line]
        joined: list[str] = []
        for line in lines:
            if joined and re.search(rf"{_LABEL}\s*[:\-–]?\s*$", joined[-1], re.I):
                joined[-1] = f"{joined[-1].rstrip(':-– ')}: {line}"
            else:
                joined.append(line)
        statements: list[str] = []
        for line in joined:
            statements.extend(part.strip() for part in re.split(r"(?<=[.!?])\s+(?=[A-Z])", line) if part.strip())
        return statements

    def _from_sentence(self, sentence: str, pattern: re.Pattern[str], needs_disease: bool,
                       reference: frozenset[str] | None) -> Extraction | None:
        for match in reversed(list(pattern.finditer(sentence))):
            if _DIFFERENTIAL_BEFORE.search(sentence[: match.start()]):
                continue
            span = self._clean(match.group("dx"))
            if not span or _NEGATED.match(span):
                continue
            if needs_disease and not self.vocabulary.names_disease(span):
                continue
            return self._selection(span, reference)
        return None

    @staticmethod
    def _clean(span: str) -> str:
        span = span.strip().strip(":-–= \"'")
        if (not_but := _NOT_BUT.match(span)) is not None:
            span = not_but.group("dx")
        end = _SENTENCE_END.search(span)
        if end is not None:
            span = span[: end.start()]
        span = _CLAUSE_END.sub("", span)
        span = _LEADING_HEDGE.sub("", span.strip())
        if len(span) > MAX_DIAGNOSIS_CHARACTERS:
            # No diagnosis name is this long; keep the verdict readable when a response runs on without a stop.
            span = span[:MAX_DIAGNOSIS_CHARACTERS].rsplit(" ", 1)[0]
        return span.strip().strip(".,;: \"'")

    def _selection(self, span: str, reference: frozenset[str] | None) -> Extraction:
        """Decide whether ``span`` is one diagnosis (with qualifiers) or several alternatives."""
        if reference is not None and self.vocabulary.canonical(span) == reference:
            # A name that itself contains "and" or a comma ("Infestations and Bites") is one diagnosis.
            return Extraction(text=span)

        def keep_parenthetical(match: re.Match[str]) -> str:
            inner = match.group(1) or match.group(2) or ""
            # A parenthesis naming a disease restates (an abbreviation) or hedges (an alternative): either way the
            # main text carries the selection. Qualifiers such as "(nodular type)" stay.
            if _PAREN_DROP.search(inner) or self.vocabulary.names_disease(inner):
                return " "
            return f" {inner} "

        main = re.sub(r"\s+", " ", _PARENTHETICAL.sub(keep_parenthetical, span)).strip()
        parts = [p.strip() for p in _ALTERNATIVES.split(main) if p and p.strip()]
        kept = [p for p in parts if not _NEGATED.match(p)]
        # Two names for one disease ("SCC in situ / Bowen's disease") are still one selection.
        diseases = {self.vocabulary.canonical(p) for p in kept if self.vocabulary.names_disease(p)}
        if len(diseases) > 1:
            return Extraction(text=span, multiple=True)
        return Extraction(text=" ".join(kept) if len(kept) != len(parts) else main)

