"""The DDXPlus walkthrough behind the page: a person questions one simulated patient, then gives a differential.

It is the same consultation environment and core episode a batch run uses, with a person as the actor. Each
walkthrough is a session run (``sessions.Session``, benchmark ``ddxplus``, kind ``session``, one case): every
question is stored as a turn the moment it is asked, so a half-done walkthrough continues after a page reload
from its run id alone (the page keeps the id in the URL; ``Episode.restore`` replays the stored questions), and
the submitted differential finishes the session with its metrics.

A ranked differential without masses is converted by ``ranks_to_masses``: the pathology at rank r of n gets
weight 2n + 1 - r (the first about twice the last), normalised to 1. Every listed pathology then stays above the
0.01 threshold (the smallest share is at least 0.0136 for up to 49 names) and the first one is the unique top.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import plotly.graph_objects as go

from medeval_core.benchmark import Metric, RunCounts, RunSummary
from medeval_core.benchmarks.ddxplus.interaction import (
    Ask,
    Consultation,
    DDXPlusOutput,
    Diagnose,
    Intake,
    open_episode,
)
from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase, load_kb, root_of
from medeval_core.benchmarks.ddxplus.kb_bayes import KBBayesAgent, Suggestion
from medeval_core.benchmarks.ddxplus.metrics import METRIC_KEYS, THRESHOLD
from medeval_core.benchmarks.ddxplus.params import DDXPlusParams
from medeval_core.benchmarks.ddxplus.patients import DDXPlusPatient, PatientSet, load_patients
from medeval_core.benchmarks.ddxplus.scoring import metric_unit
from medeval_core.benchmarks.ddxplus.sources import SAMPLE_PATIENTS, default_kb_dir
from medeval_core.benchmarks.ddxplus.spec import SPEC
from medeval_core.context import current_settings as current_settings
from medeval_core.context import current_store as current_store
from medeval_core.interaction import EpisodeError as EpisodeError
from medeval_core.records import CaseOutcome, CaseResult, Turn
from medeval_core.sessions import Session, SessionError, SessionWalkthrough, WalkthroughError
from medeval_core.settings import Settings
from medeval_core.store import Store, StoreError

BENCHMARK = SPEC.name
ACTOR = "person"
PickMode = Literal["random", "pathology", "index"]


@dataclass(frozen=True)
class Resources:
    """What the page needs once per process: the KB, the patients to pick from and a KB-Bayes teacher."""

    kb: KnowledgeBase
    patients: PatientSet
    teacher: KBBayesAgent
    patients_file: Path
    kb_dir: Path


_cache: dict[tuple[str, str], Resources] = {}
_cache_lock = threading.Lock()


def resources(settings: Settings, patients_file: Path | None = None) -> Resources:
    """Load (once per process) the KB and patients under the data folder; the teacher learns from those patients.

    Raises WalkthroughError with the command that fetches the data when it is missing.
    """
    kb_dir = default_kb_dir(settings.data_dir)
    path = patients_file or kb_dir / SAMPLE_PATIENTS
    key = (str(kb_dir), str(path))
    with _cache_lock:
        if key not in _cache:
            if not (kb_dir / "release_evidences.json").is_file() or not Path(path).is_file():
                raise WalkthroughError(
                    f"The DDXPlus files are not under {kb_dir}: run `python -m medeval_core data fetch ddxplus` "
                    "or set MEDEVAL_DATA_DIR to a folder holding ddxplus/."
                )
            kb = load_kb(kb_dir)
            patients = load_patients(path, kb)
            _cache[key] = Resources(kb=kb, patients=patients, teacher=KBBayesAgent.fit(kb, patients),
                                    patients_file=Path(path), kb_dir=Path(kb_dir))
        return _cache[key]


def pick_patient(res: Resources, mode: PickMode, pathology: str | None = None, index: int | None = None,
                 seed: int | None = None) -> int:
    """Position of a patient in ``res.patients``: at random, at random among one pathology, or by file row."""
    patients = res.patients
    if mode == "index":
        if index is None or index not in patients.position:
            raise WalkthroughError(f"Row {index} is not a loaded patient; choose a row between 0 and "
                                   f"{int(patients.rows.max())}.")
        return patients.position[index]
    candidates = list(range(len(patients)))
    if mode == "pathology":
        column = res.kb.pathology_index(pathology or "")
        if column is None:
            raise WalkthroughError(f"{pathology!r} is not a DDXPlus pathology.")
        candidates = [i for i in candidates if patients.pathology[i] == column]
        if not candidates:
            raise WalkthroughError(f"No loaded patient has {pathology}; pick another pathology.")
    return random.Random(seed).choice(candidates)


def start(store: Store, settings: Settings, res: Resources, position: int) -> str:
    """Open a walkthrough session on the patient at ``position``; returns its id (a run id). The intake is
    stored at once as turn 0."""
    patient = res.patients.patient(position)
    params = DDXPlusParams(patients=str(res.patients_file.resolve()), kb=str(res.kb_dir.resolve()), agent=ACTOR,
                           reads_kb=False)
    session = Session.open(store, settings, BENCHMARK, params, patient.case_id,
                           label=f"Walkthrough {patient.case_id}")
    open_episode(Consultation(res.kb, patient), session.context())
    return session.run_id


@dataclass
class Walkthrough(SessionWalkthrough):
    patient: DDXPlusPatient
    consultation: Consultation

    @property
    def asked(self) -> list[str]:
        return self.consultation.asked

    @property
    def max_turns(self) -> int:
        return self.consultation.max_turns

    @property
    def questions_left(self) -> int:
        return self.consultation.questions_left

    def intake(self) -> Intake:
        return self.consultation.intake()


def load(store: Store, res: Resources, walkthrough_id: str, settings: Settings | None = None) -> Walkthrough:
    """Rebuild a walkthrough from the store (its stored questions are replayed: answers are deterministic)."""
    if settings is None:
        from medeval_core.context import current_settings

        settings = current_settings()
    try:
        session = Session.load(store, settings, walkthrough_id, benchmark=BENCHMARK)
    except SessionError:
        raise WalkthroughError(f"No walkthrough {walkthrough_id!r} is stored; start a new one.") from None
    case_id = session.case_id
    row = int(case_id.removeprefix("row-")) if case_id.startswith("row-") else -1
    if row not in res.patients.position:
        raise WalkthroughError(f"Walkthrough {walkthrough_id} is on {case_id}, which the loaded patients lack.")
    patient = res.patients.patient(res.patients.position[row])
    consultation = Consultation(res.kb, patient)
    episode = open_episode(consultation, session.context(), record_intake=False)
    turns = session.turns()
    episode.restore([(t.actor, Ask(code=t.payload["root"])) for t in turns if t.action == "ask"])
    result = session.finished_result()
    if result is not None:
        episode.done = True
    return Walkthrough(id=walkthrough_id, patient=patient, session=session, consultation=consultation,
                       episode=episode, result=result)


def known_roots(walk: Walkthrough) -> set[str]:
    """The evidences whose answer the person already has: the reason for consulting and every question asked."""
    return {walk.patient.initial_evidence, *walk.asked}


def questions_to_ask(res: Resources, walk: Walkthrough, query: str) -> list[str]:
    """The questions the picker offers: those matching ``query`` (all without one), less those already answered,
    so that pressing Ask again cannot repeat the last question."""
    matches = res.kb.search_questions(query, limit=len(res.kb.roots)) if query.strip() else res.kb.roots
    known = known_roots(walk)
    return [code for code in matches if code not in known]


def ask(store: Store, walk: Walkthrough, code: str) -> None:
    """Ask one question; the session stores it as the next turn at once. A question already answered is refused:
    it would spend one of the 30 questions and count in IL for nothing."""
    if walk.finished:
        raise WalkthroughError("This walkthrough is submitted; start a new one to ask more questions.")
    root = root_of(str(code).strip())
    if root in known_roots(walk):
        raise WalkthroughError(f"{root} is already answered above; pick another question.")
    walk.episode.act(Ask(code=code), actor=ACTOR)


def submit(store: Store, walk: Walkthrough, differential: dict[str, float]) -> CaseResult:
    """Score the person's differential and finish the session with it; the walkthrough is then complete."""
    if walk.finished:
        raise WalkthroughError("This walkthrough is already submitted.")
    step = walk.episode.act(Diagnose(differential=differential), actor=ACTOR)
    verdict = step.observation
    output: DDXPlusOutput = walk.consultation.output()
    provenance = {"scorer": "ddxplus-metrics", "semantics": "mila-iqia/ddxplus compute_metrics", "actor": ACTOR}
    outcome = CaseOutcome(output=output.model_dump(mode="json"), metrics=dict(verdict.metrics),
                          scores={key: {"value": verdict.metrics[key], "explanation": None, "provenance": provenance}
                                  for key in METRIC_KEYS})
    summary = RunSummary(
        benchmark=BENCHMARK, title=f"{SPEC.title} walkthrough", counts=RunCounts(expected=1, done=1, failed=0,
                                                                                  pending=0),
        headline=[Metric(name=key, value=verdict.metrics[key], n=1, denominator="this walkthrough",
                         unit=metric_unit(key)) for key in METRIC_KEYS],
        extras={"metrics": verdict.metrics, "pathology": walk.patient.pathology, "agent": ACTOR, "reads_kb": False},
    )
    try:
        result = walk.session.finish(outcome, summary=summary.model_dump(mode="json"))
    except (SessionError, StoreError) as exc:
        raise WalkthroughError(f"The result could not be saved ({exc}).") from exc
    walk.result = result
    return result


