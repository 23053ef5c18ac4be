"""The MEDIQ walkthrough behind the page: a person asks the offline patient questions, then chooses an option.

The same consultation and core episode as a batch run, with the person as the expert. Each walkthrough is a
session run (benchmark ``mediq``, one case): every question is stored as a turn the moment it is asked, so a
reload continues from the run id alone (``Episode.restore`` replays the stored questions; the offline patient
answers the same way again), and the choice finishes the session with its score. After the choice the page
shows the answer, the facts never uncovered and, when an expert model is configured, what the LLM expert would
have asked on the same case.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from medeval_core.benchmark import ModelRoles, RecordingContext, RunCounts, RunSummary
from medeval_core.benchmarks.mediq.cases import MediqCase, MediqCases, MediqFileError, load_cases
from medeval_core.benchmarks.mediq.experts import LLMExpert
from medeval_core.benchmarks.mediq.interaction import (
    Ask,
    Choose,
    Consultation,
    MediqOutput,
    consult,
    open_episode,
)
from medeval_core.benchmarks.mediq.params import MediqParams
from medeval_core.benchmarks.mediq.patients import FactSelectPatient
from medeval_core.benchmarks.mediq.scoring import CaseScore, headline
from medeval_core.benchmarks.mediq.spec import SPEC
from medeval_core.context import current_settings as current_settings
from medeval_core.context import current_store as current_store
from medeval_core.dialogue import Reply
from medeval_core.interaction import EpisodeError as EpisodeError
from medeval_core.records import CaseOutcome, CaseResult
from medeval_core.sessions import Session, SessionError, SessionWalkthrough, WalkthroughError
from medeval_core.settings import Settings
from medeval_core.store import Store, StoreError

BENCHMARK = SPEC.name
ACTOR: Literal["person"] = "person"
DATASETS = {"imedqa": "iMedQA (the protocol's 200)", "icraftmd": "iCraft-MD"}


_cache: dict[str, MediqCases] = {}
_lock = threading.Lock()


def dataset(settings: Settings, name: str) -> MediqCases:
    """The cases of ``name`` under the data folder (loaded once per process)."""
    from medeval_core.benchmarks.mediq.sources import mediq_paths
    from medeval_core.data import DataError

    try:
        path = mediq_paths(settings.data_dir, name)  # type: ignore[arg-type]
    except DataError as exc:
        raise WalkthroughError(f"{exc} Run `python -m medeval_core data fetch mediq` or set MEDEVAL_DATA_DIR.") \
            from None
    key = str(path.path)
    with _lock:
        if key not in _cache:
            try:
                _cache[key] = load_cases(path.path)
            except MediqFileError as exc:
                raise WalkthroughError(str(exc)) from None
        return _cache[key]


def start(store: Store, settings: Settings, name: str, case_id: str, max_turns: int = 10) -> str:
    cases = dataset(settings, name)
    case = cases.by_id().get(case_id)
    if case is None:
        raise WalkthroughError(f"Case {case_id!r} is not in {Path(cases.path).name}; pick one from the list.")
    params = MediqParams(cases=str(Path(cases.path).resolve()), expert=ACTOR, max_turns=max_turns)
    session = Session.open(store, settings, BENCHMARK, params, case.case_id, label=f"MEDIQ walkthrough {case_id}")
    open_episode(Consultation(case, FactSelectPatient(case), max_turns=max_turns), session.context())
    return session.run_id


@dataclass
class Walkthrough(SessionWalkthrough):
    case: MediqCase
    consultation: Consultation

    @property
    def replies(self) -> list[Reply]:
        return self.consultation.replies

    @property
    def questions_left(self) -> int:
        return self.consultation.max_turns - len(self.consultation.replies)

    @property
    def output(self) -> MediqOutput | None:
        return MediqOutput.model_validate(self.result.output) if self.result else None


def load(store: Store, settings: Settings, walkthrough_id: str) -> Walkthrough:
    try:
        session = Session.load(store, settings, walkthrough_id, benchmark=BENCHMARK)
    except SessionError:
        raise WalkthroughError(f"No MEDIQ walkthrough {walkthrough_id!r} is stored; start a new one.") from None
    params = MediqParams.model_validate(session.config.params)
    try:
        cases = load_cases(params.cases)
    except MediqFileError as exc:
        raise WalkthroughError(str(exc)) from None
    case = cases.by_id().get(session.case_id)
    if case is None:
        raise WalkthroughError(f"Walkthrough {walkthrough_id} is on case {session.case_id}, which "
                               f"{Path(params.cases).name} no longer has.")
    context = session.context()
    consultation = Consultation(case, FactSelectPatient(case, withhold_answer_facts=params.withhold_answer_facts),
                                context, max_turns=params.max_turns)
    episode = open_episode(consultation, context, record_start=False)
    episode.restore([(t.actor, Ask(text=t.payload["question"])) for t in session.turns() if t.action == "question"])
    result = session.finished_result()
    if result is not None:
        episode.done = True
    return Walkthrough(id=walkthrough_id, case=case, session=session, consultation=consultation, episode=episode,
                       result=result)


def ask(walk: Walkthrough, question: str) -> Reply:
    if walk.finished:
        raise WalkthroughError("This walkthrough has its choice; start a new one to ask more.")
    if walk.questions_left <= 0:
        raise WalkthroughError(f"The {walk.consultation.max_turns}-question budget is used; choose an option.")
    step = walk.episode.act(Ask(text=question), actor=ACTOR)
    reply: Reply = step.observation
    return reply


def choose(walk: Walkthrough, option: str) -> CaseResult:
    if walk.finished:
        raise WalkthroughError("This walkthrough already has its choice.")
    walk.episode.act(Choose(option=option, forced=walk.questions_left <= 0), actor=ACTOR)
    output = walk.consultation.output()
    provenance = {"scorer": "mediq-accuracy", "on": "answer_idx", "actor": ACTOR}
    outcome = CaseOutcome(output=output.model_dump(mode="json"),
                          metrics={"correct": output.correct, "questions": float(output.num_questions)},
                          scores={"correct": {"value": output.correct, "explanation": None, "provenance": provenance}})
    summary = RunSummary(benchmark=BENCHMARK, title=f"{SPEC.title} walkthrough",
                         counts=RunCounts(expected=1, done=1, failed=0, pending=0),
                         headline=headline([CaseScore(case_id=walk.case.case_id, correct=output.correct,
                                                      num_questions=output.num_questions,
                                                      timed_out=output.timed_out)], "this walkthrough"),
                         extras={"expert": ACTOR})
    try:
        walk.result = walk.session.finish(outcome, summary=summary.model_dump(mode="json"))
    except (SessionError, StoreError) as exc:
        raise WalkthroughError(f"The result could not be saved ({exc}).") from exc
    return walk.result


def uncovered_facts(walk: Walkthrough) -> list[str]:
    return [walk.case.facts[i] for i in walk.consultation.uncovered()]


def expert_consultation(settings: Settings, walk: Walkthrough) -> MediqOutput:
    """What the LLM expert (role ``expert``) does on the same case with the same offline patient, in memory."""
    from medeval_core.models import for_role
    from medeval_core.models.chat import ChatBackendError, ReplyFormatError

    try:
        backend = for_role("expert", settings)
    except ChatBackendError as exc:
        raise WalkthroughError(str(exc)) from None
    ctx = RecordingContext(walk.id, walk.case.case_id, 0, settings, ModelRoles())
    try:
        return consult(LLMExpert(backend), walk.case, walk.consultation.patient, ctx,
                       max_turns=walk.consultation.max_turns, baseline=False)
    except (ChatBackendError, ReplyFormatError) as exc:
        raise WalkthroughError(f"The expert model could not finish the case ({exc}).") from None
