"""The gatekeeper (design.md §3.3) behind one interface, and the SDBench case as an ``Environment``.

The gatekeeper answers each question or test order of a turn from the case, as chart text:
- *offline* (the default when no chat model serves the ``gatekeeper`` role), for structured cases: an order is
  answered with the case's own text (REAL) when it is the case's test by name; or when the catalogue's vocabulary
  names the catalogue test it means ("roentgenogram of the thorax", "TSH and free T4") and the case has that test,
  a line of a panel for it on the same specimen, or a panel that holds it; these need no sentence encoding. An order
  the vocabulary does not name is encoded (a turn's together) and taken for the most similar catalogue test, or
  case test name, above a threshold, never across imaging modalities or specimens or between two different catalogue
  tests. A test the case lacks gets the catalogue's normal-range result: SYNTHETIC. A question is matched to the
  history and examination sentences the same way.
- *LLM*: the chat model reads the full case under the ``sdbench_gatekeeper_system`` prompt (the paper's rules) and
  returns one JSON result per request with its source; the agent sees only the rendered results.
Both refuse vague orders ("blood work", "all labs"): REFUSED. Every answer is stored with its source and what it
matched (the turn's provenance); the agent sees a numbered ``Test Results:`` (or ``Answers:``) block only.
What is withheld (``interpretation="withhold"``, the default; ``"keep"`` returns results as written, and a run
records which): from a real result, an interpretive clause (one of ``INTERPRETIVE_PHRASES`` to the end of its
sentence: "..., consistent with / supportive of / hinting at Hirschsprung disease") and an
Interpretation/Impression/Diagnosis/Conclusion/Assessment line, when it names the case's diagnosis; from an answer
to a question, also any sentence that names it. What is returned: every finding as the case states it, including
a result whose finding is the diagnosis ("Skin biopsy: basal cell carcinoma"): the agent ordered the test that shows
it. The gatekeeper reports findings; it never interprets them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from medeval_core.benchmarks.sdbench.cases import SDBenchCase
from medeval_core.benchmarks.sdbench.catalog import (
    CatalogEntry,
    TestCatalog,
    embed,
    guess_kind,
    is_vague,
    modalities,
    name_key,
    plain,
)
from medeval_core.benchmarks.sdbench.costing import VISIT_PRICE, Pricer, TestPrice
from medeval_core.data.files import json_value
from medeval_core.interaction import EpisodeError, Step

Source = Literal["REAL", "SYNTHETIC", "REFUSED"]
Interpretation = Literal["withhold", "keep"]
"""What a real result's interpretive clauses that name the case's diagnosis become: withheld (the default and
the paper's rule) or kept (to measure what the rule changes); a run records its choice."""
TEST_THRESHOLD = 0.72
"""Cosine similarity at or above which an ordered test is taken for one of the case's tests by name alone (when
no catalogue entry decides); on the shared cases it matches no absent test (bench/sdbench_gatekeeper_bench.py)."""
CATALOG_HOP_THRESHOLD = 0.70
"""Cosine similarity at or above which an ordered name the catalogue lacks is taken for a catalogue test, to find
that test in the case under another of its names; 0.70 on the shared cases: 87.6 % of synonyms outside the
catalogue found, no absent test falsely matched beyond a panel's own component (bench/sdbench_gatekeeper_bench.py;
0.60 finds 93.8 % but answers "carboxyhemoglobin" with the hemoglobin)."""
QUESTION_THRESHOLD = 0.45
"""Cosine similarity at or above which a history or examination sentence answers a question."""
MAX_SENTENCES = 2

GENERIC_NORMAL = {"lab": "Within normal limits.", "imaging": "No acute abnormality.",
                  "procedure": "Unremarkable."}
NOT_REPORTED = "The patient does not report this."
EXAM_NORMAL = "Unremarkable on examination."
REFUSAL = "Please order a specific test; '{request}' does not name one."
_EXAM_WORDS = re.compile(r"\b(exam\w*|auscultat\w*|palpat\w*|inspect\w*|percuss\w*|vital\w*|temperature|pulse|"
                         r"blood pressure|heart rate|respiratory rate|oxygen saturation|reflex\w*|murmur\w*|"
                         r"tender\w*|look at|listen)\b", re.I)
# The phrases that tie findings to a disease (an interpretation, not a finding); a clause from one of them to the end
# of its sentence is withheld when it names the case's diagnosis. "Biopsy: squamous cell carcinoma" states a finding
# and stays; "..., consistent with squamous cell carcinoma" interprets one and goes.
INTERPRETIVE_PHRASES = (
    "consistent with", "compatible with", "in keeping with", "in line with", "supportive of", "supporting",
    "supports", "suggestive of", "suggesting", "suggests", "indicative of", "indicating", "indicates",
    "diagnostic of", "diagnostic for", "characteristic of", "typical of", "classic for", "classic of",
    "pathognomonic of", "pathognomonic for", "confirming the diagnosis of", "confirming", "confirms", "confirmed",
    "confirmatory of", "confirmatory for", "confirmatory findings of", "confirmatory findings for", "representing",
    "represents", "most likely", "likely", "probable", "probably", "possibly", "hinting at", "hints at",
    "pointing to", "points to", "pointing towards", "pointing toward", "concerning for", "worrisome for",
    "suspicious for", "raising concern for", "raising suspicion for", "in favour of", "in favor of", "favouring",
    "favoring", "reflecting", "reflects", "attributable to", "secondary to", "due to", "caused by",
    "associated with", "as seen in", "seen in", "in the setting of", "the diagnosis of", "diagnosis of",
)
_INTERPRETATION = re.compile(
    r"[,;:]?\s*(?:which\s+(?:is|are|was|were)\s+|that\s+(?:is|are)\s+|and\s+|these\s+findings\s+are\s+|"
    r"(?:the\s+)?findings?\s+(?:are\s+|is\s+)?)?(?:(?:highly|strongly|most|very|more|quite|most\s+likely)\s+)?"
    r"\b(?:" + "|".join(re.escape(p).replace(r"\ ", r"\s+") for p in sorted(INTERPRETIVE_PHRASES, key=len,
                                                                         reverse=True)) + r")\b[^.;\n]*",
    re.I)


# Questions whose topic names a chart section are answered with that section (sentence embeddings of short
# questions such as "Do you smoke?" score too low against "Social history: Non-smoker" to be trusted alone).
_TOPICS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = tuple((re.compile(pattern, re.I), sections) for
                                                                     pattern, sections in (
    (r"\b(smok\w*|tobacco|cigar\w*|alcohol|drink\w*|recreational|illicit|occupation|work\w*|job|travel\w*|"
     r"sexual\w*|partners?|living|lives|diet|exercise)\b", ("Social history",)),
    (r"\b(family|mother|father|parents?|siblings?|brothers?|sisters?|relatives?|inherit\w*)\b",
     ("Family history",)),
    (r"\b(medications?|medicines?|pills?|prescri\w*|supplements?|taking any)\b",
     ("Medications", "Past medical history")),
    (r"\ballerg\w*", ("Allergies",)),
    (r"\b(past medical|medical history|previous (?:illness\w*|surger\w*|hospital\w*)|surgical history|"
     r"chronic (?:conditions?|illness\w*)|other conditions)\b", ("Past medical history",)),
    (r"\b(vital signs?|vitals|temperature|fever|blood pressure|heart rate|pulse|respiratory rate|"
     r"oxygen saturation)\b", ("Vital Signs", "Vital signs")),
))


class Questions(BaseModel):
    kind: Literal["questions"] = "questions"
    items: list[str] = Field(min_length=1)


class Tests(BaseModel):
    __test__ = False  # not a pytest class, whatever its name

    kind: Literal["tests"] = "tests"
    items: list[str] = Field(min_length=1)


class Diagnosis(BaseModel):
    kind: Literal["diagnosis"] = "diagnosis"
    text: str = Field(min_length=1)


Action = Questions | Tests | Diagnosis


class Answer(BaseModel):
    """One request's answer. ``text`` is what the agent reads; the rest is stored provenance."""

    request: str
    text: str
    source: Source
    matched: str | None = None
    similarity: float | None = None
    withheld: list[str] = Field(default_factory=list)


class Reply(BaseModel):
    """What the agent sees after a turn (its ``text``); ``answers`` stay in the turn's provenance."""

    text: str
    answers: list[Answer] = Field(default_factory=list)
    prices: list[TestPrice] = Field(default_factory=list)
    visit_charged: bool = False


def render(kind: str, answers: Sequence[Answer]) -> str:
    """The numbered block the agent reads: each request repeated with its answer, never its source."""
    title = "Test Results:" if kind == "tests" else "Answers:"
    lines = [title]
    for number, answer in enumerate(answers, start=1):
        text = answer.text.replace("\n", "; ")
        lines.append(f"{number}. {answer.request}: {text}")
    return "\n".join(lines)


def diagnosis_names(diagnosis: str) -> list[set[str]]:
    """The word sets that name ``diagnosis``: its words longer than three letters, any abbreviation it gives in
    parentheses ("... encephalopathy (PML)"), and its initials when they are three letters or more ("AML")."""
    main = re.sub(r"\([^()]*\)", " ", diagnosis)
    names = [{w for w in plain(main).split() if len(w) > 3}]
    names += [set(plain(abbreviation).split()) for abbreviation in re.findall(r"\(([^()]+)\)", diagnosis)]
    initials = "".join(word[0] for word in plain(main).split() if word not in ("of", "the", "and", "with"))
    if len(initials) >= 3:
        names.append({initials})
    return [name for name in names if name]


def names_diagnosis(text: str, diagnosis: str, share: float = 1.0) -> bool:
    """Whether ``text`` names ``diagnosis``: holds at least ``share`` of the words of one of its names."""
    words = set(plain(text).split())
    return any(len(name & words) >= share * len(name) for name in diagnosis_names(diagnosis))


def withhold_interpretation(text: str, diagnosis: str) -> tuple[str, list[str]]:
    """``text`` without the interpretive clauses (``INTERPRETIVE_PHRASES`` to the end of the sentence) and the
    interpretation lines that name ``diagnosis``, half of a name's words being enough (what was removed is
    returned for the record)."""

    def names_it(fragment: str) -> bool:
        return names_diagnosis(fragment, diagnosis, share=0.5)

    removed: list[str] = []
    kept_lines = []
    for line in text.splitlines():
        if re.match(r"\s*(interpretation|impression|diagnosis|conclusion|assessment)\s*:", line, re.I) and \
                names_it(line):
            removed.append(line.strip())
            continue

        def cut(match: re.Match[str]) -> str:
            if names_it(match.group(0)):
                removed.append(match.group(0).strip(" ,;"))
                return ""
            return match.group(0)

        kept_lines.append(_INTERPRETATION.sub(cut, line).rstrip(" ,;"))
    kept = "\n".join(line for line in kept_lines if re.search(r"[A-Za-z]", line))
    return (kept or "Abnormal findings; the report gives no further detail.") if removed else text, removed


class Gatekeeper(Protocol):
    """Answers one turn's requests about one case."""

    name: str

    def answer(self, kind: Literal["questions", "tests"], requests: Sequence[str]) -> list[Answer]: ...

    def describe(self) -> dict[str, Any]: ...


class _Scored(BaseModel):
    index: int
    similarity: float


class _Candidate(BaseModel):
    label: str
    text: str
    parent: str | None = None


_SPECIMENS = {"urine": r"urin\w*|ua|dipstick|micturition", "csf": r"csf|cerebrospinal|spinal fluid|lumbar puncture",
              "synovial": r"synovial|joint fluid|joint aspirat\w*|arthrocentesis", "stool": r"stool|fec\w*|faec\w*",
              "pleural": r"pleural|thoracentesis", "peritoneal": r"ascit\w*|peritoneal|paracentesis",
              "sputum": r"sputum", "sweat": r"sweat"}


def _specimens(text: str) -> frozenset[str]:
    """The non-blood specimens a name mentions (a test without one is on blood or serum)."""
    words = plain(text)
    return frozenset(name for name, pattern in _SPECIMENS.items() if re.search(rf"\b(?:{pattern})\b", words))


def _same_specimen(request: str, candidate: _Candidate) -> bool:
    return _specimens(request) == _specimens(f"{candidate.parent or ''} {candidate.label}")


def _panel_components(name: str, text: str) -> list[_Candidate]:
    """A panel's ``label: value`` lines as candidates of their own (``Hemoglobin`` inside a blood count)."""
    lines = [line for line in text.splitlines() if ":" in line]
    if len(lines) < 2:
        return []
    return [_Candidate(label=line.split(":", 1)[0].strip(), text=line.strip(), parent=name) for line in lines
            if line.split(":", 1)[0].strip()]


class OfflineGatekeeper:
    """Matches requests to a structured case's findings; see the module docstring."""

    name = "offline"

    def __init__(self, case: SDBenchCase, catalog: TestCatalog, test_threshold: float = TEST_THRESHOLD,
                 question_threshold: float = QUESTION_THRESHOLD,
                 catalog_threshold: float = CATALOG_HOP_THRESHOLD,
                 interpretation: Interpretation = "withhold") -> None:
        if case.findings is None:
            raise EpisodeError(f"Case {case.case_id} has no structured findings, so the offline gatekeeper cannot "
                               "answer it; run it with --gatekeeper llm.")
        self.case = case
        self.catalog = catalog
        self.test_threshold = test_threshold
        self.question_threshold = question_threshold
        self.catalog_threshold = catalog_threshold
        self.interpretation = interpretation
        findings = case.findings
        self.tests = [_Candidate(label=name, text=text) for name, text in findings.tests.items()]
        self.components = [c for name, text in findings.tests.items() for c in _panel_components(name, text)]
        self.sentences = [
            _Candidate(label=section, text=sentence, parent=area)
            for area, entries in (("history", findings.history), ("examination", findings.examination))
            for section, text in entries.items() for sentence in _sentences(text)
        ]
        # Each test's and panel line's word set and catalogue entry, worked out once per case, not per order
        # (entry None: a name the catalogue lacks).
        self._test_keys = [name_key(candidate.label) for candidate in self.tests]
        self._component_keys = [name_key(candidate.label) for candidate in self.components]
        self._entries = [catalog.exact(candidate.label) for candidate in self.tests]
        self._component_entries = [catalog.exact(candidate.label) for candidate in self.components]
        self._entries_by_embedding: list[CatalogEntry | None] | None = None
        self._names_encoded = False
        self._sentence_index: Any = None

    def describe(self) -> dict[str, Any]:
        return {"gatekeeper": self.name, "test_threshold": self.test_threshold,
                "question_threshold": self.question_threshold, "catalog_threshold": self.catalog_threshold,
                "catalog_entries": len(self.catalog), "interpretation": self.interpretation}

    def answer(self, kind: Literal["questions", "tests"], requests: Sequence[str]) -> list[Answer]:
        if kind == "questions":
            return [self._question(request) for request in requests]
        answers = [self._by_name(request) for request in requests]
        # Only orders that neither the case's names nor the vocabulary decide are encoded: together, in one call.
        pending = [i for i, found in enumerate(answers) if found is None]
        orders = [self.catalog.vocabulary.rewritten(requests[i]) for i in pending]
        # An order matched by meaning is then compared with the case's own names: they go into the same encoder
        # call the first time (each call has a fixed cost larger than a few short names; ``embed`` remembers them).
        vectors = embed(orders + self._names_to_compare())[:len(orders)] if pending else None
        for row, i in enumerate(pending):
            assert vectors is not None
            answers[i] = self._by_meaning(requests[i], vectors[row])
        return [answer for answer in answers if answer is not None]

    # Tests -----------------------------------------------------------------------------------------------------

    def _real(self, request: str, candidate: _Candidate, similarity: float | None = None) -> Answer:
        text, withheld = self._withhold(candidate.text)
        if candidate.parent is not None and candidate.parent not in ("history", "examination"):
            matched = f"{candidate.parent}: {candidate.label}"
        else:
            matched = candidate.label
        return Answer(request=request, text=text, source="REAL", matched=matched,
                      similarity=None if similarity is None else round(similarity, 4), withheld=withheld)

    def _withhold(self, text: str) -> tuple[str, list[str]]:
        if self.interpretation == "keep":
            return text, []
        return withhold_interpretation(text, self.case.final_diagnosis)

    def _told(self, text: str) -> tuple[str, list[str]]:
        """History or examination ``text`` as the answer to a question: without the sentences that name the case's
        diagnosis (all the words of one of its names) and without interpretive clauses naming it."""
        if self.interpretation == "keep":
            return text, []
        sentences = _sentences(text)
        removed = [s for s in sentences if names_diagnosis(s, self.case.final_diagnosis)]
        kept, withheld = self._withhold(" ".join(s for s in sentences if s not in removed))
        return (kept if kept.strip() else ""), removed + withheld

    def _by_name(self, request: str) -> Answer | None:
        """The answer found without encoding the order: the case's own name, a refusal, or, for an order the
        vocabulary names, the case's result of that test or that test's normal result."""
        key = name_key(request)
        for candidate, candidate_key in zip(self.tests, self._test_keys, strict=True):
            if candidate_key == key:
                return self._real(request, candidate)
        for candidate, candidate_key in zip(self.components, self._component_keys, strict=True):
            if candidate_key == key and _same_specimen(request, candidate):
                return self._real(request, candidate)
        if is_vague(request):
            return Answer(request=request, text=REFUSAL.format(request=request), source="REFUSED")
        wanted = self.catalog.resolve(request)
        return None if wanted is None else self._for_test(request, wanted)

    def _by_meaning(self, request: str, vector: Any) -> Answer:
        """An order the vocabulary does not name: the catalogue test it is most like (at the catalogue
        threshold), else the case's test most like it (at the test threshold), else a normal result."""
        via = self.catalog.match(request, threshold=self.catalog_threshold, vector=vector)
        if via is not None:
            return self._for_test(request, via.entry, via.similarity)
        candidates = list(range(len(self.tests) + len(self.components)))
        found = self._similar(request, candidates, vector[None, :], None)
        if found is not None:
            return found
        match = self.catalog.match(request, vector=vector)
        if match is not None:
            return self._catalog_normal(request, match.entry, round(match.similarity, 4))
        return Answer(request=request, text=GENERIC_NORMAL[guess_kind(request)], source="SYNTHETIC")

    def _for_test(self, request: str, wanted: CatalogEntry, similarity: float | None = None) -> Answer:
        """The case's result of catalogue test ``wanted``, else its normal result (SYNTHETIC)."""
        found = self._reporting(request, wanted)
        if found is not None:
            return self._real(request, found, similarity)
        # A case name no catalogue name decides (a panel line "Cytospin...", a test "Serology") may still be it.
        unknown = [i for i, entry in enumerate(self._entries + self._component_entries) if entry is None]
        answer = self._similar(request, unknown, self.catalog.name_vectors(wanted), wanted) if unknown else None
        return answer or self._catalog_normal(request, wanted, similarity)

    def _reporting(self, request: str, wanted: CatalogEntry) -> _Candidate | None:
        """The case's result of catalogue test ``wanted``: a test of that name, else a line of a panel for that
        test from the same specimen (a urinalysis's "Glucose" is not blood glucose), else a panel that holds it
        (a metabolic panel for electrolytes; a CBC written as prose for haemoglobin, not one whose lines lack
        it), else, for a panel ordered, the one of its tests the case has."""
        for entries in (self._entries, None):
            if entries is None:  # the case's names the vocabulary lacks, taken by embedding, only when needed
                if all(entry is not None for entry in self._entries):
                    return None
                entries = self._embedded_entries()
            tests = [(candidate, entry) for candidate, entry in zip(self.tests, entries, strict=True)
                     if entry is not None]
            for candidate, entry in tests:
                if entry == wanted:
                    return candidate
            if entries is self._entries:
                for candidate, line_entry in zip(self.components, self._component_entries, strict=True):
                    if line_entry == wanted and _same_specimen(request, candidate):
                        return candidate
            for candidate, entry in tests:
                if self.catalog.holds(entry, wanted) and (
                        self.catalog.parts(wanted) or not self._has_lines(candidate.label)):
                    return candidate
            for candidate, entry in tests:
                if entry.name in self.catalog.parts(wanted):
                    return candidate
        return None

    def _has_lines(self, test: str) -> bool:
        return any(component.parent == test for component in self.components)

    def _names_to_compare(self) -> list[str]:
        """The case's names an order matched by meaning may be compared with (``_similar``,
        ``_embedded_entries``), until they have been encoded once."""
        if self._names_encoded:
            return []
        self._names_encoded = True
        return [candidate.label for candidate in self.tests + self.components] + [
            self.catalog.vocabulary.rewritten(self.tests[i].label)
            for i, entry in enumerate(self._entries) if entry is None]

    def _embedded_entries(self) -> list[CatalogEntry | None]:
        """The case's test names as catalogue tests, those the vocabulary lacks taken by embedding (at the
        catalogue threshold, same modality): "Hematologic" is the blood count. Once per case, on first need."""
        if self._entries_by_embedding is None:
            unknown = [i for i, entry in enumerate(self._entries) if entry is None]
            vectors = embed([self.catalog.vocabulary.rewritten(self.tests[i].label) for i in unknown])
            entries = list(self._entries)
            for row, i in enumerate(unknown):
                match = self.catalog.match(self.tests[i].label, threshold=self.catalog_threshold,
                                           vector=vectors[row])
                entries[i] = None if match is None else match.entry
            self._entries_by_embedding = entries
        return self._entries_by_embedding

    def _similar(self, request: str, among: Sequence[int], queries: Any,
                 wanted: CatalogEntry | None) -> Answer | None:
        """The case's test (or panel line) in ``among`` whose name is most like any of ``queries`` (unit
        vectors: the order's, or the catalogue names of the test it names), at or above the test threshold;
        never a known different test, another imaging modality or another specimen."""
        candidates = self.tests + self.components
        if not among or not candidates:
            return None
        # only the names compared are encoded (those the vocabulary knows were decided without it)
        scores = (embed([candidates[i].label for i in among]) @ queries.T).max(axis=1)
        entries = self._entries + self._component_entries
        request_modalities = modalities(request)
        for row in sorted(range(len(among)), key=lambda r: -float(scores[r]))[:5]:
            if float(scores[row]) < self.test_threshold:
                break
            candidate, known = candidates[among[row]], entries[among[row]]
            if wanted is not None and known is not None and not self.catalog.holds(known, wanted):
                continue  # two different catalogue tests (chest X-ray is not chest CT)
            label_modalities = modalities(candidate.label) | modalities(candidate.parent or "")
            if request_modalities != label_modalities and (request_modalities or label_modalities):
                continue
            if not _same_specimen(request, candidate):
                continue
            return self._real(request, candidate, float(scores[row]))
        return None

    @staticmethod
    def _catalog_normal(request: str, entry: CatalogEntry, similarity: float | None = None) -> Answer:
        return Answer(request=request, text=entry.normal, source="SYNTHETIC", matched=entry.name,
                      similarity=None if similarity is None else round(similarity, 4))

    # Questions ---------------------------------------------------------------------------------------------------

    def _question(self, request: str) -> Answer:
        assert self.case.findings is not None
        sections = {**self.case.findings.history, **self.case.findings.examination}
        for pattern, names in _TOPICS:
            if pattern.search(request):
                for name in names:
                    if name in sections:
                        text, withheld = self._told(sections[name])
                        return Answer(request=request, text=text or NOT_REPORTED, source="REAL", matched=name,
                                      withheld=withheld)
        if not self.sentences:
            return Answer(request=request, text=NOT_REPORTED, source="SYNTHETIC")
        if self._sentence_index is None:
            self._sentence_index = embed([f"{c.label}: {c.text}" for c in self.sentences])
        scores = self._sentence_index @ embed([request])[0]
        best = sorted(range(len(self.sentences)), key=lambda i: -float(scores[i]))[:MAX_SENTENCES]
        found = [_Scored(index=i, similarity=float(scores[i])) for i in best
                 if float(scores[i]) >= self.question_threshold]
        if not found:
            text = EXAM_NORMAL if _EXAM_WORDS.search(request) else NOT_REPORTED
            return Answer(request=request, text=text, source="SYNTHETIC")
        chosen = sorted(found, key=lambda match: match.index)
        text, withheld = self._told(" ".join(self.sentences[match.index].text for match in chosen))
        return Answer(request=request, text=text or NOT_REPORTED, source="REAL",
                      matched="; ".join(self.sentences[m.index].label for m in chosen),
                      similarity=round(max(m.similarity for m in chosen), 4), withheld=withheld)


def _sentences(text: str) -> list[str]:
    parts: list[str] = []
    for line in text.splitlines():
        parts.extend(p.strip() for p in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9])", line) if p.strip())
    return parts


