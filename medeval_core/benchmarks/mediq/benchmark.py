"""MEDIQ as a ``Benchmark``: each case is one consultation (``interaction.consult``) of an expert (LLM or replay)
with a patient system (offline fact-select or LLM); the summary is accuracy, Ave-Q, the timeout rate and the
accuracy without asking (``scoring.headline``)."""

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
from medeval_core.benchmarks.mediq.cases import MediqCase, MediqFileError, load_cases
from medeval_core.benchmarks.mediq.experts import (
    ActionFileError,
    Expert,
    ExpertError,
    LLMExpert,
    ReplayExpert,
    ReplayLine,
    load_actions,
)
from medeval_core.benchmarks.mediq.interaction import MediqOutput, consult
from medeval_core.benchmarks.mediq.params import MediqParams
from medeval_core.benchmarks.mediq.patients import FactSelectPatient, LLMPatient
from medeval_core.benchmarks.mediq.scoring import CaseScore, headline
from medeval_core.benchmarks.mediq.spec import SPEC
from medeval_core.dialogue import Patient
from medeval_core.models import for_role, require_served
from medeval_core.records import CaseResult
from medeval_core.settings import Settings

SCORER = "mediq-accuracy"
COMPLETED = "completed cases"


class MediqSolver:
    def __init__(self, params: MediqParams, actions: Mapping[str, ReplayLine] | None) -> None:
        self.params = params
        self.actions = actions

    def patient(self, case: MediqCase, ctx: CaseContext) -> Patient:
        if self.params.patient == "llm":
            return LLMPatient(case, ctx.model("patient"), withhold_answer_facts=self.params.withhold_answer_facts)
        return FactSelectPatient(case, threshold=self.params.fact_threshold, max_facts=self.params.max_facts,
                                 withhold_answer_facts=self.params.withhold_answer_facts)

    def expert(self, case: MediqCase, ctx: CaseContext) -> Expert:
        if self.params.expert == "llm":
            return LLMExpert(ctx.model("expert"), abstention=self.params.abstention, threshold=self.params.threshold)
        line = (self.actions or {}).get(case.case_id)
        if line is None:
            raise ExpertError(f"The actions file has no line for case {case.case_id}.")
        return ReplayExpert(line)

    def __call__(self, case: MediqCase, ctx: CaseContext) -> MediqOutput:
        expert, patient = self.expert(case, ctx), self.patient(case, ctx)
        if isinstance(expert, ReplayExpert) and isinstance(patient, FactSelectPatient):
            patient.prepare(expert.questions())
        return consult(expert, case, patient, ctx,
                       max_turns=self.params.max_turns, baseline=self.params.baseline)


class AccuracyScorer:
    name = SCORER

    def __call__(self, case: MediqCase, output: MediqOutput, ctx: CaseContext) -> dict[str, Score]:
        provenance = {"scorer": SCORER, "on": "answer_idx"}
        scores = {
            "correct": Score(value=output.choice == case.answer_idx, provenance=provenance),
            "questions": Score(value=float(output.num_questions), provenance=provenance),
            "timed_out": Score(value=output.timed_out, provenance=provenance),
        }
        if output.initial_choice is not None:
            scores["correct_without_asking"] = Score(value=output.initial_choice == case.answer_idx,
                                                     provenance=provenance)
        return scores


