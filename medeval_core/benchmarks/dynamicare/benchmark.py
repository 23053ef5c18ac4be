"""Open diagnosis as a ``Benchmark``: each record is one consultation (``interaction.consult``) of a doctor (LLM,
the DynamiCare team, replay) with a patient simulator (offline retrieval or LLM); the summary is Hit@5, Hit@10,
Rec@5, Rec@10 and Ave-Q over the completed cases."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from medeval_core.benchmark import (
    Benchmark,
    BenchmarkError,
    CaseContext,
    RunActors,
    RunSummary,
    Score,
    Scorer,
    model_names,
)
from medeval_core.benchmarks.dynamicare.cases import (
    PatientRecord,
    RecordFileError,
    RecordSet,
    load_agentclinic,
    load_records,
)
from medeval_core.benchmarks.dynamicare.doctors import (
    ActionFileError,
    Doctor,
    DoctorError,
    DynamiCareTeam,
    LLMDoctor,
    ReplayDoctor,
    ReplayLine,
    load_actions,
)
from medeval_core.benchmarks.dynamicare.interaction import DynamicareOutput, consult, verdict_of
from medeval_core.benchmarks.dynamicare.params import DynamicareParams
from medeval_core.benchmarks.dynamicare.patients import LLMRecordPatient, RecordRetrievalPatient
from medeval_core.benchmarks.dynamicare.scoring import (
    METRIC_NAMES,
    headline,
    mapped_truth_methods,
    mapped_truth_note,
)
from medeval_core.benchmarks.dynamicare.spec import SPEC
from medeval_core.dialogue import Patient
from medeval_core.models import for_role, require_served
from medeval_core.records import CaseResult
from medeval_core.settings import Settings
from medeval_core.vocabularies.icd9 import Icd9Mapper, make_mapper

SCORER = "hit-at-k"
COMPLETED = "completed cases"


def _backend_factory(role: str, settings: Settings, stored: Mapping[str, Any]) -> Callable[[], Any]:
    """``role``'s backend, built on first use (an older run's ``models`` named the one it started with)."""
    return lambda: for_role(role, settings, stored.get(role))


class DynamicareSolver:
    def __init__(self, params: DynamicareParams, actions: Mapping[str, ReplayLine] | None) -> None:
        self.params = params
        self.actions = actions

    def patient(self, record: PatientRecord, ctx: CaseContext) -> Patient:
        if self.params.patient == "llm":
            return LLMRecordPatient(record, ctx.model("patient"))
        return RecordRetrievalPatient(record, threshold=self.params.field_threshold,
                                      max_fields=self.params.max_fields)

    def doctor(self, record: PatientRecord, ctx: CaseContext) -> Doctor:
        if self.params.doctor == "llm":
            return LLMDoctor(ctx.model("doctor"))
        if self.params.doctor == "team":
            return DynamiCareTeam(ctx.model("doctor"), max_rounds=self.params.max_rounds)
        line = (self.actions or {}).get(record.case_id)
        if line is None:
            raise DoctorError(f"The actions file has no line for case {record.case_id}.")
        return ReplayDoctor(line)

    def mapper(self, ctx: CaseContext) -> Icd9Mapper:
        if self.params.mapper == "llm":
            return make_mapper("llm", ctx.model("coder"), ctx.record_model_call)
        return make_mapper("exact")

    def __call__(self, record: PatientRecord, ctx: CaseContext) -> DynamicareOutput:
        return consult(self.doctor(record, ctx), record, self.patient(record, ctx), self.mapper(ctx), ctx,
                       max_turns=self.params.max_turns)


class HitKScorer:
    """Hit@K / Rec@K recomputed from the stored mapped diagnoses and the record's truth."""

    name = SCORER

    def __call__(self, record: PatientRecord, output: DynamicareOutput, ctx: CaseContext) -> dict[str, Score]:
        metrics = verdict_of(record, output.diagnoses).metrics
        provenance = {"scorer": SCORER, "rule": "ICD-9 category: 3 characters, E-codes 4, V-codes 3"}
        scores = {name: Score(value=metrics[name], provenance=provenance) for name in METRIC_NAMES}
        scores["questions"] = Score(value=float(output.num_questions), provenance=provenance)
        return scores