def suggest(res: Resources, walk: Walkthrough) -> Suggestion:
    """What the KB-Bayes agent would ask next after the questions asked so far (for teaching)."""
    session = res.teacher.replay(walk.intake(), walk.consultation.answers)
    return session.suggest()


def ranks_to_masses(ranked: Sequence[str]) -> dict[str, float]:
    """A ranked list -> masses (rule in the module docstring): linear weights 2n+1-r, normalised."""
    n = len(ranked)
    if len(set(ranked)) != n:
        raise WalkthroughError("Each pathology can appear only once in the ranking.")
    total = n * (3 * n + 1) / 2
    return {name: (2 * n + 1 - rank) / total for rank, name in enumerate(ranked, start=1)}


def comparison_rows(res: Resources, walk: Walkthrough) -> list[dict[str, Any]]:
    """Ground-truth and submitted masses per pathology (either above zero), largest ground truth first."""
    if walk.result is None:
        return []
    truth = dict(walk.patient.differential)
    mine = walk.result.output["differential"]
    names = sorted(set(truth) | set(mine), key=lambda name: (-truth.get(name, 0.0), -mine.get(name, 0.0)))
    return [{"pathology": name, "ground truth": truth.get(name, 0.0), "yours": mine.get(name, 0.0)}
            for name in names]


