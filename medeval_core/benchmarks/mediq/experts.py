"""MEDIQ experts behind one interface: ``decide(view)`` -> ask a question or choose an option, ``choose(view)`` ->
an option now (at the question budget, and for the no-asking baseline on the initial information alone).

- ``LLMExpert``: a chat model with one of MediQ's abstention strategies: *fixed* (ask until the budget is used),
  *binary* (asks "confident enough to choose?" YES/NO) or *scale* (a 1-5 Likert confidence, choose at or above
  the threshold, 4 by default). When it abstains it writes one atomic question; otherwise it chooses.
- ``ReplayExpert``: plays one case's actions from a JSON Lines file (``{"case_id", "actions": [{"kind":
  "question", "text"} | {"kind": "choice", "option": "C"}], "initial_choice": "B"?}``); ``initial_choice`` is
  its answer without asking, when the file gives one.
- The person at the page acts through the walkthrough directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from medeval_core.benchmark import CaseContext
from medeval_core.benchmarks.mediq.cases import OPTION_LETTERS
from medeval_core.models.chat import ChatBackend, Message, ask_until_valid, json_object
from medeval_core.prompts import fill, load_prompt
from medeval_core.replay import ActionFileError, load_replay

__all__ = ["ActionFileError", "Decision", "Expert", "ExpertError", "ExpertView", "LLMExpert", "ReplayExpert",
           "ReplayLine", "load_actions"]

Abstention = Literal["fixed", "binary", "scale"]
ABSTENTIONS: tuple[Abstention, ...] = ("fixed", "binary", "scale")
DEFAULT_SCALE_THRESHOLD = 4
EXPERT_PROMPT_VERSION = "mediq-expert-v1"


class ExpertView(BaseModel):
    """What the expert knows: the initial information, the question, the options and the exchange so far."""

    initial_info: str
    question: str
    options: dict[str, str]
    history: list[tuple[str, str]] = Field(default_factory=list)
    questions_left: int


class Decision(BaseModel):
    kind: Literal["question", "choice"]
    text: str = ""
    option: str = ""
    confidence: float | None = None
    """What the abstention step reported (binary: 1 confident / 0 not; scale: 1-5); None for fixed and replay."""


class Expert(Protocol):
    name: str

    def decide(self, view: ExpertView, ctx: CaseContext | None = None) -> Decision: ...

    def choose(self, view: ExpertView, ctx: CaseContext | None = None) -> str: ...

    def describe(self) -> dict[str, Any]: ...


class ExpertError(RuntimeError):
    """An expert could not act (a replay file without a choice, a model that never gave a valid reply)."""


def _option(value: Any) -> str:
    option = str(value or "").strip().upper()
    if option not in OPTION_LETTERS:
        raise ValueError(f"the choice must be one of A, B, C, D, not {value!r}")
    return option


class LLMExpert:
    name = "llm"

    def __init__(self, backend: ChatBackend, abstention: Abstention = "scale",
                 threshold: int = DEFAULT_SCALE_THRESHOLD, max_invalid: int = 2) -> None:
        if abstention not in ABSTENTIONS:
            raise ValueError(f"abstention must be one of {', '.join(ABSTENTIONS)}, not {abstention!r}")
        self.backend = backend
        self.abstention = abstention
        self.threshold = threshold
        self.max_invalid = max_invalid
        self.system_prompt = load_prompt("mediq_expert_system")
        self.state_template = load_prompt("mediq_expert_state")
        self.tasks = {name: load_prompt(f"mediq_expert_{name}") for name in ("binary", "scale", "question",
                                                                            "choice")}

    def _messages(self, view: ExpertView, task: str) -> list[Message]:
        conversation = "\n".join(f"Doctor: {q}\nPatient: {a}" for q, a in view.history) or "None"
        options = ", ".join(f"{letter}: {text}" for letter, text in view.options.items())
        user = fill(self.state_template, initial_info=view.initial_info, conversation=conversation,
                    question=view.question, options=options, task=self.tasks[task])
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]

    def _ask(self, view: ExpertView, task: str, parse: Any, ctx: CaseContext | None) -> Any:
        return ask_until_valid(self.backend, self._messages(view, task), parse, role="expert",
                               on_call=ctx.record_model_call if ctx is not None else None,
                               max_invalid=self.max_invalid)

    @staticmethod
    def _parse_decision(reply: str) -> bool:
        value = str(json_object(reply).get("decision", "")).strip().upper()
        if value not in ("YES", "NO"):
            raise ValueError('"decision" must be "YES" or "NO"')
        return value == "YES"

    @staticmethod
    def _parse_scale(reply: str) -> int:
        value = json_object(reply).get("confidence")
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
            raise ValueError('"confidence" must be a whole number from 1 to 5')
        return value

    @staticmethod
    def _parse_question(reply: str) -> str:
        value = json_object(reply).get("question")
        if not isinstance(value, str) or not value.strip():
            raise ValueError('"question" must be the question as text')
        return value.strip()

    @staticmethod
    def _parse_choice(reply: str) -> str:
        return _option(json_object(reply).get("choice"))

    def decide(self, view: ExpertView, ctx: CaseContext | None = None) -> Decision:
        confidence: float | None = None
        if self.abstention == "fixed":
            ready = view.questions_left <= 0
        elif self.abstention == "binary":
            ready = self._ask(view, "binary", self._parse_decision, ctx)
            confidence = 1.0 if ready else 0.0
        else:
            level = self._ask(view, "scale", self._parse_scale, ctx)
            ready, confidence = level >= self.threshold, float(level)
        if ready or view.questions_left <= 0:
            return Decision(kind="choice", option=self.choose(view, ctx), confidence=confidence)
        return Decision(kind="question", text=self._ask(view, "question", self._parse_question, ctx),
                        confidence=confidence)

    def choose(self, view: ExpertView, ctx: CaseContext | None = None) -> str:
        return str(self._ask(view, "choice", self._parse_choice, ctx))

    def suggest_question(self, view: ExpertView, ctx: CaseContext | None = None) -> str:
        """The question it would ask next (the walkthrough shows it beside the person's)."""
        return str(self._ask(view, "question", self._parse_question, ctx))

    def describe(self) -> dict[str, Any]:
        return {"expert": self.name, **self.backend.describe(), "abstention": self.abstention,
                "threshold": self.threshold if self.abstention == "scale" else None,
                "prompt_version": EXPERT_PROMPT_VERSION}


class ReplayAction(BaseModel):
    kind: Literal["question", "choice"]
    text: str = ""
    option: str = ""


class ReplayLine(BaseModel):
    case_id: str
    actions: list[ReplayAction]
    initial_choice: str | None = None


def _check_line(item: ReplayLine) -> None:
    for action in item.actions:
        if action.kind == "question" and not action.text.strip():
            raise ValueError("a question action needs its text")
        if action.kind == "choice":
            _option(action.option)
    if item.initial_choice is not None:
        _option(item.initial_choice)


def load_actions(path: str | Path) -> dict[str, ReplayLine]:
    """Replay actions by case id; every line is validated (a question needs text, a choice one of A-D)."""
    return load_replay(path, ReplayLine, _check_line,
                       '{"case_id": ..., "actions": [{"kind": "question", "text": ...} | '
                       '{"kind": "choice", "option": "C"}]}')


class ReplayExpert:
    name = "replay"

    def __init__(self, line: ReplayLine) -> None:
        self.line = line
        self._position = 0

    def decide(self, view: ExpertView, ctx: CaseContext | None = None) -> Decision:
        if self._position >= len(self.line.actions):
            raise ExpertError(f"The actions of case {self.line.case_id} end without a choice; add "
                              '{"kind": "choice", "option": ...} at the end.')
        action = self.line.actions[self._position]
        self._position += 1
        if action.kind == "choice":
            return Decision(kind="choice", option=_option(action.option))
        if view.questions_left <= 0:
            return Decision(kind="choice", option=self.choose(view, ctx))
        return Decision(kind="question", text=action.text)

    def choose(self, view: ExpertView, ctx: CaseContext | None = None) -> str:
        """At the budget: the file's next choice; its later questions are dropped."""
        for action in self.line.actions[self._position:]:
            if action.kind == "choice":
                return _option(action.option)
        raise ExpertError(f"The actions of case {self.line.case_id} have no choice to make at the question "
                          "budget; end them with a choice.")

    def initial_choice(self) -> str | None:
        return self.line.initial_choice

    def questions(self) -> list[str]:
        """The questions the file asks, in order (what a patient can encode ahead)."""
        return [action.text for action in self.line.actions if action.kind == "question"]

    def describe(self) -> dict[str, Any]:
        return {"expert": self.name}