class LLMGatekeeper:
    """The chat model under the gatekeeper prompt; it keeps the exchange so synthetic results stay consistent."""

    name = "llm"

    def __init__(self, case: SDBenchCase, backend: Any, system_template: str,
                 on_call: Callable[[Any], None] | None = None, max_invalid: int = 1,
                 interpretation: Interpretation = "withhold") -> None:
        from medeval_core.prompts import fill

        self.case = case
        self.interpretation = interpretation
        self.backend = backend
        self.on_call = on_call
        self.max_invalid = max_invalid
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": fill(system_template, case=case.full_text)}]

    def describe(self) -> dict[str, Any]:
        return {"gatekeeper": self.name, "interpretation": self.interpretation, **self.backend.describe()}

    def answer(self, kind: Literal["questions", "tests"], requests: Sequence[str]) -> list[Answer]:
        refused = {i: Answer(request=r, text=REFUSAL.format(request=r), source="REFUSED")
                   for i, r in enumerate(requests) if kind == "tests" and is_vague(r)}
        asked = [r for i, r in enumerate(requests) if i not in refused]
        answered = iter(self._ask(kind, asked) if asked else [])
        return [refused[i] if i in refused else next(answered) for i in range(len(requests))]

    @staticmethod
    def _request_message(kind: str, requests: Sequence[str]) -> dict[str, str]:
        label = "Test orders" if kind == "tests" else "Questions"
        body = "\n".join(f"{n}. {r}" for n, r in enumerate(requests, start=1))
        return {"role": "user", "content": f"{label}:\n{body}"}

    def remember(self, kind: str, answers: Sequence[Answer]) -> None:
        """An exchange answered before (a restored walkthrough), kept in the conversation so that later synthetic
        results stay consistent with it."""
        self.messages.append(self._request_message(kind, [a.request for a in answers]))
        results = [{"request": a.request, "result": a.text, "source": a.source} for a in answers]
        self.messages.append({"role": "assistant", "content": json.dumps({"results": results})})

    def _ask(self, kind: str, requests: Sequence[str]) -> list[Answer]:
        self.messages.append(self._request_message(kind, requests))
        problem = ""
        for _ in range(self.max_invalid + 1):
            reply = self.backend.complete(self.messages, on_call=self.on_call, role="gatekeeper")
            self.messages.append({"role": "assistant", "content": reply})
            try:
                return self._parse(reply, requests)
            except ValueError as exc:
                problem = str(exc)
                self.messages.append({"role": "user", "content": f"That reply was not valid: {problem}. Answer "
                                                                 "with the JSON object the instructions describe."})
        raise EpisodeError(f"The gatekeeper model gave no valid answer: {problem}.")

    def _parse(self, reply: str, requests: Sequence[str]) -> list[Answer]:
        start, end = reply.find("{"), reply.rfind("}")
        try:
            data = json_value(reply[start:end + 1]) if start >= 0 else None
        except ValueError as exc:
            raise ValueError(f"the reply is {exc}") from None
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list) or len(results) != len(requests):
            raise ValueError(f'"results" must list one object per request ({len(requests)})')
        answers = []
        for request, item in zip(requests, results, strict=True):
            source = str(item.get("source", "")).upper() if isinstance(item, dict) else ""
            text = str(item.get("result", "")).strip() if isinstance(item, dict) else ""
            if source not in ("REAL", "SYNTHETIC", "REFUSED") or not text:
                raise ValueError('each result needs a non-empty "result" and a "source" of REAL, SYNTHETIC or '
                                 "REFUSED")
            text, withheld = ((text, []) if self.interpretation == "keep"
                              else withhold_interpretation(text, self.case.final_diagnosis))
            answers.append(Answer(request=request, text=text, source=source, withheld=withheld))  # type: ignore[arg-type]
        return answers


