"""The LLM agent: a chat model questions the simulated patient and ends with a differential over the 49 pathologies.

The model sees the questions it may ask (natural language, each with its evidence code) and the pathology names,
but not the KB's condition -> evidence lists, so ``reads_kb`` is False. Each turn it answers with one JSON
object, either ``{"action": "ask", "code": "E_91"}`` or ``{"action": "diagnose", "differential": {...}}``;
the patient's answer comes back in words. An output that is not such an object (unknown code, name outside
the 49, masses that are not numbers) is answered with what was wrong and asked again, ``max_invalid`` times;
after that the consultation fails, and the runner records the case as failed. Every request (retries
included) is recorded as a model call of role ``chat`` on the case's context, with the exact messages' sha256.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from medeval_core.benchmark import CaseContext
from medeval_core.benchmarks.ddxplus.interaction import EpisodeError, Intake, validate_differential
from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase
from medeval_core.benchmarks.ddxplus.simulator import MAX_QUESTIONS, Answer
from medeval_core.interaction import with_max_turns
from medeval_core.models import for_role
from medeval_core.models.chat import ChatBackend, Message, json_object
from medeval_core.settings import Settings

CHAT_ROLE = "chat"

PROMPT_VERSION = "ddxplus-llm-agent-v1"

SYSTEM_PROMPT = """You are a physician interviewing a patient to reach a differential diagnosis.
You ask one question per turn, chosen from the numbered list below by its code, and the patient answers it.
You may ask at most {max_turns} questions; ask only what helps.

Reply with exactly one JSON object and nothing else:
- to ask a question: {{"action": "ask", "code": "E_91"}}
- to finish: {{"action": "diagnose", "differential": {{"Pathology name": probability, ...}}}}
The differential lists the likely pathologies with probabilities that sum to 1, most likely first, using only
these names: {pathologies}.

Questions (code: question):
{questions}"""


class LLMOutputError(RuntimeError):
    """The model did not produce a valid action after the allowed corrections."""


class LLMAgent:
    name = "llm"
    reads_kb = False

    def __init__(self, kb: KnowledgeBase, backend: ChatBackend, max_turns: int = MAX_QUESTIONS,
                 max_invalid: int = 2) -> None:
        self.kb = kb
        self.backend = backend
        self.max_turns = max_turns
        """Questions this agent allows itself (its strategy; the consultation's ``Limits`` enforce the protocol's)."""
        self.max_invalid = max_invalid
        questions = "\n".join(f"{code}: {kb.question_text(code)}" for code in kb.roots)
        self.system_prompt = SYSTEM_PROMPT.format(
            max_turns=max_turns, pathologies="; ".join(kb.pathology_names), questions=questions)

    @classmethod
    def from_settings(cls, kb: KnowledgeBase, settings: Settings, params: Mapping[str, Any]) -> LLMAgent:
        options = {key: params[key] for key in ("temperature", "max_tokens", "seed") if key in params}
        # A resumed run keeps talking to the model it started with (its agent parameters name it).
        started_with = {"base_url": params["base_url"], "model": params["model"]} \
            if params.get("base_url") and params.get("model") else None
        return cls(kb, for_role(CHAT_ROLE, settings, started_with, **options),
                   max_turns=int(with_max_turns(params).get("max_turns", MAX_QUESTIONS)),
                   max_invalid=int(params.get("max_invalid", 2)))

    def params(self) -> dict[str, Any]:
        return {**self.backend.describe(), "max_turns": self.max_turns, "max_invalid": self.max_invalid,
                "prompt_version": PROMPT_VERSION, "reads_kb": self.reads_kb}

    def start(self, intake: Intake, ctx: CaseContext | None = None) -> LLMSession:
        return LLMSession(self, intake, ctx)


class LLMSession:
    def __init__(self, agent: LLMAgent, intake: Intake, ctx: CaseContext | None = None) -> None:
        self.agent = agent
        self.on_call = ctx.record_model_call if ctx is not None else None
        sex = {"M": "male", "F": "female"}.get(intake.sex, intake.sex)
        self.messages: list[Message] = [
            {"role": "system", "content": agent.system_prompt},
            {"role": "user", "content": (
                f"The patient is a {intake.age}-year-old {sex}. Their reason for consulting: asked "
                f"\"{intake.initial_question}\" ({intake.initial_evidence}), they answered yes.")},
        ]
        self.asked = 0
        self.invalid_replies = 0
        self._differential: dict[str, float] | None = None

    def _parse(self, reply: str, allow_ask: bool) -> tuple[str, Any]:
        action = json_object(reply)
        kind = action.get("action")
        if kind == "ask":
            if not allow_ask:
                raise ValueError("no more questions can be asked; give your differential")
            code = str(action.get("code", "")).strip()
            if code not in self.agent.kb.evidences:
                raise ValueError(f"{code!r} is not one of the question codes")
            return "ask", code
        if kind == "diagnose":
            differential = validate_differential(self.agent.kb, action.get("differential") or {})
            if not any(mass > 0 for mass in differential.values()):
                raise ValueError("the differential is empty")
            return "diagnose", differential
        raise ValueError('"action" must be "ask" or "diagnose"')

    def _act(self, allow_ask: bool) -> tuple[str, Any]:
        """Ask the model for its next action until it is valid; fail after ``max_invalid`` corrections."""
        problem = ""
        for _ in range(self.agent.max_invalid + 1):
            reply = self.agent.backend.complete(self.messages, on_call=self.on_call, role=CHAT_ROLE)
            self.messages.append({"role": "assistant", "content": reply})
            try:
                return self._parse(reply, allow_ask)
            except (ValueError, EpisodeError) as exc:
                self.invalid_replies += 1
                problem = str(exc)
                self.messages.append({"role": "user", "content": (
                    f"That reply was not valid: {problem}. Answer with one JSON object as instructed.")})
        raise LLMOutputError(
            f"The model gave no valid action in {self.agent.max_invalid + 1} tries; last problem: {problem}.")

    def next_question(self) -> str | None:
        if self._differential is not None:
            return None
        kind, value = self._act(allow_ask=self.asked < self.agent.max_turns)
        if kind == "diagnose":
            self._differential = value
            return None
        self.asked += 1
        return str(value)

    def observe(self, answer: Answer) -> None:
        text = answer.text(self.agent.kb)
        left = self.agent.max_turns - self.asked
        note = "" if left else " You have no questions left: give your differential now."
        self.messages.append({"role": "user", "content": f"Patient ({answer.root}): {text}.{note}"})

    def differential(self) -> dict[str, float]:
        if self._differential is None:
            _, self._differential = self._act(allow_ask=False)
        return self._differential
