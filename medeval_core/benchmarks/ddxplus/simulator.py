"""The simulated DDXPlus patient, with the official answer semantics (design.md §3.2).

Asking a root reveals the patient's whole value set for it (every multi-choice value at once), or the root's
``default_value`` when the patient lacks it. Children of E_53 (pain), E_129 (skin lesions) and E_151 (swelling)
answer their default whenever the parent is absent, whatever the file lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase, Language, root_of
from medeval_core.benchmarks.ddxplus.patients import DDXPlusPatient

MAX_QUESTIONS = 30


@dataclass(frozen=True)
class Answer:
    """The patient's answer to one root: ``values`` are value codes (empty for a yes/no root)."""

    root: str
    values: tuple[str, ...]
    positive: bool
    defaulted: bool

    def text(self, kb: KnowledgeBase, language: Language | None = None) -> str:
        """The answer as the patient would say it: yes/no, or the value texts (scales as 'N/10')."""
        language = language or kb.language
        evidence = kb.evidences[self.root]
        if evidence.binary:
            if language == "fr":
                return "Oui" if self.positive else "Non"
            return "Yes" if self.positive else "No"
        if evidence.value_meaning:
            return ", ".join(kb.value_text(self.root, value, language) for value in self.values)
        return ", ".join(f"{value}/10" if value.isdigit() else value for value in self.values)

    def items(self) -> tuple[str, ...]:
        """The answer as item codes (``E_55_@_V_89``; a binary root is its own item, and only when 'yes')."""
        if not self.values:
            return (self.root,) if self.positive else ()
        return tuple(f"{self.root}_@_{value}" for value in self.values)


class PatientSimulator:
    def __init__(self, kb: KnowledgeBase, patient: DDXPlusPatient) -> None:
        self.kb = kb
        self.patient = patient
        values: dict[str, list[str]] = {}
        for code in patient.evidences:
            root, _, value = code.partition("_@_")
            bucket = values.setdefault(root, [])
            if value and value not in bucket:
                bucket.append(value)
        self._values = values

    def has(self, root: str) -> bool:
        evidence = self.kb.evidences[root]
        if evidence.parent is not None and not self.has(evidence.parent):
            return False
        if root not in self._values:
            return False
        if evidence.binary:
            return True
        return any(value != evidence.default_value for value in self._values[root])

    def answer(self, code: str) -> Answer:
        """Answer a root (an item code such as ``E_54_@_V_161`` asks its root). Unknown codes raise KeyError."""
        root = root_of(code)
        evidence = self.kb.evidences.get(root)
        if evidence is None:
            raise KeyError(f"{code!r} is not an evidence of the knowledge base.")
        parent_absent = evidence.parent is not None and not self.has(evidence.parent)
        listed = root in self._values and not parent_absent
        if evidence.binary:
            return Answer(root=root, values=(), positive=listed, defaulted=not listed)
        if not listed or not self._values[root]:
            default = evidence.default_value or ""
            return Answer(root=root, values=(default,), positive=False, defaulted=True)
        values = tuple(self._values[root])
        positive = any(value != evidence.default_value for value in values)
        return Answer(root=root, values=values, positive=positive, defaulted=False)
