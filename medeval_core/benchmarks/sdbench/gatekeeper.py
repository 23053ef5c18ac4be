"""The gatekeeper (design.md §3.3) behind one interface, and the SDBench case as an ``Environment``.

The gatekeeper answers each question or test order of a turn from the case, as chart text:
- *offline* (the default when no chat model serves the ``gatekeeper`` role), for structured cases: an order is
  matched to the case's tests (same name or catalogue alias, a panel's component, a name the catalogue lacks taken
  for a catalogue test by embedding, or sentence-embedding similarity to the case's test names above a threshold,
  never across imaging modalities or between two different catalogue tests) and
  answered with the case's own text: REAL; a test the case lacks gets the catalogue's normal-range result:
  SYNTHETIC. A question is matched to the history and examination sentences the same way.
- *LLM*: the chat model reads the full case under the ``sdbench_gatekeeper_system`` prompt (the paper's rules) and
  returns one JSON result per request with its source; the agent sees only the rendered results.
Both refuse vague orders ("blood work", "all labs"): REFUSED. Every answer is stored with its source and what it
matched (the turn's provenance); the agent sees a numbered ``Test Results:`` (or ``Answers:``) block only.
Interpretive clauses that name the case's diagnosis ("..., consistent with Hirschsprung disease") are withheld
from a real result: the gatekeeper reports findings, it never interprets, and the diagnosis never reaches the agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from medeval_core.benchmarks.sdbench.cases import SDBenchCase
from medeval_core.benchmarks.sdbench.catalog import (
    TestCatalog,
    embed,
    guess_kind,
    is_vague,
    modalities,
    name_key,
    plain,
)
from medeval_core.benchmarks.sdbench.costing import VISIT_PRICE, Pricer, TestPrice
from medeval_core.files import json_value
from medeval_core.interaction import EpisodeError, Step

Source = Literal["REAL", "SYNTHETIC", "REFUSED"]
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
_INTERPRETATION = re.compile(
    r"[,;]?\s*(?:which\s+(?:is|are)\s+|and\s+|these\s+findings\s+are\s+|findings\s+)?(?:highly\s+)?"
    r"(?:consistent\s+with|compatible\s+with|suggestive\s+of|suggesting|indicative\s+of|indicating|diagnostic\s+of|"
    r"in\s+keeping\s+with|characteristic\s+of|typical\s+of|associated\s+with|confirming(?:\s+the\s+diagnosis\s+of)?|"
    r"confirmatory\s+(?:findings\s+)?(?:of|for)|pathognomonic\s+(?:of|for)|representing)\b[^.;\n]*",
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


def withhold_interpretation(text: str, diagnosis: str) -> tuple[str, list[str]]:
    """``text`` without the interpretive clauses and interpretation lines that name ``diagnosis`` (what was
    removed is returned for the record)."""
    # The diagnosis and any abbreviation it gives in parentheses ("... encephalopathy (PML)") are each a name.
    names = [re.sub(r"\([^()]*\)", " ", diagnosis), *re.findall(r"\(([^()]+)\)", diagnosis)]
    name_words = [{w for w in plain(name).split() if len(w) > 3 or name != names[0]} for name in names]

    def names_it(fragment: str) -> bool:
        words = set(plain(fragment).split())
        return any(wanted and len(wanted & words) >= len(wanted) / 2 for wanted in name_words)

    removed: list[str] = []
    kept_lines = []
    for line in text.splitlines():
        if re.match(r"\s*(interpretation|impression|diagnosis|conclusion)\s*:", line, re.I) and names_it(line):
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
                 catalog_threshold: float = CATALOG_HOP_THRESHOLD) -> None:
        if case.findings is None:
            raise EpisodeError(f"Case {case.case_id} has no structured findings, so the offline gatekeeper cannot "
                               "answer it; run it with --gatekeeper llm.")
        self.case = case
        self.catalog = catalog
        self.test_threshold = test_threshold
        self.question_threshold = question_threshold
        self.catalog_threshold = catalog_threshold
        findings = case.findings
        self.tests = [_Candidate(label=name, text=text) for name, text in findings.tests.items()]
        self.components = [c for name, text in findings.tests.items() for c in _panel_components(name, text)]
        self.sentences = [
            _Candidate(label=section, text=sentence, parent=area)
            for area, entries in (("history", findings.history), ("examination", findings.examination))
            for section, text in entries.items() for sentence in _sentences(text)
        ]
        self._test_index: Any = None
        self._sentence_index: Any = None

    def describe(self) -> dict[str, Any]:
        return {"gatekeeper": self.name, "test_threshold": self.test_threshold,
                "question_threshold": self.question_threshold, "catalog_threshold": self.catalog_threshold,
                "catalog_entries": len(self.catalog)}

    def answer(self, kind: Literal["questions", "tests"], requests: Sequence[str]) -> list[Answer]:
        if kind == "questions":
            return [self._question(request) for request in requests]
        # One encoder call per turn: requests that need the embedding fallback are encoded together.
        answers: list[Answer | None] = [self._exact_test(request) for request in requests]
        pending = [i for i, found in enumerate(answers) if found is None]
        vectors = embed([requests[i] for i in pending]) if pending and (self.tests or self.components) else None
        for row, i in enumerate(pending):
            request = requests[i]
            vector = None if vectors is None else vectors[row]
            answers[i] = self._via_catalog(request) or self._similar(request, vector) or self._synthetic(request)
        return [answer for answer in answers if answer is not None]

    # Tests -----------------------------------------------------------------------------------------------------

    def _real(self, request: str, candidate: _Candidate, similarity: float | None = None) -> Answer:
        text, withheld = withhold_interpretation(candidate.text, self.case.final_diagnosis)
        if candidate.parent is not None and candidate.parent not in ("history", "examination"):
            matched = f"{candidate.parent}: {candidate.label}"
        else:
            matched = candidate.label
        return Answer(request=request, text=text, source="REAL", matched=matched,
                      similarity=None if similarity is None else round(similarity, 4), withheld=withheld)

    def _exact_test(self, request: str) -> Answer | None:
        """The answer found without embeddings: the same name, a refusal, or the same catalogue test."""
        key = name_key(request)
        for group in (self.tests, self.components):
            for candidate in group:
                if name_key(candidate.label) == key:
                    return self._real(request, candidate)
        if is_vague(request):
            return Answer(request=request, text=REFUSAL.format(request=request), source="REFUSED")
        wanted = self.catalog.exact(request)
        if wanted is not None:
            for group in (self.tests, self.components):
                for candidate in group:
                    if self.catalog.exact(candidate.label) == wanted:
                        return self._real(request, candidate)
        return None

    def _via_catalog(self, request: str) -> Answer | None:
        """A name the catalogue lacks, taken for a catalogue test by embedding, that the case has under another
        of that test's names ("full blood picture" -> complete blood count -> the case's "CBC")."""
        if self.catalog.exact(request) is not None:
            return None
        via = self.catalog.match(request, threshold=self.catalog_threshold)
        if via is None:
            return None
        for group in (self.tests, self.components):
            for candidate in group:
                if self.catalog.exact(candidate.label) == via.entry:
                    return self._real(request, candidate, via.similarity)
        return None

    def _similar(self, request: str, vector: Any = None) -> Answer | None:
        wanted = self.catalog.exact(request)
        if wanted is None:
            via = self.catalog.match(request, threshold=self.catalog_threshold)
            wanted = via.entry if via is not None else None
        candidates = self.tests + self.components
        if not candidates:
            return None
        if self._test_index is None:
            self._test_index = embed([c.label for c in candidates])
        scores = self._test_index @ (vector if vector is not None else embed([request])[0])
        request_modalities = modalities(request)
        ranked = sorted(range(len(candidates)), key=lambda i: -float(scores[i]))[:5]
        for index in ranked:
            if float(scores[index]) < self.test_threshold:
                break
            candidate = candidates[index]
            known = self.catalog.exact(candidate.label)
            if wanted is not None and known is not None and known != wanted:
                continue  # two different catalogue tests (chest X-ray is not chest CT)
            label_modalities = modalities(candidate.label) | modalities(candidate.parent or "")
            if request_modalities != label_modalities and (request_modalities or label_modalities):
                continue
            return self._real(request, candidate, float(scores[index]))
        return None

    def _synthetic(self, request: str) -> Answer:
        match = self.catalog.match(request)
        if match is not None:
            return Answer(request=request, text=match.entry.normal, source="SYNTHETIC", matched=match.entry.name,
                          similarity=None if match.method == "alias" else round(match.similarity, 4))
        return Answer(request=request, text=GENERIC_NORMAL[guess_kind(request)], source="SYNTHETIC")

    # Questions ---------------------------------------------------------------------------------------------------

    def _question(self, request: str) -> Answer:
        assert self.case.findings is not None
        sections = {**self.case.findings.history, **self.case.findings.examination}
        for pattern, names in _TOPICS:
            if pattern.search(request):
                for name in names:
                    if name in sections:
                        return self._real(request, _Candidate(label=name, text=sections[name], parent="history"))
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
        texts, withheld = [], []
        for match in chosen:
            text, removed = withhold_interpretation(self.sentences[match.index].text, self.case.final_diagnosis)
            texts.append(text)
            withheld += removed
        return Answer(request=request, text=" ".join(texts), source="REAL",
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
                 on_call: Callable[[Any], None] | None = None, max_invalid: int = 1) -> None:
        from medeval_core.prompts import fill

        self.case = case
        self.backend = backend
        self.on_call = on_call
        self.max_invalid = max_invalid
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": fill(system_template, case=case.full_text)}]

    def describe(self) -> dict[str, Any]:
        return {"gatekeeper": self.name, **self.backend.describe()}

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
            text, withheld = withhold_interpretation(text, self.case.final_diagnosis)
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
        return action.kind, {"requests": list(action.items)}

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
