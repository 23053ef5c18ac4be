"""The SDBench walkthrough behind the page: a person plays one case against the gatekeeper, then commits.

It is the same environment, episode, judge and cost scorers a batch run uses, with a person as the agent. Each
walkthrough is a session run (``sessions.Session``, benchmark ``sdbench``, one case): every exchange is stored as a
turn the moment it happens, so an unfinished walkthrough resumes after a reload from its run id alone (the page
keeps it in the URL). Restoring replays the stored exchanges with their stored answers, so even an LLM
gatekeeper's answers come back as they were given. After the commit the judge's score, the reference and the whole
case are shown; a clinician may add their own 1-5 grade, stored as a judgement of its own with who gave it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from medeval_core.benchmark import BenchmarkError
from medeval_core.benchmarks.sdbench.agents import PERSON
from medeval_core.benchmarks.sdbench.benchmark import (
    GATEKEEPER_ROLE,
    JUDGE_ROLE,
    Resources,
    SDBenchBenchmark,
    SDBenchOutput,
    SDBenchParams,
    build_gatekeeper,
    default_prices,
    open_episode,
    output_of,
)
from medeval_core.benchmarks.sdbench.cases import SDBenchCase
from medeval_core.benchmarks.sdbench.gatekeeper import (
    Action,
    Answer,
    CaseEnvironment,
    Diagnosis,
    Gatekeeper,
    LLMGatekeeper,
    Questions,
    Tests,
)
from medeval_core.benchmarks.sdbench.judge import CLINICIAN_JUDGE, Grade, judgement
from medeval_core.benchmarks.sdbench.spec import SPEC
from medeval_core.context import current_settings, current_store
from medeval_core.interaction import Episode, EpisodeError, Limits
from medeval_core.models import for_role, is_served
from medeval_core.records import CaseOutcome, CaseResult, Judgement
from medeval_core.sessions import Session, SessionError, SessionWalkthrough, WalkthroughError
from medeval_core.settings import Settings
from medeval_core.store import Store, StoreError

BENCHMARK = SPEC.name
Mode = Literal["questions", "tests", "diagnosis"]


def case_sources(settings: Settings) -> dict[str, Path]:
    """Case files the page offers: the data folder's AgentClinic files and any JSON Lines under ``sdbench/``."""
    data = Path(settings.data_dir)
    bundled = (("AgentClinic MedQA", data / "agentclinic" / "agentclinic_medqa.jsonl"),
               ("AgentClinic MedQA extended", data / "agentclinic" / "agentclinic_medqa_extended.jsonl"))
    found = {label: path for label, path in bundled if path.is_file()}
    for path in sorted((data / "sdbench").glob("*.jsonl")) if (data / "sdbench").is_dir() else []:
        found[f"sdbench/{path.name}"] = path
    return found


def page_params(settings: Settings, cases: Path, case_id: str | None = None) -> SDBenchParams:
    """A session's parameters: the person as the agent; the LLM gatekeeper and judge when models serve their
    roles, else the offline ones."""
    try:
        prices = default_prices(settings)
    except BenchmarkError as exc:
        raise WalkthroughError(str(exc)) from None
    return SDBenchParams(
        cases=str(Path(cases).resolve()), agent="person", prices=str(prices.resolve()),
        gatekeeper="llm" if is_served(settings.role(GATEKEEPER_ROLE)) else "offline",
        judge="llm" if is_served(settings.role(JUDGE_ROLE)) else "offline",
        case_ids=[case_id] if case_id else None)


def _benchmark() -> SDBenchBenchmark:
    from medeval_core import registry

    found = registry.benchmark(BENCHMARK)
    assert isinstance(found, SDBenchBenchmark)
    return found


def load_source(settings: Settings, cases: Path) -> Resources:
    try:
        return _benchmark().resources(page_params(settings, cases), settings)
    except BenchmarkError as exc:
        raise WalkthroughError(str(exc)) from None


def search(cases: Sequence[SDBenchCase], split: str | None, query: str) -> list[SDBenchCase]:
    """Cases of ``split`` whose id or summary contains every word of ``query``."""
    words = query.lower().split()
    return [case for case in cases if (split is None or case.split == split)
            and all(word in f"{case.case_id} {case.case_summary}".lower() for word in words)]


class _Restoring:
    """The live gatekeeper, answering the restored turns with their stored answers first."""

    def __init__(self, live: Gatekeeper, stored: list[list[Answer]]) -> None:
        self.live = live
        self.name = live.name
        self.stored = stored

    def answer(self, kind: Literal["questions", "tests"], requests: Sequence[str]) -> list[Answer]:
        if not self.stored:
            return self.live.answer(kind, requests)
        answers = self.stored.pop(0)
        if isinstance(self.live, LLMGatekeeper):
            self.live.remember(kind, answers)
        return answers

    def describe(self) -> dict[str, Any]:
        return self.live.describe()