class MediqBenchmark(Benchmark[MediqParams, MediqCase, MediqOutput]):
    name = "mediq"
    Params = MediqParams
    Output = MediqOutput
    score_run_scorers = (SCORER,)

    def _load(self, params: MediqParams) -> Any:
        try:
            return load_cases(params.cases, limit=params.limit, skip_bad_lines=params.skip_bad_lines)
        except MediqFileError as exc:
            raise BenchmarkError(str(exc)) from None

    def _actions(self, params: MediqParams) -> dict[str, ReplayLine] | None:
        if params.expert != "replay":
            return None
        if not params.actions:
            raise BenchmarkError("A replay expert needs --actions FILE (JSON Lines of actions per case).")
        try:
            return load_actions(params.actions)
        except ActionFileError as exc:
            raise BenchmarkError(str(exc)) from None

    def cases(self, params: MediqParams, settings: Settings) -> Sequence[MediqCase]:
        # The actions file is read here too, before any run is stored: a bad line refuses the command, not its cases.
        self._actions(params)
        return self._load(params).cases

    def input_files(self, params: MediqParams) -> dict[str, str]:
        files = {"cases": params.cases}
        if params.actions:
            files["actions"] = params.actions
        return files

    def solver(self, params: MediqParams, settings: Settings, todo: Sequence[MediqCase]) -> MediqSolver:
        if params.expert == "person":
            raise BenchmarkError("The person expert acts on the MEDIQ walkthrough page; a batch run needs --expert "
                                 "llm or replay.")
        return MediqSolver(params, self._actions(params))

    def scorers(self, params: MediqParams, settings: Settings) -> Sequence[Scorer[MediqCase, MediqOutput]]:
        return (AccuracyScorer(),)

    def scorer(self, name: str, options: Mapping[str, Any], settings: Settings) -> Scorer[MediqCase, MediqOutput]:
        if name != SCORER:
            raise BenchmarkError(f"The mediq benchmark has no scorer called {name!r}; it has {SCORER}.")
        return AccuracyScorer()

    def models(self, params: MediqParams, settings: Settings) -> dict[str, Callable[[], Any]]:
        factories: dict[str, Callable[[], Any]] = {}
        if params.expert == "llm":
            factories["expert"] = lambda: for_role("expert", settings, params.models.get("expert"))
        if params.patient == "llm":
            factories["patient"] = lambda: for_role("patient", settings, params.models.get("patient"))
        return factories

    def actors(self, params: MediqParams) -> RunActors:
        return RunActors(agent=params.expert, models=model_names(params.models))

    def summarize(self, params: MediqParams, cases: Sequence[MediqCase],
                  results: Sequence[CaseResult]) -> RunSummary:
        loaded = self._load(params)
        scores = [CaseScore(case_id=r.case_id, correct=bool(r.output["correct"]),
                            num_questions=int(r.output["num_questions"]), timed_out=bool(r.output["timed_out"]),
                            initial_correct=r.output.get("initial_correct"))
                  for r in results if r.ok]
        metrics = headline(scores, COMPLETED)
        notes = []
        if loaded.skipped:
            notes.append(loaded.summary())
        mismatched = [case.case_id for case in loaded.cases if case.answer_mismatch]
        if mismatched:
            notes.append(f"Cases {', '.join(mismatched)} have an answer text that differs from options[answer_idx]; "
                         "they are scored on answer_idx.")
        counts = self.run_counts(params, cases, results)
        return RunSummary(benchmark=self.name, title=SPEC.title, counts=counts, headline=metrics, notes=notes,
                          extras={"expert": params.expert, "patient": params.patient,
                                  "withhold_answer_facts": params.withhold_answer_facts,
                                  "max_turns": params.max_turns, "cases_file": Path(params.cases).name,
                                  "metrics": {m.name: m.value for m in metrics}})


def build_params(settings: Settings, cases: str | Path, expert: str, actions: str | Path | None = None,
                 **options: Any) -> MediqParams:
    """The params of a run with absolute paths; the LLM roles it talks to must be served (the run keeps their
    backends in its stored settings, which a resume reads back)."""
    if not Path(cases).is_file():
        raise BenchmarkError(f"{cases} does not exist; give a MEDIQ JSON Lines file "
                             "(e.g. MEDEVAL_DATA_DIR/mediq/imedqa_sample200.jsonl).")
    if actions is not None and not Path(actions).is_file():
        raise BenchmarkError(f"{actions} does not exist; give the replay actions JSON Lines file.")
    given = {key: value for key, value in options.items() if value is not None}
    require_served(settings, (["expert"] if expert == "llm" else []) +
                   (["patient"] if given.get("patient") == "llm" else []), error=BenchmarkError)
    return MediqParams(cases=str(Path(cases).resolve()), expert=expert,  # type: ignore[arg-type]
                       actions=str(Path(actions).resolve()) if actions else None, **given)
