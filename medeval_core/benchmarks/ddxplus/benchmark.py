"""DDXPlus as a ``Benchmark``: cases are simulated patients, the solver lets an agent question each one through
the core episode (``interaction.consult``), the scorer gives the seven per-patient metrics, and the summary is
the vectorised means over every planned patient beside the published reference rows.

Agents. ``agent`` is ``kb-bayes``, ``llm`` or an import path ``package.module:Class``, so a team evaluates its
own agent without editing medeval. Such a class is built as ``Class.build(kb=..., train=..., settings=...,
params=...)`` when it defines ``build`` (``train`` is the ``PatientSet`` of ``--train`` or None), else as
``Class(**params)``; the instance has ``name``, ``reads_kb`` (True is assumed when it does not say) and
``start(intake[, ctx])`` returning a session with ``next_question()``, ``observe(answer)`` and
``differential()`` (``interaction.DDXPlusAgent``); ``params()``, when present, is what the run stores as
``agent_params``. One instance serves every patient of a run, from several threads when ``concurrency > 1``: keep
per-patient state in the session.
"""

from __future__ import annotations

import pkgutil
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medeval_core.benchmark import (
    Benchmark,
    BenchmarkError,
    CaseContext,
    Metric,
    MetricGroup,
    MetricRole,
    ReferenceRow,
    RunActors,
    RunSummary,
    Score,
    Scorer,
    Solver,
)
from medeval_core.benchmarks.ddxplus import metrics as ddx_metrics
from medeval_core.benchmarks.ddxplus.interaction import DDXPlusAgent, DDXPlusOutput, consult, patient_metrics
from medeval_core.benchmarks.ddxplus.kb import (
    CONDITIONS_FILE,
    EVIDENCES_FILE,
    KnowledgeBase,
    KnowledgeBaseError,
    load_kb,
)
from medeval_core.benchmarks.ddxplus.metrics import METRIC_KEYS
from medeval_core.benchmarks.ddxplus.params import BUILT_IN_AGENTS, DDXPlusParams
from medeval_core.benchmarks.ddxplus.patients import DDXPlusPatient, PatientFileError, PatientSet, load_patients
from medeval_core.benchmarks.ddxplus.scoring import REFERENCE_ROWS, PredictionBuilder, metric_unit, score
from medeval_core.benchmarks.ddxplus.sources import default_kb_dir
from medeval_core.benchmarks.ddxplus.spec import SPEC
from medeval_core.interaction import with_max_turns
from medeval_core.metrics.stats import bootstrap_mean_ci
from medeval_core.records import CaseResult, CaseStatus, InputFile
from medeval_core.settings import Settings

SCORER = "ddxplus-metrics"
COMPLETED = "completed patients"
REFERENCE_SOURCE = ("Fansi Tchango et al., NeurIPS 2022, test set of 134,529 patients, as later work quotes it "
                    "(design.md §3.2)")

# The arXiv v2 preprint in the authors' repository gives other figures for some metrics (design.md §3.2).
PREPRINT_ROWS = {
    "AARLC (arXiv v2)": {"IL": 14.1, "GTPA@1": 61.74},
    "BASD (arXiv v2)": {"IL": 17.46, "GTPA@1": 68.23, "PER": 87.71},
}
PREPRINT_SOURCE = "arXiv v2 preprint in the authors' repository (mila-iqia/ddxplus)"

_ERRORS: tuple[type[Exception], ...] = (KnowledgeBaseError, PatientFileError)


def _build_errors() -> tuple[type[Exception], ...]:
    """The errors an agent's build reports as a ``BenchmarkError``: the inputs', and the chat backend's when an
    agent used one (the backends, which import the OpenAI client, are only loaded by agents that need them:
    a KB-Bayes run starts without them)."""
    chat = sys.modules.get("medeval_core.models.chat")
    return (*_ERRORS, chat.ChatBackendError) if chat is not None else _ERRORS


