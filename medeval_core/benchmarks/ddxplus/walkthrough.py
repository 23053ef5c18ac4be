"""The DDXPlus walkthrough behind the page: a person questions one simulated patient, then gives a differential.

It is the same ``Episode`` a batch run uses, with a person as the actor. Each walkthrough is its own run
(benchmark ``ddxplus-walkthrough``, one case): every question is stored as a turn the moment it is asked, so a
half-done walkthrough continues after a page reload from its id alone (the page keeps the id in the URL), and the
submitted differential is stored as the case result with its metrics.

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

from medeval_core.benchmarks.ddxplus import SAMPLE_PATIENTS, default_kb_dir
from medeval_core.benchmarks.ddxplus.interaction import Episode, EpisodeResult
from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase, load_kb
from medeval_core.benchmarks.ddxplus.kb_bayes import KBBayesAgent, Suggestion
from medeval_core.benchmarks.ddxplus.patients import DDXPlusPatient, PatientSet, load_patients
from medeval_core.metrics.ddxplus import THRESHOLD
from medeval_core.records import CaseResult, CaseStatus, RunConfig, RunStatus, Turn, utc_now
from medeval_core.settings import Settings, runtime_versions
from medeval_core.store import Store, StoreError, new_run_id

BENCHMARK = "ddxplus-walkthrough"
ACTOR = "person"
PickMode = Literal["random", "pathology", "index"]


class WalkthroughError(ValueError):
    """A walkthrough action that cannot be done; the message says what to do instead."""


@dataclass(frozen=True)
class Resources:
    """What the page needs once per process: the KB, the patients to pick from and a KB-Bayes teacher."""

    kb: KnowledgeBase
    patients: PatientSet
    teacher: KBBayesAgent
    patients_file: Path


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
                                    patients_file=Path(path))
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
    """Open a walkthrough on the patient at ``position``; returns its id (a run id)."""
    patient = res.patients.patient(position)
    config = RunConfig(
        benchmark=BENCHMARK, label=f"Walkthrough {patient.case_id}",
        params={"patients": str(res.patients_file), "row": patient.row, "case_id": patient.case_id,
                "agent": ACTOR, "reads_kb": False},
        settings=settings.effective(), settings_hash=settings.settings_hash(), versions=runtime_versions(),
    )
    run = store.create_run(config, run_id=new_run_id("ddxplus-walk"), expected_cases=1)
    store.update_run(run.id, status=RunStatus.RUNNING, started_at=utc_now())
    episode = Episode(kb=res.kb, patient=patient)
    store.add_turns(episode.records(run.id))
    return run.id


@dataclass
class Walkthrough:
    id: str
    patient: DDXPlusPatient
    episode: Episode
    result: CaseResult | None

    @property
    def finished(self) -> bool:
        return self.result is not None


def load(store: Store, res: Resources, walkthrough_id: str) -> Walkthrough:
    """Rebuild a walkthrough from the store (its stored questions are replayed: answers are deterministic)."""
    run = store.find_run(walkthrough_id)
    if run is None or run.benchmark != BENCHMARK:
        raise WalkthroughError(f"No walkthrough {walkthrough_id!r} is stored; start a new one.")
    row = int(run.config["params"]["row"])
    if row not in res.patients.position:
        raise WalkthroughError(f"Walkthrough {walkthrough_id} is on row {row}, which the loaded patients lack.")
    patient = res.patients.patient(res.patients.position[row])
    turns = store.turns(walkthrough_id, patient.case_id)
    asks = [t for t in turns if t.action == "ask"]
    episode = Episode.restore(res.kb, patient, [t.payload["root"] for t in asks], [t.actor for t in asks])
    results = store.results(walkthrough_id)
    result = results[0] if results else None
    if result is not None:
        episode.result = EpisodeResult(
            differential=result.output["differential"], inquired=result.output["inquired"],
            metrics=result.metrics, missed=result.output["missed"])
    return Walkthrough(id=walkthrough_id, patient=patient, episode=episode, result=result)


def ask(store: Store, walk: Walkthrough, code: str) -> None:
    """Ask one question and store it as the next turn at once."""
    if walk.finished:
        raise WalkthroughError("This walkthrough is submitted; start a new one to ask more questions.")
    walk.episode.ask(code, actor=ACTOR)
    turn = walk.episode.records(walk.id)[-1]
    store.add_turns([turn])


def submit(store: Store, walk: Walkthrough, differential: dict[str, float]) -> CaseResult:
    """Score and store the person's differential; the walkthrough is then complete."""
    if walk.finished:
        raise WalkthroughError("This walkthrough is already submitted.")
    result = walk.episode.submit(differential, actor=ACTOR)
    store.add_turns([walk.episode.records(walk.id)[-1]])
    case = CaseResult(run_id=walk.id, case_id=walk.patient.case_id, status=CaseStatus.OK,
                      output=result.output(walk.patient), metrics=result.metrics, started_at=utc_now(),
                      finished_at=utc_now())
    try:
        store.save_result(case)
    except StoreError as exc:
        raise WalkthroughError(f"The result could not be saved ({exc}).") from exc
    store.update_run(walk.id, status=RunStatus.COMPLETED, finished_at=utc_now(),
                     summary={"metrics": result.metrics, "pathology": walk.patient.pathology})
    walk.result = case
    return case


def suggest(res: Resources, walk: Walkthrough) -> Suggestion:
    """What the KB-Bayes agent would ask next after the questions asked so far (for teaching)."""
    session = res.teacher.replay(walk.episode.intake(), walk.episode.answers)
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
    return [turn for turn in walk.episode.records(walk.id) if turn.action == "ask"]
