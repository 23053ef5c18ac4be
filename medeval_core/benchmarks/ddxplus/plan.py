"""DDXPlus batch runs: the plan the runner executes (and rebuilds from the stored config to resume).

``RunConfig.params``: ``patients`` (CSV or zip), ``train`` (optional), ``kb`` (folder), ``agent`` (``kb-bayes``
or ``llm``), ``limit``, ``agent_params`` (the agent's own settings) and ``reads_kb`` (whether the agent read the
KB's condition lists: a run condition shown beside every result).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from medeval_core.backends.chat import ChatBackendError
from medeval_core.benchmarks import BenchmarkPlan, PlanError
from medeval_core.benchmarks.ddxplus import default_kb_dir
from medeval_core.benchmarks.ddxplus.interaction import Agent, Episode, run_episode
from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase, KnowledgeBaseError, load_kb
from medeval_core.benchmarks.ddxplus.patients import DDXPlusPatient, PatientFileError, PatientSet, load_patients
from medeval_core.benchmarks.ddxplus.scoring import REFERENCE_ROWS, PredictionBuilder, score
from medeval_core.records import Case, CaseOutcome, CaseResult, CaseStatus, RunConfig
from medeval_core.runs import current_run_id
from medeval_core.settings import Settings
from medeval_core.store import open_store

AGENTS = ("kb-bayes", "llm")


class DDXPlusRunError(PlanError):
    """A run configuration that cannot work (unknown agent, missing files); the message says what to change."""


def run_params(
    settings: Settings,
    patients: Path,
    agent: str,
    train: Path | None = None,
    kb: Path | None = None,
    limit: int | None = None,
    agent_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The params of a DDXPlus RunConfig, with absolute paths so that ``resume`` works from any folder."""
    if agent not in AGENTS:
        raise DDXPlusRunError(f"Unknown DDXPlus agent {agent!r}; choose one of {', '.join(AGENTS)}.")
    kb_dir = Path(kb) if kb is not None else default_kb_dir(settings.data_dir)
    knowledge = load_kb(kb_dir)
    built = build_agent(agent, knowledge, _load_train(train, knowledge), settings, agent_params or {})
    return {
        "patients": str(Path(patients).resolve()),
        "train": str(Path(train).resolve()) if train is not None else None,
        "kb": str(kb_dir.resolve()),
        "agent": agent,
        "limit": limit,
        "agent_params": built.params(),
        "reads_kb": built.reads_kb,
    }


def _load_train(train: Path | str | None, kb: KnowledgeBase) -> PatientSet | None:
    return load_patients(train, kb) if train else None


def build_agent(name: str, kb: KnowledgeBase, train: PatientSet | None, settings: Settings,
                params: dict[str, Any]) -> Agent:
    if name == "kb-bayes":
        from dataclasses import fields

        from medeval_core.benchmarks.ddxplus.kb_bayes import KBBayesAgent, KBBayesConfig

        known = {f.name for f in fields(KBBayesConfig)}
        return KBBayesAgent.fit(kb, train, KBBayesConfig(**{k: v for k, v in params.items() if k in known}))
    if name == "llm":
        from medeval_core.benchmarks.ddxplus.llm_agent import LLMAgent

        return LLMAgent.from_settings(kb, settings, params)
    raise DDXPlusRunError(f"Unknown DDXPlus agent {name!r}; choose one of {', '.join(AGENTS)}.")


def build_plan(config: RunConfig, settings: Settings) -> BenchmarkPlan:
    params = config.params
    try:
        kb = load_kb(params["kb"])
        patients = load_patients(params["patients"], kb)
        agent = build_agent(params["agent"], kb, _load_train(params.get("train"), kb), settings,
                            params.get("agent_params") or {})
    except (KnowledgeBaseError, PatientFileError, ChatBackendError) as exc:
        raise DDXPlusRunError(str(exc)) from None
    if not len(patients):
        raise DDXPlusRunError(f"{params['patients']} has no usable patient rows: {patients.report.summary()}")
    limit = params.get("limit")
    if limit is not None:
        patients = patients.subset(np.arange(min(int(limit), len(patients))))
    store_url = settings.db_url
    return BenchmarkPlan(
        cases=patients.cases(),
        run_case=_case_function(kb, agent, store_url),
        summarize=lambda results: summarize(patients, results, agent),
    )


def _case_function(kb: KnowledgeBase, agent: Agent, store_url: str) -> Callable[[Case, int], CaseOutcome]:
    def run_case(case: Case, repetition: int) -> CaseOutcome:
        if not isinstance(case, DDXPlusPatient):
            raise TypeError(f"Expected a DDXPlus patient, got {type(case).__name__}.")
        episode = Episode(kb=kb, patient=case)
        result = run_episode(agent, episode)
        output = result.output(case)
        run_id = current_run_id.get()
        if run_id is not None:
            store = open_store(store_url)
            # A case redone after a crash between its turns and its result keeps the first dialogue stored.
            output["turns_stored"] = not store.turns(run_id, case.case_id, repetition)
            if output["turns_stored"]:
                store.add_turns(episode.records(run_id, case.case_id, repetition))
        return CaseOutcome(output=output, metrics=result.metrics)

    return run_case


def summarize(patients: PatientSet, results: list[CaseResult], agent: Agent) -> dict[str, Any]:
    """Run metrics with the same vectorised scorer as ``score ddxplus``, plus a per-pathology breakdown.

    ``metrics`` is over every planned patient: a failed or unfinished case counts as an empty differential with
    no questions, so failures cannot flatter a run. ``metrics_completed`` is over the finished cases only.
    """
    position = patients.position
    everyone = PredictionBuilder(patients)
    finished: list[int] = []
    n_failed = 0
    for result in results:
        if result.status != CaseStatus.OK:
            n_failed += 1
            continue
        row = int(result.output["index"])
        everyone.add(position[row], result.output["differential"].items(), result.output["inquired"])
        finished.append(position[row])
    all_patients = score(patients, everyone.build())
    summary: dict[str, Any] = {
        "agent": getattr(agent, "name", type(agent).__name__),
        "reads_kb": bool(getattr(agent, "reads_kb", False)),
        "patients": len(patients),
        "finished": len(finished),
        "failed": n_failed,
        "load_report": patients.report.summary(),
        "metrics": all_patients.metrics,
        "per_pathology": all_patients.per_pathology,
        "reference": REFERENCE_ROWS,
    }
    if finished:
        done = np.asarray(sorted(finished))
        subset = patients.subset(done)
        builder = PredictionBuilder(subset)
        for result in results:
            if result.status == CaseStatus.OK:
                row = int(result.output["index"])
                builder.add(subset.position[row], result.output["differential"].items(), result.output["inquired"])
        summary["metrics_completed"] = score(subset, builder.build()).metrics
    return summary
