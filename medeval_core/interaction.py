"""The generic episode: an ``Environment`` (a simulated patient, a gatekeeper) acted on step by step, by an agent
in a batch run or by a person from a page. The same code serves both; the only difference is who acts.

Every step becomes a turn through the ``CaseContext`` (the batch runner keeps turns with the case result; a
session writes each one at once), limits on turns and cost are enforced here rather than in each benchmark, and
``Episode.restore`` replays stored actions so that a half-done walkthrough continues after a page reload
(environments are deterministic given the case and the actions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from pydantic import AliasChoices, BaseModel, Field

from medeval_core.benchmark import CaseContext

A = TypeVar("A")
Obs = TypeVar("Obs")
A_co = TypeVar("A_co", covariant=True)
A_contra = TypeVar("A_contra", contravariant=True)
Obs_contra = TypeVar("Obs_contra", contravariant=True)


class PatientTurn(BaseModel):
    """The one shape of a simulated patient's (or gatekeeper's) reply in a dialogue turn's payload, whatever the
    benchmark: the ``question`` it answered and its ``answer`` as text. Benchmarks subclass it with their own
    provenance (facts used, evidence codes); annotation and the drill-down read only these two fields."""

    question: str
    answer: str

    @classmethod
    def read(cls, payload: Mapping[str, Any]) -> PatientTurn | None:
        """The reply in a stored turn's payload, or None for a turn that is not one. Turns stored before this shape
        are read too: the answer under ``text`` (beside the ``facts`` it used), and a gatekeeper's requests as a
        list beside its ``answer``."""
        answer = payload.get("answer")
        if not isinstance(answer, str):
            answer = payload.get("text") if "facts" in payload else None
        if not isinstance(answer, str):
            return None
        question = payload.get("question")
        if not isinstance(question, str):
            requests = payload.get("requests")
            question = "; ".join(str(r) for r in requests) if isinstance(requests, list) else ""
        # A reply answers something: an acknowledgement of a final answer ("Diagnosis recorded.") is not one.
        return cls(question=question, answer=answer) if question else None


class EpisodeError(ValueError):
    """An action the episode does not allow (after the end, past a limit, invalid); the message says why."""


class Step(BaseModel, Generic[Obs]):
    """What the environment returns for one action."""

    observation: Obs
    cost: float = 0.0
    done: bool = False
    provenance: dict[str, Any] = Field(default_factory=dict)
    """Where the observation came from (e.g. REAL / SYNTHETIC / REFUSED, the facts used), stored with the turn."""


class Environment(Protocol[A_contra, Obs]):
    """One case's counterpart. ``start`` returns what the actor knows first; ``step`` answers one action.

    ``counts_as_turn`` says whether an action uses up the turn budget (a question does; a final answer does not).
    """

    def start(self) -> Obs: ...

    def step(self, action: A_contra) -> Step[Obs]: ...

    def counts_as_turn(self, action: A_contra) -> bool: ...

    def describe(self, action: A_contra) -> tuple[str, dict[str, Any]]:
        """The turn's ``action`` name and JSON payload for ``action``."""
        ...


class Agent(Protocol[Obs_contra, A_co]):
    """An agent's side of one episode: it sees each observation and chooses the next action."""

    name: str

    def act(self, observation: Obs_contra, turns_left: int) -> A_co: ...


MAX_TURNS = AliasChoices("max_turns", "max_questions")
"""How a run's turn budget is read from its stored params: runs stored before it had one name call it
``max_questions``."""


def with_max_turns(params: Mapping[str, Any]) -> dict[str, Any]:
    """An agent's stored params with an old ``max_questions`` read as ``max_turns``."""
    given = dict(params)
    if "max_questions" in given:
        given.setdefault("max_turns", given.pop("max_questions"))
    return given


class Limits(BaseModel):
    """An episode's limits, enforced by ``Episode.act`` alone: the environments and agents only read them."""

    max_turns: int | None = Field(default=None, ge=0)
    max_cost: float | None = Field(default=None, ge=0)


class Episode(Generic[A, Obs]):
    """One case's interaction: the environment, the limits, the turns recorded so far."""

    def __init__(self, environment: Environment[A, Obs], ctx: CaseContext, limits: Limits | None = None,
                 start_actor: str = "environment", record_start: bool = True,
                 observation_payload: Callable[[Obs], Mapping[str, Any]] | None = None) -> None:
        self.environment = environment
        self.ctx = ctx
        self.limits = limits or Limits()
        self.turns_used = 0
        self.cost = 0.0
        self.done = False
        self.actions: list[tuple[str, A]] = []
        self._recording = True
        self._payload = observation_payload or _default_payload
        self.first_observation = environment.start()
        if record_start:
            ctx.record_turn(start_actor, "start", self._payload(self.first_observation))

    @property
    def turns_left(self) -> int:
        if self.limits.max_turns is None:
            return 1 << 30
        return self.limits.max_turns - self.turns_used

    def act(self, action: A, actor: str) -> Step[Obs]:
        if self.done:
            raise EpisodeError("This episode is finished; start a new one to act again.")
        counts = self.environment.counts_as_turn(action)
        if counts and self.turns_left <= 0:
            raise EpisodeError(f"The {self.limits.max_turns}-turn limit is reached; give the final answer.")
        if self.limits.max_cost is not None and counts and self.cost >= self.limits.max_cost:
            raise EpisodeError(f"The budget of {self.limits.max_cost:g} is spent; give the final answer.")
        step = self.environment.step(action)
        if self._recording:
            name, payload = self.environment.describe(action)
            self.ctx.record_turn(actor, name, {**payload, **self._payload(step.observation),
                                               **({"provenance": step.provenance} if step.provenance else {})},
                                 cost=step.cost)
        self.actions.append((actor, action))
        self.turns_used += int(counts)
        self.cost += step.cost
        self.done = step.done
        return step

    def run(self, agent: Agent[Obs, A]) -> Step[Obs]:
        """Let ``agent`` act until the environment says done (the agent must end within the limits)."""
        observation = self.first_observation
        while True:
            step = self.act(agent.act(observation, self.turns_left), actor=agent.name)
            if step.done:
                return step
            observation = step.observation

    def restore(self, actions: Sequence[tuple[str, A]]) -> None:
        """Replay stored actions (deterministic environments rebuild the same state); their turns are already
        stored, so they are not recorded again."""
        self._recording = False
        try:
            for actor, action in actions:
                self.act(action, actor)
        finally:
            self._recording = True


def _default_payload(observation: Any) -> Mapping[str, Any]:
    if isinstance(observation, BaseModel):
        return observation.model_dump(mode="json")
    return {"observation": observation}