def _models(settings: Settings, params: SDBenchParams) -> dict[str, Any]:
    models: dict[str, Any] = {}
    if params.gatekeeper == "llm":
        models[GATEKEEPER_ROLE] = lambda: for_role(GATEKEEPER_ROLE, settings)
    if params.judge == "llm":
        models[JUDGE_ROLE] = lambda: for_role(JUDGE_ROLE, settings)
    return models


@dataclass
class Walkthrough(SessionWalkthrough):
    case: SDBenchCase
    params: SDBenchParams
    environment: CaseEnvironment

    @property
    def output(self) -> SDBenchOutput | None:
        return SDBenchOutput.model_validate(self.result.output) if self.result is not None else None


def _open(settings: Settings, session: Session, params: SDBenchParams, record_start: bool) -> Walkthrough:
    try:
        res = _benchmark().resources(params, settings)
    except BenchmarkError as exc:
        raise WalkthroughError(str(exc)) from None
    cases = {case.case_id: case for case in res.all_cases}
    case = cases.get(session.case_id)
    if case is None:
        raise WalkthroughError(f"Walkthrough {session.run_id} is on case {session.case_id}, which "
                               f"{params.cases} no longer holds; start a new one.")
    ctx = session.context(_models(settings, params))
    turns = session.turns() if not record_start else []
    stored = [[Answer.model_validate(a) for a in t.payload.get("provenance", {}).get("answers", [])]
              for t in turns if t.action in ("questions", "tests")]
    gatekeeper = _Restoring(build_gatekeeper(params.gatekeeper, case, res, ctx), stored)
    environment = CaseEnvironment(case, gatekeeper, res.pricer())
    episode = open_episode(environment, ctx, Limits()) if record_start else _quiet_episode(environment, ctx)
    episode.restore([(t.actor, _action_of(t.action, t.payload)) for t in turns
                     if t.action in ("questions", "tests")])
    result = session.finished_result()
    if result is not None:
        episode.done = True
    return Walkthrough(id=session.run_id, case=case, params=params, session=session, environment=environment,
                       episode=episode, result=result)


def _quiet_episode(environment: CaseEnvironment, ctx: Any) -> Episode[Any, Any]:
    from medeval_core.benchmarks.sdbench.benchmark import GATEKEEPER_ACTOR, observation_payload

    return Episode(environment, ctx, Limits(), start_actor=GATEKEEPER_ACTOR, record_start=False,
                   observation_payload=observation_payload)


def _action_of(kind: str, payload: dict[str, Any]) -> Action:
    requests = list(payload.get("requests", []))
    return Questions(items=requests) if kind == "questions" else Tests(items=requests)


def start(store: Store, settings: Settings, cases: Path, case_id: str) -> str:
    """Open a walkthrough session on one case; returns its id (a run id). The summary is stored as turn 0."""
    params = page_params(settings, cases, case_id)
    session = Session.open(store, settings, BENCHMARK, params, case_id, label=f"Walkthrough {case_id}")
    _open(settings, session, params, record_start=True)
    return session.run_id


def load(store: Store, settings: Settings, walkthrough_id: str) -> Walkthrough:
    """Rebuild a walkthrough from the store, its exchanges replayed with their stored answers."""
    try:
        session = Session.load(store, settings, walkthrough_id, benchmark=BENCHMARK)
    except SessionError:
        raise WalkthroughError(f"No walkthrough {walkthrough_id!r} is stored; start a new one.") from None
    params = SDBenchParams.model_validate(session.config.params)
    return _open(settings, session, params, record_start=False)


def act(walk: Walkthrough, mode: Mode, text: str) -> None:
    """One turn from the page's box: questions or tests one per line, or the diagnosis (which commits)."""
    if walk.finished:
        raise WalkthroughError("This walkthrough is committed; start a new one to continue.")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise WalkthroughError("Write something first: one question or test per line, or your diagnosis.")
    if mode == "diagnosis":
        commit(walk, " ".join(lines))
        return
    action: Action = Questions(items=lines) if mode == "questions" else Tests(items=lines)
    walk.episode.act(action, actor=PERSON)