class _Cache:
    """A few loaded inputs per process (KB, patient sets, fitted agents), keyed by path and file state, so that
    building the params, the cases, the solver and the summary of one run loads and fits each once."""

    def __init__(self, size: int = 6) -> None:
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: Any, build: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = build()
        self.put(key, value)
        return value

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def _state(path: str | Path) -> tuple[str, int, int]:
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return str(path), -1, -1
    return str(path), stat.st_mtime_ns, stat.st_size


_kbs = _Cache()
_patient_sets = _Cache()
_agents = _Cache(size=4)


def kb_at(folder: str | Path) -> KnowledgeBase:
    folder = Path(folder)
    key = (_state(folder / EVIDENCES_FILE), _state(folder / CONDITIONS_FILE))
    try:
        return _kbs.get(key, lambda: load_kb(folder))
    except KnowledgeBaseError as exc:
        raise BenchmarkError(str(exc)) from None


def patients_at(path: str | Path, kb: KnowledgeBase, skip_bad_lines: bool = True) -> PatientSet:
    """The patients of ``path`` (read once per file state); a bad row refuses the file unless ``skip_bad_lines``."""
    try:
        patients = _patient_sets.get((_state(path), id(kb)), lambda: load_patients(path, kb))
        if not skip_bad_lines:
            patients.report.refuse_skipped(path)
        return patients
    except PatientFileError as exc:
        raise BenchmarkError(str(exc)) from None


def _load_object(target: str) -> Any:
    try:
        found = pkgutil.resolve_name(target)
    except (ImportError, AttributeError, ValueError) as exc:
        raise BenchmarkError(f"Cannot import the agent {target!r} ({exc}); give 'package.module:Class' of an "
                             "importable class.") from None
    return found


def build_agent(name: str, kb: KnowledgeBase, train: PatientSet | None, settings: Settings,
                params: Mapping[str, Any]) -> DDXPlusAgent:
    """The agent called ``name`` (built in, or an import path), fitted/configured with ``params``."""
    try:
        if name == "kb-bayes":
            from dataclasses import fields

            from medeval_core.benchmarks.ddxplus.kb_bayes import KBBayesAgent, KBBayesConfig

            known = {f.name for f in fields(KBBayesConfig)}
            return KBBayesAgent.fit(kb, train, KBBayesConfig(**{k: v for k, v in with_max_turns(params).items()
                                                           if k in known}))
        if name == "llm":
            from medeval_core.benchmarks.ddxplus.llm_agent import LLMAgent

            return LLMAgent.from_settings(kb, settings, params)
        if ":" in name:
            agent_class = _load_object(name)
            if hasattr(agent_class, "build"):
                agent = agent_class.build(kb=kb, train=train, settings=settings, params=dict(params))
            else:
                agent = agent_class(**params)
            if not callable(getattr(agent, "start", None)):
                raise BenchmarkError(f"The agent {name!r} has no start(intake) method; see the DDXPlus agent "
                                     "interface in medeval_core/benchmarks/ddxplus/benchmark.py.")
            return agent
    except Exception as exc:
        if isinstance(exc, BenchmarkError) or not isinstance(exc, (*_build_errors(), ValueError, TypeError)):
            raise
        raise BenchmarkError(str(exc)) from None
    raise BenchmarkError(f"Unknown DDXPlus agent {name!r}; choose one of {', '.join(BUILT_IN_AGENTS)} or give "
                         "an import path 'package.module:Class'.")