class CaseEnvironment:
    """One SDBench case as an ``interaction.Environment``: questions and test orders until a diagnosis.

    Cost per step: $300 when a question turn starts a visit, and each ordered test's price; a refused order is
    not performed, so not priced."""

    def __init__(self, case: SDBenchCase, gatekeeper: Gatekeeper, pricer: Pricer) -> None:
        self.case = case
        self.gatekeeper = gatekeeper
        self.pricer = pricer
        self.history: list[tuple[Questions | Tests, Reply]] = []
        self.diagnosis: str | None = None
        self._in_visit = False

    def start(self) -> str:
        return self.case.case_summary

    def counts_as_turn(self, action: Action) -> bool:
        return not isinstance(action, Diagnosis)

    def describe(self, action: Action) -> tuple[str, dict[str, Any]]:
        if isinstance(action, Diagnosis):
            return "diagnosis", {"diagnosis": action.text}
        # "question": the requests as one text, the patient-turn shape annotation reads (``PatientTurn``).
        return action.kind, {"requests": list(action.items), "question": "; ".join(action.items)}

    def step(self, action: Action) -> Step[Any]:
        if self.diagnosis is not None:
            raise EpisodeError("This case already has its diagnosis.")
        if isinstance(action, Diagnosis):
            self.diagnosis = action.text.strip()
            return Step(observation=Reply(text="Diagnosis recorded."), done=True,
                        provenance={"diagnosis": self.diagnosis})
        requests = [item.strip() for item in action.items if item.strip()]
        if not requests:
            raise EpisodeError(f"Write at least one {'question' if action.kind == 'questions' else 'test'}.")
        answers = self.gatekeeper.answer(action.kind, requests)
        prices: list[TestPrice] = []
        cost = 0.0
        visit = False
        if action.kind == "questions":
            visit = not self._in_visit
            self._in_visit = True
            cost = VISIT_PRICE if visit else 0.0
        else:
            self._in_visit = False
            prices = [self.pricer.price(a.request) for a in answers if a.source != "REFUSED"]
            cost = sum(p.price for p in prices)
        reply = Reply(text=render(action.kind, answers), answers=answers, prices=prices, visit_charged=visit)
        self.history.append((action, reply))
        return Step(observation=reply, cost=cost, provenance={
            "answers": [a.model_dump(mode="json") for a in answers],
            "prices": [p.model_dump(mode="json") for p in prices], "visit_charged": visit,
            "gatekeeper": self.gatekeeper.name})


def agent_view(reply: Reply) -> dict[str, Any]:
    """A turn's observation payload: only the text the agent read (sources and prices go in the provenance)."""
    return {"answer": reply.text}
