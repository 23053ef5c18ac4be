"""Agents behind one interface: ``act(observation, must_commit) -> action`` (``gatekeeper.Questions``, ``Tests`` or
``Diagnosis``).

- The person at the walkthrough page acts through the same episode directly (actor ``person``).
- ``LLMAgent``: the paper's baseline over the chat backend, with ``<question>``, ``<test>`` and ``<diagnosis>``
  tags (``parse_tags``). A turn never mixes questions and tests; a malformed reply is answered with what was wrong
  once, and a second malformed reply fails the case with that reason. ``--model-args`` is merged into each request.
- ``ReplayAgent``: plays the actions of a JSON Lines file, one line per case:
  ``{"case_id": "...", "actions": [{"kind": "question" | "test" | "diagnosis", "text": "..."}]}``; consecutive
  actions of one kind are one turn (as an agent would ask them together), so transcripts from other systems are
  scored and the gatekeeper is checked without a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from medeval_core.benchmarks.sdbench.gatekeeper import Action, Diagnosis, Questions, Reply, Tests
from medeval_core.data.files import read_json_lines

PERSON = "person"
_TAG = re.compile(r"<(question|test|diagnosis)>(.*?)</\1>", re.I | re.S)
_OPEN_TAG = re.compile(r"</?(question|test|diagnosis)\b", re.I)


class AgentOutputError(RuntimeError):
    """The agent gave no valid action; the message says what was wrong (the case fails with it)."""


class IncompleteEpisode(AgentOutputError):
    """The agent stopped without a diagnosis: the case is kept as incomplete, apart from the judged ones."""


class Agent(Protocol):
    name: str

    def act(self, observation: str | Reply, must_commit: bool) -> Action: ...


def parse_tags(text: str) -> Action:
    """The action in an agent's reply; a ValueError says what is wrong with it."""
    found = [(kind.lower(), body.strip()) for kind, body in _TAG.findall(text or "")]
    if not found:
        if _OPEN_TAG.search(text or ""):
            raise ValueError("a tag is not closed; write each request as <question>...</question>, "
                             "<test>...</test> or <diagnosis>...</diagnosis>")
        raise ValueError("the reply has no <question>, <test> or <diagnosis> tag")
    if any(not body for _, body in found):
        raise ValueError("a tag is empty")
    kinds = {kind for kind, _ in found}
    if "diagnosis" in kinds:
        if len(found) > 1:
            raise ValueError("a turn with a <diagnosis> holds nothing else, and only one diagnosis")
        return Diagnosis(text=found[0][1])
    if kinds == {"question", "test"}:
        raise ValueError("a turn never mixes questions and tests; ask the questions or order the tests")
    items = [body for _, body in found]
    return Questions(items=items) if kinds == {"question"} else Tests(items=items)


def _observation_text(observation: str | Reply) -> str:
    return observation if isinstance(observation, str) else observation.text


class LLMAgent:
    name = "llm"

    def __init__(self, backend: Any, system_prompt: str, on_call: Callable[[Any], None] | None = None) -> None:
        self.backend = backend
        self.on_call = on_call
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt}]
        self.invalid_replies = 0

    def act(self, observation: str | Reply, must_commit: bool) -> Action:
        content = f"Case summary: {observation}" if isinstance(observation, str) else observation.text
        if must_commit:
            content += "\n\nYou can ask or order nothing more: give your final <diagnosis> now."
        self.messages.append({"role": "user", "content": content})
        problem = ""
        for attempt in range(2):
            reply = self.backend.complete(self.messages, on_call=self.on_call, role="chat")
            self.messages.append({"role": "assistant", "content": reply})
            try:
                action = parse_tags(reply)
                if must_commit and not isinstance(action, Diagnosis):
                    raise ValueError("only a <diagnosis> is accepted now")
                return action
            except ValueError as exc:
                self.invalid_replies += 1
                problem = str(exc)
                if attempt == 0:
                    self.messages.append({"role": "user", "content": f"That reply was not valid: {problem}. "
                                                                     "Answer again as the instructions say."})
        raise AgentOutputError(f"The agent's reply was malformed twice; last problem: {problem}.")


class ReplayAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["question", "test", "diagnosis"]
    text: str = Field(min_length=1)


class ReplayLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case_id: str = Field(min_length=1)
    actions: list[ReplayAction]


class ActionsFileError(ValueError):
    """An actions file that cannot be used; the message names the line and the field."""


def load_actions(path: str | Path) -> dict[str, list[ReplayAction]]:
    """Case id -> actions of a replay file; the first bad line fails the load with its number and field."""
    rows, _ = read_json_lines(
        Path(path), ActionsFileError, "does not exist; give the replay actions JSON Lines file.",
        ReplayLine.model_validate, lambda row: row.case_id, duplicate="field 'case_id': {key!r} appears twice",
        nothing_valid="no actions (give one JSON line per case)", remedy="fix that line")
    return {row.case_id: row.actions for row in rows}


def group_actions(actions: Sequence[ReplayAction]) -> list[Action]:
    """Consecutive questions (or tests) as one turn; a diagnosis ends the list."""
    turns: list[Action] = []
    for action in actions:
        if action.kind == "diagnosis":
            turns.append(Diagnosis(text=action.text))
            break
        kind = "questions" if action.kind == "question" else "tests"
        last = turns[-1] if turns else None
        if isinstance(last, Questions | Tests) and last.kind == kind:
            last.items.append(action.text)
        else:
            turns.append(Questions(items=[action.text]) if kind == "questions" else Tests(items=[action.text]))
    return turns


class ReplayAgent:
    """Plays one case's stored actions in order."""

    name = "replay"

    def __init__(self, actions: Sequence[ReplayAction]) -> None:
        self.turns = group_actions(actions)
        self.position = 0

    @property
    def exhausted(self) -> bool:
        return self.position >= len(self.turns)

    def act(self, observation: str | Reply, must_commit: bool) -> Action:
        if self.exhausted:
            raise IncompleteEpisode("The replayed actions end without a diagnosis.")
        action = self.turns[self.position]
        if must_commit and not isinstance(action, Diagnosis):
            diagnosis = next((turn for turn in self.turns[self.position:] if isinstance(turn, Diagnosis)), None)
            if diagnosis is None:
                raise IncompleteEpisode("The turn or budget limit is reached and the replayed actions hold no "
                                       "diagnosis.")
            self.position = len(self.turns)
            return diagnosis
        self.position += 1
        return action