def agent_params_of(agent: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    describe = getattr(agent, "params", None)
    return dict(describe()) if callable(describe) else dict(given)


def build_params(settings: Settings, patients: str | Path, agent: str, train: str | Path | None = None,
                 kb: str | Path | None = None, limit: int | None = None,
                 agent_params: Mapping[str, Any] | None = None, concurrency: int | None = None,
                 repetitions: int | None = None) -> DDXPlusParams:
    """The params of a run, with absolute paths (``resume`` works from any folder) and the agent's full
    settings and KB condition as it reports them (the agent is built here, and reused by the run)."""
    if not Path(patients).is_file():
        raise BenchmarkError(f"{patients} does not exist; give the path of a DDXPlus patients CSV or release zip.")
    if train is not None and not Path(train).is_file():
        raise BenchmarkError(f"{train} does not exist; give the path of a DDXPlus training patients file.")
    kb_dir = Path(kb) if kb is not None else default_kb_dir(settings.data_dir)
    given = dict(agent_params or {})
    kb_path, train_path = str(kb_dir.resolve()), str(Path(train).resolve()) if train else None
    built = _agent_for(agent, kb_path, train_path, settings, given)
    described = agent_params_of(built, given)
    # The run asks for its agent by the params it stores (the agent's full settings): the same instance.
    _agents.put(_agent_key(agent, kb_path, train_path, settings, described), built)
    extra: dict[str, Any] = {key: value for key, value in (("concurrency", concurrency), ("repetitions", repetitions))
                             if value is not None}
    return DDXPlusParams(
        patients=str(Path(patients).resolve()), train=str(Path(train).resolve()) if train is not None else None,
        kb=kb_path, agent=agent, limit=limit, agent_params=described,
        reads_kb=bool(getattr(built, "reads_kb", True)), **extra,
    )


def _agent_for(name: str, kb_dir: str, train: str | None, settings: Settings,
               params: Mapping[str, Any]) -> DDXPlusAgent:
    kb = kb_at(kb_dir)
    train_set = patients_at(train, kb) if train else None
    return _agents.get(_agent_key(name, kb_dir, train, settings, params),
                       lambda: build_agent(name, kb, train_set, settings, params))


def _agent_key(name: str, kb_dir: str, train: str | None, settings: Settings, params: Mapping[str, Any]) -> Any:
    import json

    return (name, id(kb_at(kb_dir)), _state(train) if train else None,
            json.dumps(dict(params), sort_keys=True, default=str), settings.settings_hash())


class _ConsultSolver:
    def __init__(self, kb: KnowledgeBase, agent: DDXPlusAgent) -> None:
        self.kb = kb
        self.agent = agent

    def __call__(self, case: DDXPlusPatient, ctx: CaseContext) -> DDXPlusOutput:
        if not isinstance(case, DDXPlusPatient):
            raise TypeError(f"Expected a DDXPlus patient, got {type(case).__name__}.")
        return consult(self.agent, self.kb, case, ctx).output()


_PROVENANCE = {"scorer": SCORER, "semantics": "mila-iqia/ddxplus compute_metrics", "threshold": 0.01}


class MetricsScorer:
    """The seven per-patient metrics (design.md §3.2): those the consultation computed for this output, else
    recomputed from the stored output and the patient."""

    name = SCORER

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb

    def __call__(self, case: DDXPlusPatient, output: DDXPlusOutput, ctx: CaseContext) -> dict[str, Score]:
        metrics = output.consultation_metrics
        if metrics is None:
            metrics, _ = patient_metrics(self.kb, case, output.differential, output.inquired)
        # Validated (which copies the provenance): pydantic's validation in C costs half of ``model_construct``'s
        # Python for these seven scores per patient.
        return {key: Score(value=metrics[key], provenance=_PROVENANCE) for key in METRIC_KEYS}


METRIC_ROLES: dict[str, MetricRole] = {"GTPA@1": "accuracy", "IL": "turns"}


def _case_intervals(values: Mapping[str, np.ndarray], rows: np.ndarray) -> dict[str, tuple[float, float]]:
    """Each metric's percentile bootstrap 95 % interval over patients (a patient's repetitions averaged first:
    the patient is the independent unit)."""
    patient, inverse = np.unique(rows, return_inverse=True)
    repeats = np.bincount(inverse, minlength=len(patient))
    return {key: bootstrap_mean_ci(np.bincount(inverse, weights=values[key], minlength=len(patient)) / repeats)
            for key in METRIC_KEYS}


class DDXPlusBenchmark(Benchmark[DDXPlusParams, DDXPlusPatient, DDXPlusOutput]):
    name = "ddxplus"
    Params = DDXPlusParams
    Output = DDXPlusOutput
    score_run_scorers = (SCORER,)

    def comparison_key(self, params: DDXPlusParams, inputs: Mapping[str, InputFile]) -> dict[str, Any]:
        """Patient ids are row numbers of a patients file: two runs share cases only on the same file's contents
        (agents with other training patients or KB options still question the same patients)."""
        patients = inputs.get("patients")
        return {"patients sha256": patients.sha256 if patients else params.patients}

    def prepare_params(self, params: DDXPlusParams, settings: Settings) -> DDXPlusParams:
        """What ``build_params`` stores: absolute paths, the agent's full settings and its real KB condition."""
        built = build_params(settings, params.patients, params.agent, train=params.train, kb=params.kb,
                             limit=params.limit, agent_params=params.agent_params, concurrency=params.concurrency,
                             repetitions=params.repetitions)
        return built.model_copy(update={"case_ids": params.case_ids})

    # Inputs -------------------------------------------------------------------------------------------------

    def patient_set(self, params: DDXPlusParams) -> PatientSet:
        """The planned patients (the file's usable rows; those of ``case_ids`` in their order; the first ``limit``
        of them)."""
        patients = patients_at(params.patients, kb_at(params.kb), params.skip_bad_lines)
        if not len(patients):
            raise BenchmarkError(f"{params.patients} has no usable patient rows: {patients.report.summary()}")
        if params.case_ids is not None:
            patients = patients.subset(self._positions(patients, params.case_ids, params.patients))
        if params.limit is not None and params.limit < len(patients):
            patients = patients.subset(np.arange(params.limit))
        return patients

    @staticmethod
    def _positions(patients: PatientSet, case_ids: Sequence[str], source: str) -> list[int]:
        by_case = {f"row-{row}": position for row, position in patients.position.items()}
        unknown = [case_id for case_id in case_ids if case_id not in by_case]
        if unknown:
            raise BenchmarkError(f"{source} has no usable patient {', '.join(unknown[:5])}; case ids are row-N for "
                                 "the file's row N (see a run's per-case table).")
        if len(set(case_ids)) != len(case_ids):
            raise BenchmarkError("A case id is listed twice in case_ids; list each patient once.")
        return [by_case[case_id] for case_id in case_ids]

    def input_files(self, params: DDXPlusParams) -> dict[str, str]:
        files = {"patients": params.patients, "kb_evidences": str(Path(params.kb) / EVIDENCES_FILE),
                 "kb_conditions": str(Path(params.kb) / CONDITIONS_FILE)}
        if params.train:
            files["train"] = params.train
        return files

    def cases(self, params: DDXPlusParams, settings: Settings) -> Sequence[DDXPlusPatient]:
        return self.patient_set(params).case_list()

    def agent(self, params: DDXPlusParams, settings: Settings) -> DDXPlusAgent:
        return _agent_for(params.agent, params.kb, params.train, settings, params.agent_params)

    def solver(self, params: DDXPlusParams, settings: Settings,
               todo: Sequence[DDXPlusPatient]) -> Solver[DDXPlusPatient, DDXPlusOutput]:
        return _ConsultSolver(kb_at(params.kb), self.agent(params, settings))

    def scorers(self, params: DDXPlusParams, settings: Settings) -> Sequence[Scorer[DDXPlusPatient, DDXPlusOutput]]:
        return (MetricsScorer(kb_at(params.kb)),)

    def scorer(self, name: str, options: Mapping[str, Any],
               settings: Settings) -> Scorer[DDXPlusPatient, DDXPlusOutput]:
        if name != SCORER:
            raise BenchmarkError(f"The ddxplus benchmark has no scorer called {name!r}; it has {SCORER}.")
        kb_dir = options.get("kb") or default_kb_dir(settings.data_dir)
        return MetricsScorer(kb_at(kb_dir))

    # Summary ------------------------------------------------------------------------------------------------

    @staticmethod
    def _per_patient(patients: PatientSet, finished: Sequence[CaseResult]
                     ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Per-patient metric arrays of every finished consultation (each repetition scored on its own, then
        pooled), with each value's true pathology and patient row."""
        by_repetition: dict[int, list[CaseResult]] = {}
        for result in finished:
            by_repetition.setdefault(result.repetition, []).append(result)
        values: list[dict[str, np.ndarray]] = []
        pathology, rows = [], []
        for _repetition, mine in sorted(by_repetition.items()):
            positions = sorted(int(patients.position[int(result.output["index"])]) for result in mine)
            scored = patients
            if len(positions) != len(patients) or len(set(positions)) != len(patients):
                scored = patients.subset(np.asarray(positions, dtype=np.int64))
            builder = PredictionBuilder(scored)
            for result in mine:
                builder.add(scored.position[int(result.output["index"])], result.output["differential"].items(),
                            result.output["inquired"])
            values.append(score(scored, builder.build()).per_patient)
            pathology.append(np.asarray(scored.pathology))
            rows.append(np.asarray(scored.rows))
        if not values:
            return {key: np.zeros(0) for key in METRIC_KEYS}, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        pooled = {key: np.concatenate([part[key] for part in values]) for key in METRIC_KEYS}
        return pooled, np.concatenate(pathology), np.concatenate(rows)

    def actors(self, params: DDXPlusParams) -> RunActors:
        return RunActors(agent=params.agent)

    def summarize(self, params: DDXPlusParams, cases: Sequence[DDXPlusPatient],
                  results: Sequence[CaseResult]) -> RunSummary:
        """Metrics over the patients whose consultation finished; failed and unfinished ones are counted apart
        (design.md §3.2), never averaged in as an empty differential with IL 1."""
        patients = self.patient_set(params)
        finished = [result for result in results if result.status == CaseStatus.OK]
        counts = self.run_counts(params, cases, results)
        values, pathology, rows = self._per_patient(patients, finished)
        metrics = ddx_metrics.mean_metrics(values) if finished else {}
        intervals = _case_intervals(values, rows) if finished else {}
        headline = [Metric(name=key, value=metrics[key], interval=intervals.get(key), n=len(finished),
                           denominator=COMPLETED, method="mean of per-patient values; percentile bootstrap 95%",
                           unit=metric_unit(key), role=METRIC_ROLES.get(key))
                    for key in METRIC_KEYS if key in metrics]
        per_pathology = (ddx_metrics.breakdown(values, pathology, patients.kb.pathology_names)
                         if finished else {})
        groups = [MetricGroup(dimension="pathology", label=label,
                              metrics=[Metric(name=key, value=figures[key], n=int(figures["n"]),
                                              denominator=COMPLETED, unit=metric_unit(key)) for key in METRIC_KEYS])
                  for label, figures in per_pathology.items()]
        notes = [] if params.reads_kb else ["The agent did not read the KB's condition lists."]
        if patients.report.n_skipped:
            notes.append(patients.report.summary())
        if counts.failed:
            notes.append(f"{counts.failed} consultation(s) failed: they are counted apart, not in the metrics.")
        if not finished:
            notes.append("No consultation has finished yet: there are no metrics.")
        extras: dict[str, Any] = {
            "agent": params.agent,
            "reads_kb": params.reads_kb,
            "patients": len(patients),
            "finished": len(finished),
            "failed": counts.failed,
            "load_report": patients.report.summary(),
            "metrics": metrics,
            "per_pathology": per_pathology,
            "reference": REFERENCE_ROWS,
        }
        return RunSummary(
            benchmark=self.name, title=SPEC.title, counts=counts, headline=headline, groups=groups,
            reference=[ReferenceRow(label=label, source=REFERENCE_SOURCE, values=row)
                       for label, row in REFERENCE_ROWS.items()]
                      + [ReferenceRow(label=label, source=PREPRINT_SOURCE, values=row)
                         for label, row in PREPRINT_ROWS.items()],
            notes=notes, extras=extras,
        )