class DynamicareBenchmark(Benchmark[DynamicareParams, PatientRecord, DynamicareOutput]):
    name = "dynamicare"
    Params = DynamicareParams
    Output = DynamicareOutput
    score_run_scorers = (SCORER,)

    def _load(self, params: DynamicareParams) -> RecordSet:
        try:
            if params.cases_format == "agentclinic":
                return load_agentclinic(Path(params.cases), make_mapper("exact"), limit=params.limit)
            return load_records(params.cases, limit=params.limit, skip_bad_lines=params.skip_bad_lines)
        except RecordFileError as exc:
            raise BenchmarkError(str(exc)) from None

    def _actions(self, params: DynamicareParams) -> dict[str, ReplayLine] | None:
        if params.doctor != "replay":
            return None
        if not params.actions:
            raise BenchmarkError("A replay doctor needs --actions FILE (JSON Lines of actions per case).")
        try:
            return load_actions(params.actions)
        except ActionFileError as exc:
            raise BenchmarkError(str(exc)) from None

    def cases(self, params: DynamicareParams, settings: Settings) -> Sequence[PatientRecord]:
        # The actions file is read here too, before any run is stored: a bad line refuses the command, not its cases.
        self._actions(params)
        return self._load(params).records

    def input_files(self, params: DynamicareParams) -> dict[str, str]:
        files = {"cases": params.cases}
        if params.actions:
            files["actions"] = params.actions
        return files

    def solver(self, params: DynamicareParams, settings: Settings,
               todo: Sequence[PatientRecord]) -> DynamicareSolver:
        if params.doctor == "person":
            raise BenchmarkError("The person doctor acts on the open-diagnosis walkthrough page; a batch run needs "
                                 "--doctor llm, team or replay.")
        return DynamicareSolver(params, self._actions(params))

    def scorers(self, params: DynamicareParams,
                settings: Settings) -> Sequence[Scorer[PatientRecord, DynamicareOutput]]:
        return (HitKScorer(),)

    def scorer(self, name: str, options: Mapping[str, Any],
               settings: Settings) -> Scorer[PatientRecord, DynamicareOutput]:
        if name != SCORER:
            raise BenchmarkError(f"The dynamicare benchmark has no scorer called {name!r}; it has {SCORER}.")
        return HitKScorer()

    def models(self, params: DynamicareParams, settings: Settings) -> dict[str, Callable[[], Any]]:
        roles = (["doctor"] if params.doctor in ("llm", "team") else []) + \
            (["patient"] if params.patient == "llm" else []) + (["coder"] if params.mapper == "llm" else [])
        return {role: _backend_factory(role, settings, params.models) for role in roles}

    def actors(self, params: DynamicareParams) -> RunActors:
        return RunActors(agent=params.doctor, models=model_names(params.models))

    def summarize(self, params: DynamicareParams, cases: Sequence[PatientRecord],
                  results: Sequence[CaseResult]) -> RunSummary:
        loaded = self._load(params)
        done = [result for result in results if result.ok]
        metrics = headline([result.output["metrics"] for result in done],
                           [int(result.output["num_questions"]) for result in done], COMPLETED)
        counts = self.run_counts(params, cases, results)
        unmapped = sorted({row["text"] for result in done for row in result.output["diagnoses"]
                           if row["code"] is None})
        notes = [loaded.summary()] if loaded.skipped else []
        truth_mapped = mapped_truth_methods([code.method for code in record.icd9] for record in loaded.records)
        if truth_mapped:
            notes.append(mapped_truth_note(truth_mapped, len(loaded.records)))
        if unmapped:
            notes.append(f"{len(unmapped)} predicted names mapped to no ICD-9 code: {', '.join(unmapped[:10])}.")
        return RunSummary(benchmark=self.name, title=SPEC.title, counts=counts, headline=metrics, notes=notes,
                          extras={"doctor": params.doctor, "patient": params.patient, "mapper": params.mapper,
                                  "metrics": {m.name: m.value for m in metrics}, "unmapped": unmapped,
                                  "truth_mapped": truth_mapped})


def build_params(settings: Settings, cases: str | Path, doctor: str, actions: str | Path | None = None,
                 **options: Any) -> DynamicareParams:
    if not Path(cases).is_file():
        raise BenchmarkError(f"{cases} does not exist; give a records JSON Lines file (`python -m medeval_core "
                             "import-agentclinic --out FILE` makes one).")
    if actions is not None and not Path(actions).is_file():
        raise BenchmarkError(f"{actions} does not exist; give the replay actions JSON Lines file.")
    given = {key: value for key, value in options.items() if value is not None}
    roles = (["doctor"] if doctor in ("llm", "team") else []) + \
        (["patient"] if given.get("patient") == "llm" else []) + (["coder"] if given.get("mapper") == "llm" else [])
    require_served(settings, roles, error=BenchmarkError)
    return DynamicareParams(cases=str(Path(cases).resolve()), doctor=doctor,  # type: ignore[arg-type]
                            actions=str(Path(actions).resolve()) if actions else None, **given)