def commit(walk: Walkthrough, diagnosis: str) -> CaseResult:
    """Commit the diagnosis: judge and cost it with the run's scorers and finish the session."""
    walk.episode.act(Diagnosis(text=diagnosis), actor=PERSON)
    settings = walk.session.settings
    benchmark = _benchmark()
    output = output_of(walk.environment, PERSON)
    ctx = walk.session.context(_models(settings, walk.params))
    try:
        scores = {}
        for scorer in benchmark.scorers(walk.params, settings):
            scores.update(scorer(walk.case, output, ctx))
    except RuntimeError as exc:  # the judge's or its backend's failure: shown on the page, the session kept
        walk.session.fail(f"The diagnosis could not be judged: {exc}")
        raise WalkthroughError(f"The diagnosis could not be judged ({exc}); start a new walkthrough.") from exc
    outcome = CaseOutcome(output=output.model_dump(mode="json"),
                          metrics={name: score.value for name, score in scores.items()},
                          scores={name: score.model_dump(mode="json") for name, score in scores.items()})
    try:
        result = walk.session.finish(outcome)
        store = walk.session.store
        summary = benchmark.summarize(walk.params, [walk.case], [result])
        store.update_run(walk.id, summary=summary.model_dump(mode="json"))
    except (SessionError, StoreError) as exc:
        raise WalkthroughError(f"The result could not be saved ({exc}).") from exc
    walk.result = result
    return result


class TimelineRow(BaseModel):
    turn: int
    kind: str
    request: str
    answer: str
    cost: float
    code: str = ""
    estimated: bool | None = None
    source: str = ""


def timeline(walk: Walkthrough, reveal: bool) -> list[TimelineRow]:
    """Every request so far with its answer and price; the gatekeeper's sources only after the reveal."""
    rows: list[TimelineRow] = []
    for number, (action, reply) in enumerate(walk.environment.history, start=1):
        prices = {p.name: p for p in reply.prices}
        answers = {a.request: a for a in reply.answers}
        for index, request in enumerate(action.items):
            answer = answers.get(request)
            price = prices.get(request)
            cost = price.price if price is not None else (300.0 if reply.visit_charged and index == 0 else 0.0)
            rows.append(TimelineRow(
                turn=number, kind="question" if action.kind == "questions" else "test", request=request,
                answer=answer.text if answer is not None else "", cost=cost,
                code=", ".join(price.codes) if price is not None else "",
                estimated=price.estimated if price is not None else None,
                source=answer.source if reveal and answer is not None else ""))
    return rows


def running_cost(walk: Walkthrough) -> tuple[int, float, float]:
    """(visits, visit cost, test cost) so far."""
    visits = sum(1 for _, reply in walk.environment.history if reply.visit_charged)
    tests = sum(p.price for _, reply in walk.environment.history for p in reply.prices)
    return visits, visits * 300.0, tests


class FindingRow(BaseModel):
    section: str
    name: str
    text: str
    asked: bool


def findings(walk: Walkthrough) -> list[FindingRow]:
    """The case's findings, each marked with whether the walkthrough asked for it."""
    asked: set[str] = set()
    for _, reply in walk.environment.history:
        for answer in reply.answers:
            if answer.source == "REAL" and answer.matched:
                asked.update(part.split(":", 1)[0].strip() for part in answer.matched.split(";"))
                asked.add(answer.matched)
    structured = walk.case.findings
    if structured is None:
        return []
    return [FindingRow(section=section, name=name, text=text, asked=name in asked)
            for section, entries in (("history", structured.history), ("examination", structured.examination),
                                     ("tests", structured.tests)) for name, text in entries.items()]


def clinician_grade(store: Store, walk: Walkthrough, score: int, reasoning: str, graded_by: str) -> Judgement:
    """A clinician's own 1-5 grade of the committed diagnosis, stored apart from the judge's, with who gave it."""
    if not walk.finished:
        raise WalkthroughError("Commit a diagnosis before grading it.")
    if not graded_by.strip():
        raise WalkthroughError("Give your name so that the grade says who gave it.")
    try:
        grade = Grade(score=score, reasoning=reasoning.strip() or "No reasoning given.")
    except ValueError:
        raise WalkthroughError("A grade is a whole number from 1 to 5.") from None
    record = judgement(CLINICIAN_JUDGE, f"clinician:{graded_by.strip()}", grade, graded_by=graded_by.strip())
    record = record.model_copy(update={"run_id": walk.id, "case_id": walk.case.case_id})
    store.add_judgement(record)
    return record


def clinician_grades(store: Store, walk: Walkthrough) -> list[Judgement]:
    return [j for j in store.judgements(run_id=walk.id) if j.judge_name == CLINICIAN_JUDGE]


__all__ = ["EpisodeError", "Walkthrough", "WalkthroughError", "act", "case_sources", "clinician_grade",
           "current_settings", "current_store", "findings", "load", "load_source", "running_cost", "search", "start",
           "timeline"]
