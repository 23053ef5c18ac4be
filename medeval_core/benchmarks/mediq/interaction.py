"""One MEDIQ consultation as an ``Environment`` of the core episode (``medeval_core.interaction``).

The expert starts with the initial information, the question and the options; an ``Ask`` (one question, one
turn of the budget, 10 by default) is answered by the patient system from the case's facts; a ``Choose`` ends
the case. At the budget the expert must choose (the choice is then marked ``forced``: a timeout in the
metrics). Each question becomes a turn whose payload holds the patient's answer and the facts it used, so that
clinicians can rate each answer's truthfulness and relevance (0-2) on the annotation page.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from medeval_core.benchmark import CaseContext
from medeval_core.benchmarks.mediq.cases import MediqCase
from medeval_core.benchmarks.mediq.experts import Expert, ExpertView, ReplayExpert
from medeval_core.dialogue import Patient, Reply
from medeval_core.interaction import Episode, EpisodeError, Limits, Step

DEFAULT_MAX_QUESTIONS = 10
START_ACTOR = "patient"


class Ask(BaseModel):
    kind: Literal["question"] = "question"
    text: str


class Choose(BaseModel):
    kind: Literal["choice"] = "choice"
    option: str
    forced: bool = False
    """Chosen because the question budget was used up."""


class Intake(BaseModel):
    initial_info: str
    question: str
    options: dict[str, str]


class Verdict(BaseModel):
    choice: str
    correct: bool
    answer_idx: str
    forced: bool


class MediqOutput(BaseModel):
    """A case's stored output: enough to rescore it and to show what the expert never uncovered."""

    case_id: str
    choice: str
    answer_idx: str
    correct: bool
    questions: list[str]
    answers: list[str]
    facts_used: list[list[int]] = Field(default_factory=list)
    num_questions: int
    timed_out: bool
    initial_choice: str | None = None
    """The same expert's choice on the initial information alone (no asking), when it has one."""
    initial_correct: bool | None = None
    facts_uncovered: list[int] = Field(default_factory=list, description="facts no answer used (positions)")


class Consultation:
    """The MEDIQ environment: one case, one patient system, a question budget."""

    def __init__(self, case: MediqCase, patient: Patient, ctx: CaseContext | None = None,
                 max_turns: int = DEFAULT_MAX_QUESTIONS) -> None:
        self.case = case
        self.patient = patient
        self.ctx = ctx
        self.max_turns = max_turns
        self.replies: list[Reply] = []
        self.verdict: Verdict | None = None

    def start(self) -> Intake:
        return Intake(initial_info=self.case.initial_info, question=self.case.question, options=self.case.options)

    def counts_as_turn(self, action: Ask | Choose) -> bool:
        return isinstance(action, Ask)

    def describe(self, action: Ask | Choose) -> tuple[str, dict[str, Any]]:
        if isinstance(action, Ask):
            return "question", {}
        return "choice", {"option": action.option, "forced": action.forced}

    def step(self, action: Ask | Choose) -> Step[Any]:
        if self.verdict is not None:
            raise EpisodeError("This case already has a choice.")
        if isinstance(action, Ask):
            question = " ".join(action.text.split())
            if not question:
                raise EpisodeError("Write a question for the patient first.")
            answer = self.patient.answer(question, self.ctx)
            reply = Reply.of(question, answer)
            self.replies.append(reply)
            return Step(observation=reply, provenance={"patient": self.patient.name, "facts": reply.facts,
                                                       "refused": reply.refused})
        if isinstance(action, Choose):
            option = action.option.strip().upper()
            if option not in self.case.options:
                raise EpisodeError(f"Choose one of {', '.join(self.case.options)}, not {action.option!r}.")
            self.verdict = Verdict(choice=option, correct=option == self.case.answer_idx,
                                   answer_idx=self.case.answer_idx, forced=action.forced)
            return Step(observation=self.verdict, done=True)
        raise EpisodeError(f"A MEDIQ action is a question or a choice, not {type(action).__name__}.")

    def view(self) -> ExpertView:
        return ExpertView(initial_info=self.case.initial_info, question=self.case.question,
                          options=self.case.options, history=[(r.question, r.answer) for r in self.replies],
                          questions_left=self.max_turns - len(self.replies))

    def initial_view(self) -> ExpertView:
        """The view before any question: the no-asking baseline."""
        return self.view().model_copy(update={"history": [], "questions_left": 0})

    def uncovered(self) -> list[int]:
        used = {i for reply in self.replies for i in reply.facts}
        return [i for i in range(len(self.case.facts)) if i not in used]

    def output(self, initial_choice: str | None = None) -> MediqOutput:
        if self.verdict is None:
            raise EpisodeError("The case has no choice yet.")
        return MediqOutput(
            case_id=self.case.case_id, choice=self.verdict.choice, answer_idx=self.case.answer_idx,
            correct=self.verdict.correct, questions=[r.question for r in self.replies],
            answers=[r.answer for r in self.replies], facts_used=[r.facts for r in self.replies],
            num_questions=len(self.replies), timed_out=self.verdict.forced, initial_choice=initial_choice,
            initial_correct=None if initial_choice is None else initial_choice == self.case.answer_idx,
            facts_uncovered=self.uncovered())


def open_episode(consultation: Consultation, ctx: CaseContext, record_start: bool = True) -> Episode[Any, Any]:
    return Episode(consultation, ctx, Limits(max_turns=consultation.max_turns), start_actor=START_ACTOR,
                   record_start=record_start)


def consult(expert: Expert, case: MediqCase, patient: Patient, ctx: CaseContext,
            max_turns: int = DEFAULT_MAX_QUESTIONS, baseline: bool = True) -> MediqOutput:
    """Let ``expert`` question ``patient`` on ``case`` through the core episode; with ``baseline``, also ask the
    same expert for its choice on the initial information alone."""
    consultation = Consultation(case, patient, ctx, max_turns)
    episode = open_episode(consultation, ctx)
    initial: str | None = None
    if baseline:
        initial = (expert.initial_choice() if isinstance(expert, ReplayExpert)
                   else expert.choose(consultation.initial_view(), ctx))
    while not episode.done:
        view = consultation.view()
        if view.questions_left <= 0:
            episode.act(Choose(option=expert.choose(view, ctx), forced=True), actor=expert.name)
            break
        decision = expert.decide(view, ctx)
        if decision.kind == "question":
            episode.act(Ask(text=decision.text), actor=expert.name)
        else:
            episode.act(Choose(option=decision.option), actor=expert.name)
    return consultation.output(initial)
