"""The open-diagnosis walkthrough behind the page: a person questions a patient simulated from an AgentClinic
record (offline retrieval), ranks diagnoses, checks the ICD-9 code each one maps to (and corrects it), then sees
Hit@K / Rec@K and the codes matched.

A session run (benchmark ``dynamicare``, one case): each question is a turn stored at once, so a reload continues
from the run id (``Episode.restore`` replays the questions; the offline patient answers the same way); the
submitted diagnoses finish the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from medeval_core.benchmark import RunCounts, RunSummary
from medeval_core.benchmarks.dynamicare.cases import (
    PatientRecord,
    RecordFileError,
    agentclinic_case,
    agentclinic_lines,
    complaint_of,
)
from medeval_core.benchmarks.dynamicare.interaction import (
    Ask,
    Consultation,
    Diagnose,
    DynamicareOutput,
    MappedDiagnosis,
    mapped_diagnoses,
    open_episode,
)
from medeval_core.benchmarks.dynamicare.params import DynamicareParams
from medeval_core.benchmarks.dynamicare.patients import RecordRetrievalPatient
from medeval_core.benchmarks.dynamicare.scoring import METRIC_NAMES, headline
from medeval_core.benchmarks.dynamicare.spec import SPEC
from medeval_core.context import current_settings as current_settings
from medeval_core.context import current_store as current_store
from medeval_core.dialogue import Reply
from medeval_core.interaction import EpisodeError as EpisodeError
from medeval_core.records import CaseOutcome, CaseResult
from medeval_core.sessions import Session, SessionError, SessionWalkthrough, WalkthroughError
from medeval_core.settings import Settings
from medeval_core.store import Store, StoreError
from medeval_core.vocabularies.icd9 import Icd9Mapper, make_mapper
from medeval_core.vocabularies.icd9 import display_code as display_code

BENCHMARK = SPEC.name
ACTOR: Literal["person"] = "person"


def source_file(settings: Settings) -> Path:
    from medeval_core.benchmarks.dynamicare.sources import agentclinic_paths
    from medeval_core.data import DataError

    try:
        return agentclinic_paths(settings.data_dir).medqa
    except DataError as exc:
        raise WalkthroughError(f"{exc} Run `python -m medeval_core data fetch agentclinic` or set "
                               "MEDEVAL_DATA_DIR.") from None


def choices(settings: Settings) -> dict[int, str]:
    """Line number -> chief complaint of every AgentClinic case (what the doctor sees first)."""
    try:
        return {number: complaint_of(raw) for number, raw in agentclinic_lines(source_file(settings))}
    except RecordFileError as exc:
        raise WalkthroughError(str(exc)) from None


def mapper() -> Icd9Mapper:
    return make_mapper("exact")


def _record(path: Path, line: int) -> PatientRecord:
    try:
        return agentclinic_case(path, line, mapper())
    except RecordFileError as exc:
        raise WalkthroughError(str(exc)) from None


def start(store: Store, settings: Settings, line: int, max_turns: int = 10) -> str:
    path = source_file(settings)
    record = _record(path, line)
    params = DynamicareParams(cases=str(path.resolve()), cases_format="agentclinic", doctor=ACTOR,
                              max_turns=max_turns)
    session = Session.open(store, settings, BENCHMARK, params, record.case_id,
                           label=f"Open diagnosis walkthrough {record.case_id}")
    open_episode(Consultation(record, RecordRetrievalPatient(record), mapper(), max_turns=max_turns),
                 session.context())
    return session.run_id


@dataclass
class Walkthrough(SessionWalkthrough):
    record: PatientRecord
    consultation: Consultation

    @property
    def replies(self) -> list[Reply]:
        return self.consultation.replies

    @property
    def questions_left(self) -> int:
        return self.consultation.max_turns - len(self.consultation.replies)

    @property
    def output(self) -> DynamicareOutput | None:
        return DynamicareOutput.model_validate(self.result.output) if self.result else None


def load(store: Store, settings: Settings, walkthrough_id: str) -> Walkthrough:
    try:
        session = Session.load(store, settings, walkthrough_id, benchmark=BENCHMARK)
    except SessionError:
        raise WalkthroughError(f"No open-diagnosis walkthrough {walkthrough_id!r} is stored; start a new one.") \
            from None
    params = DynamicareParams.model_validate(session.config.params)
    line = session.case_id.rsplit("-", 1)[-1]
    if not line.isdigit():
        raise WalkthroughError(f"Walkthrough {walkthrough_id} is on {session.case_id}, not an AgentClinic line.")
    record = _record(Path(params.cases), int(line))
    context = session.context()
    consultation = Consultation(record, RecordRetrievalPatient(record), mapper(), context,
                                max_turns=params.max_turns)
    episode = open_episode(consultation, context, record_start=False)
    episode.restore([(t.actor, Ask(text=t.payload["question"])) for t in session.turns() if t.action == "question"])
    result = session.finished_result()
    if result is not None:
        episode.done = True
    return Walkthrough(id=walkthrough_id, record=record, session=session, consultation=consultation,
                       episode=episode, result=result)


def ask(walk: Walkthrough, question: str) -> Reply:
    if walk.finished:
        raise WalkthroughError("This walkthrough is submitted; start a new one to ask more.")
    if walk.questions_left <= 0:
        raise WalkthroughError(f"The {walk.consultation.max_turns}-question budget is used; give your "
                               "diagnoses.")
    reply: Reply = walk.episode.act(Ask(text=question), actor=ACTOR).observation
    return reply


def parse_ranked(text: str) -> list[str]:
    """One diagnosis a line, most likely first (blank lines and list numbering dropped)."""
    import re

    names = [re.sub(r"^\s*(?:\d+[.)]|[-*])\s*", "", line).strip() for line in text.splitlines()]
    return list(dict.fromkeys(name for name in names if name))


def preview(names: list[str]) -> list[MappedDiagnosis]:
    """The code each ranked name maps to, before submitting (the person may correct them)."""
    return mapped_diagnoses(names, mapper())


def submit(walk: Walkthrough, names: list[str], corrections: dict[str, str]) -> CaseResult:
    if walk.finished:
        raise WalkthroughError("This walkthrough is already submitted.")
    walk.episode.act(Diagnose(diagnoses=names, corrections=corrections, forced=walk.questions_left <= 0),
                     actor=ACTOR)
    output = walk.consultation.output()
    provenance = {"scorer": "hit-at-k", "actor": ACTOR}
    outcome = CaseOutcome(output=output.model_dump(mode="json"), metrics=dict(output.metrics),
                          scores={name: {"value": output.metrics[name], "explanation": None,
                                         "provenance": provenance} for name in METRIC_NAMES})
    summary = RunSummary(benchmark=BENCHMARK, title=f"{SPEC.title} walkthrough",
                         counts=RunCounts(expected=1, done=1, failed=0, pending=0),
                         headline=headline([output.metrics], [output.num_questions], "this walkthrough"),
                         extras={"doctor": ACTOR})
    try:
        walk.result = walk.session.finish(outcome, summary=summary.model_dump(mode="json"))
    except (SessionError, StoreError) as exc:
        raise WalkthroughError(f"The result could not be saved ({exc}).") from exc
    return walk.result