def comparison_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Ground-truth and submitted differentials side by side, with the 0.01 threshold drawn."""
    figure = go.Figure()
    names = [row["pathology"] for row in rows]
    for column, colour in (("ground truth", "#4c78a8"), ("yours", "#f58518")):
        figure.add_bar(name=column, y=names, x=[row[column] for row in rows], orientation="h",
                       marker_color=colour, hovertemplate="%{y}: %{x:.3f}<extra>" + column + "</extra>")
    figure.add_vline(x=THRESHOLD, line_dash="dot", annotation_text="0.01", annotation_position="top")
    figure.update_layout(barmode="group", xaxis_title="mass", yaxis={"autorange": "reversed"},
                         height=max(260, 26 * len(rows) + 80), margin={"t": 30, "b": 30},
                         legend={"orientation": "h"})
    return figure


def missed_questions(res: Resources, walk: Walkthrough) -> list[tuple[str, str]]:
    """The patient's positive evidences never asked: (code, question)."""
    if walk.result is None:
        return []
    return [(code, res.kb.question_text(code)) for code in walk.result.output["missed"]]


def dialogue(walk: Walkthrough) -> list[Turn]:
    """The question turns so far (the intake and the submission are shown apart)."""
    return [turn for turn in walk.session.turns() if turn.action == "ask"]
