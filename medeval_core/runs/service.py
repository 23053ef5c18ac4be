"""Launch, resume, score-run, summarise and export runs: the one entry point for the CLI and the pages.

A run's parameters are the benchmark's typed ``Params``, stored whole (concurrency included) with the effective
settings, their hash, the library versions and the sha256 of every input file. A ``run_id`` that names an
existing run continues *that run's stored configuration*: a launch whose parameters differ is refused, and so is
a resume after an input file changed, so two files' rows or two protocols never mix in one run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import numpy as np
from pydantic import BaseModel, TypeAdapter, ValidationError

from medeval_core import registry
from medeval_core.benchmark import (
    Benchmark,
    BenchmarkError,
    CaseContext,
    Metric,
    MetricSpread,
    ModelRoles,
    RepetitionSummary,
    RunSummary,
    Score,
    ScoreParams,
    Scorer,
    Solver,
)
from medeval_core.data.files import sha256_of
from medeval_core.memory import long_lived
from medeval_core.records import (
    Case,
    CaseOutcome,
    CaseResult,
    CaseStatus,
    InputFile,
    MetricSummary,
    RunConfig,
    RunKind,
    RunStatus,
    cases_keeping,
    utc_now,
)
from medeval_core.runs.runner import DEFAULT_LEASE_S, BatchRunner, ProgressCallback, RunReport
from medeval_core.settings import BackendChoice, Settings, runtime_versions, walkthrough_idle_limit
from medeval_core.store import RunRow, Store, StoreError

# Concurrency changes how fast a run goes, never what it computes: a resume may choose another number (runs
# stored before the rename call it "workers").
RUNTIME_ONLY_PARAMS = frozenset({"concurrency", "workers"})

T = TypeVar("T")


def file_fingerprint(path: str | Path) -> InputFile:
    """The sha256 and size of the file's bytes."""
    digest, size = sha256_of(path)
    return InputFile(path=str(path), sha256=digest, bytes=size)


def _fingerprints(files: Mapping[str, str]) -> dict[str, InputFile]:
    try:
        return {name: file_fingerprint(path) for name, path in files.items()}
    except OSError as exc:
        raise BenchmarkError(f"Cannot read the input file {exc.filename}: {exc.strerror}.") from None


def _fingerprints_while(files: Mapping[str, str], build: Callable[[], T],
                        check: Callable[[dict[str, InputFile]], None] | None = None) -> tuple[dict[str, InputFile], T]:
    """The files' fingerprints, hashed on a helper thread while ``build`` (loading the cases) runs here: hashlib
    lets go of the GIL on large blocks, so the hashing costs the loading nothing. What is stored and compared is
    still the sha256 of each file's bytes as read. ``check`` (a resume's: the inputs have not changed) is applied
    to them. A file that cannot be read, or that ``check`` refuses, fails so before any error of ``build`` (a
    rewritten file is reported as changed, not as whatever its new contents fail on)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fingerprints") as pool:
        hashing = pool.submit(_fingerprints, files)
        try:
            built = build()
        except BaseException:
            if check is not None:
                check(hashing.result())
            else:
                hashing.result()
            raise
        current = hashing.result()
    if check is not None:
        check(current)
    return current, built


def _check_inputs(config: RunConfig, current: Mapping[str, InputFile], run_id: str) -> None:
    for name, stored in config.inputs.items():
        now = current.get(name)
        if now is None or now.sha256 != stored.sha256:
            raise BenchmarkError(
                f"Run {run_id} was started on {stored.path} (sha256 {stored.sha256[:12]}), which "
                f"{'is gone' if now is None else 'has changed since'}: restore that file, or start a new run "
                "on the new contents."
            )


def new_run_config(benchmark: str, settings: Settings, params: BaseModel, label: str = "",
                   kind: RunKind = RunKind.BATCH, source_run_id: str | None = None,
                   inputs: Mapping[str, InputFile] | None = None) -> RunConfig:
    """A run config that records the effective settings, their hash and the library versions."""
    dumped = params.model_dump(mode="json")
    return RunConfig(
        benchmark=benchmark, label=label, params=dumped, settings=settings.effective(),
        settings_hash=settings.settings_hash(), versions=runtime_versions(),
        repetitions=int(dumped.get("repetitions", 1)), kind=kind, source_run_id=source_run_id,
        inputs=dict(inputs or {}),
    )


def _differences(stored: Mapping[str, Any], requested: Mapping[str, Any]) -> list[str]:
    keys = (set(stored) | set(requested)) - RUNTIME_ONLY_PARAMS
    return sorted(key for key in keys if json.dumps(stored.get(key), sort_keys=True, default=str)
                  != json.dumps(requested.get(key), sort_keys=True, default=str))


def _as_read_now(config: RunConfig) -> dict[str, Any]:
    """A stored run's params as its params model reads them today, so that a run stored under a field's older name
    (``workers``, ``max_questions``) is the same run as one asked under the new name; the stored dict when the model
    no longer reads it (the comparison then names what differs)."""
    try:
        read = ScoreParams.model_validate(config.params) if config.kind == RunKind.SCORE \
            else registry.benchmark(config.benchmark).parse_params(config.params)
        return read.model_dump(mode="json")
    except ValidationError:
        return dict(config.params)


def _stored_config(store: Store, run_id: str, benchmark: str, kind: RunKind, requested: Mapping[str, Any] | None,
                   source_run_id: str | None = None) -> RunConfig | None:
    """The stored config of ``run_id``, checked against what this launch asks for; None when no such run."""
    row = store.find_run(run_id)
    if row is None:
        return None
    config = RunConfig.model_validate(row.config)
    if config.benchmark != benchmark or config.kind != kind:
        raise BenchmarkError(f"Run {run_id!r} is a {config.benchmark} {config.kind} run; choose another id for "
                             f"this {benchmark} {kind} run.")
    if config.source_run_id != source_run_id:
        raise BenchmarkError(f"Run {run_id!r} scores run {config.source_run_id}, not {source_run_id}; choose "
                             "another id.")
    if requested is not None:
        stored = _as_read_now(config)
        changed = _differences(stored, requested)
        if changed:
            detail = "; ".join(f"{key}: stored {stored.get(key)!r}, asked {requested.get(key)!r}"
                               for key in changed[:4])
            raise BenchmarkError(
                f"Run {run_id!r} exists with other parameters ({detail}). Resume it as stored with "
                f"`python -m medeval_core resume {run_id}`, or choose another --run-id for the new parameters."
            )
    return config


def _case_function(solver: Solver[Any, Any], scorers: Sequence[Scorer[Any, Any]]) -> Any:
    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        output = solver(case, ctx)
        return _scored(case, output, ctx, scorers)

    return run_case


_SCORES_JSON = TypeAdapter(dict[str, Score])
"""A case's scores as JSON values in one call (seven scores dumped one by one cost twice as much)."""


def _scored(case: Case, output: BaseModel, ctx: CaseContext, scorers: Sequence[Scorer[Any, Any]]) -> CaseOutcome:
    scores: dict[str, Score] = {}
    named_by: dict[str, str] = {}
    for scorer in scorers:
        for name, score in scorer(case, output, ctx).items():
            if name in named_by:
                raise BenchmarkError(f"The scorers {named_by[name]!r} and {scorer.name!r} both name a metric "
                                     f"{name!r}; give one of them another name so neither score is lost.")
            named_by[name] = scorer.name
            scores[name] = score
    return CaseOutcome(
        output=output.model_dump(mode="json"),
        metrics={name: score.value for name, score in scores.items()},
        scores=_SCORES_JSON.dump_python(scores, mode="json"),
    )


def _typed_params(benchmark: Benchmark[Any, Any, Any], params: BaseModel | Mapping[str, Any]) -> BaseModel:
    raw = params.model_dump(mode="json") if isinstance(params, BaseModel) else dict(params)
    try:
        return benchmark.parse_params(raw)
    except ValidationError as exc:
        raise BenchmarkError(f"Invalid {benchmark.name} parameters: {exc}") from None


def _new_run(benchmark: Benchmark[Any, Any, Any], typed: BaseModel, settings: Settings, store: Store,
             run_id: str | None, label: str) -> tuple[str, Sequence[Case]]:
    """Hash the inputs while the cases load, and store the run as *pending* with its config and case count."""
    inputs, cases = _fingerprints_while(benchmark.input_files(typed), lambda: benchmark.cases(typed, settings))
    config = new_run_config(benchmark.name, settings, typed, label=label, inputs=inputs)
    row = store.create_run(config, run_id=run_id, expected_cases=len(cases) * config.repetitions)
    return row.id, cases


def create_run(benchmark_name: str, params: BaseModel | Mapping[str, Any], settings: Settings, store: Store,
               run_id: str | None = None, label: str = "") -> str:
    """Validate ``params`` with the benchmark's ``Params``, hash the input files, load the cases (so a bad input
    fails here, in the caller) and store the run as *pending*; no case runs. Returns the run id, which a worker
    (``python -m medeval_core worker RUN_ID``) then executes. An existing ``run_id`` with the same parameters is
    returned as is; with other parameters it is refused (``BenchmarkError``)."""
    benchmark = registry.benchmark(benchmark_name)
    typed = benchmark.prepare_params(_typed_params(benchmark, params), settings)
    if run_id and _stored_config(store, run_id, benchmark_name, RunKind.BATCH, typed.model_dump(mode="json")):
        return run_id
    return _new_run(benchmark, typed, settings, store, run_id, label)[0]


def launch(
    benchmark_name: str,
    params: BaseModel | Mapping[str, Any],
    settings: Settings,
    store: Store,
    run_id: str | None = None,
    label: str = "",
    concurrency: int | None = None,
    on_progress: ProgressCallback | None = None,
    freeze_inputs: bool = False,
) -> RunReport:
    """Start a batch run and execute it in this process, or continue ``run_id`` when it exists with the same
    parameters. ``freeze_inputs``: the process does this one run and exits (the command line), so the loaded
    inputs and cases are moved out of the garbage collector's reach (``memory.long_lived``)."""
    benchmark = registry.benchmark(benchmark_name)
    typed = _typed_params(benchmark, params)
    requested = typed.model_dump(mode="json")
    stored = _stored_config(store, run_id, benchmark_name, RunKind.BATCH, requested) if run_id else None
    if stored is not None:
        return _continue(benchmark, stored, run_id or "", settings, store, concurrency, on_progress, freeze_inputs)
    with long_lived(freeze_inputs):
        new_id, cases = _new_run(benchmark, typed, settings, store, run_id, label)
        runner, run_case, repetitions = _prepare(benchmark, typed, cases, new_id, settings, store, concurrency,
                                                 on_progress)
    return _execute(runner, new_id, cases, run_case, repetitions, settings, store)


def _continue(benchmark: Benchmark[Any, Any, Any], config: RunConfig, run_id: str, settings: Settings,
              store: Store, concurrency: int | None, on_progress: ProgressCallback | None,
              freeze_inputs: bool = False, lease_s: float | None = None) -> RunReport:
    typed = benchmark.parse_params(config.params)
    with long_lived(freeze_inputs):
        _, cases = _fingerprints_while(benchmark.input_files(typed), lambda: benchmark.cases(typed, settings),
                                       lambda current: _check_inputs(config, current, run_id))
        runner, run_case, repetitions = _prepare(benchmark, typed, cases, run_id, settings, store, concurrency,
                                                 on_progress, lease_s)
    return _execute(runner, run_id, cases, run_case, repetitions, settings, store)


def _prepare(benchmark: Benchmark[Any, Any, Any], params: BaseModel, cases: Sequence[Case], run_id: str,
             settings: Settings, store: Store, concurrency: int | None,
             on_progress: ProgressCallback | None, lease_s: float | None = None) -> tuple[BatchRunner, Any, int]:
    """The runner, the per-case function and the repetitions of a run (the solver sees the cases still to do);
    ``lease_s``: the runner's lease time, when not its default."""
    repetitions = int(getattr(params, "repetitions", 1))
    finished = store.finished_keys(run_id)
    todo = cases if not finished else cases_keeping(
        cases, lambda case_id: any((case_id, rep) not in finished for rep in range(repetitions)))
    solver = benchmark.solver(params, settings, todo)
    run_case = _case_function(solver, benchmark.scorers(params, settings))
    runner = BatchRunner(store, settings, concurrency=concurrency or int(getattr(params, "concurrency", 1)),
                         models=ModelRoles(benchmark.models(params, settings)), on_progress=on_progress,
                         lease_s=lease_s or DEFAULT_LEASE_S, claim_group=getattr(solver, "claim_group", None))
    return runner, run_case, repetitions


def _execute(runner: BatchRunner, run_id: str, cases: Sequence[Case], run_case: Any, repetitions: int,
             settings: Settings, store: Store) -> RunReport:
    return runner.execute(run_id, cases, run_case, repetitions,
                          final_summary=lambda status: closing_summary(store, run_id, settings, status)
                          .model_dump(mode="json"))


def score_run(
    source_run_id: str,
    params: ScoreParams,
    settings: Settings,
    store: Store,
    run_id: str | None = None,
    label: str = "",
    concurrency: int | None = None,
    on_progress: ProgressCallback | None = None,
) -> RunReport:
    """Apply a scorer to a stored run's outputs, as a run of its own that names its ``source_run_id``."""
    source, benchmark, source_params, cases, score_run_id = _score_run_of(source_run_id, params, settings, store,
                                                                          run_id, label)
    return _execute_score(benchmark, params, source_params, cases, source_run_id, score_run_id,
                          source.repetitions, settings, store, concurrency, on_progress)


def create_score_run(source_run_id: str, params: ScoreParams, settings: Settings, store: Store,
                     run_id: str | None = None, label: str = "") -> str:
    """Store a score run over ``source_run_id`` as *pending* (a worker then executes it); the scorer and its
    options are checked here. An existing ``run_id`` with the same parameters is returned as is."""
    return _score_run_of(source_run_id, params, settings, store, run_id, label)[4]


def _score_run_of(source_run_id: str, params: ScoreParams, settings: Settings, store: Store, run_id: str | None,
                  label: str) -> tuple[RunConfig, Benchmark[Any, Any, Any], BaseModel, Sequence[Case], str]:
    """The source's config, benchmark, params and cases, and the score run's id (stored now when new)."""
    source = RunConfig.model_validate(store.get_run(source_run_id).config)
    if source.kind == RunKind.SCORE:
        raise BenchmarkError(f"Run {source_run_id} is itself a score run; score the run it scored instead.")
    if source.kind == RunKind.SESSION:
        raise BenchmarkError(f"Run {source_run_id} is an interactive session; score a batch run.")
    benchmark = registry.benchmark(source.benchmark)
    source_params = benchmark.parse_params(source.params)
    benchmark.scorer(params.scorer, params.options, settings)  # an unknown scorer or bad options fail here
    requested = params.model_dump(mode="json")
    if run_id is not None and _stored_config(store, run_id, source.benchmark, RunKind.SCORE, requested,
                                             source_run_id) is not None:
        _check_inputs(source, _fingerprints(benchmark.input_files(source_params)), source_run_id)
        return source, benchmark, source_params, benchmark.cases(source_params, settings), run_id
    config = new_run_config(source.benchmark, settings, params, label=label, kind=RunKind.SCORE,
                            source_run_id=source_run_id, inputs=source.inputs)
    config = config.model_copy(update={"repetitions": source.repetitions})
    cases = benchmark.cases(source_params, settings)
    score_run_id = store.create_run(config, run_id=run_id, expected_cases=len(cases) * source.repetitions).id
    return source, benchmark, source_params, cases, score_run_id


def _execute_score(benchmark: Benchmark[Any, Any, Any], params: ScoreParams, source_params: BaseModel,
                   cases: Sequence[Case], source_run_id: str, run_id: str, repetitions: int, settings: Settings,
                   store: Store, concurrency: int | None, on_progress: ProgressCallback | None) -> RunReport:
    scorer = benchmark.scorer(params.scorer, params.options, settings)
    outputs = {(r.case_id, r.repetition): r.output for r in store.results(source_run_id, CaseStatus.OK)}

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        raw = outputs.get((case.case_id, ctx.repetition))
        if raw is None:
            raise LookupError(f"Run {source_run_id} has no finished output for {case.case_id}; resume that run "
                              "first, then this one.")
        return _scored(case, benchmark.parse_output(raw), ctx, [scorer])

    runner = BatchRunner(store, settings, concurrency=concurrency or params.concurrency,
                         models=ModelRoles(benchmark.models(source_params, settings)), on_progress=on_progress)
    return _execute(runner, run_id, cases, run_case, repetitions, settings, store)


def resume(run_id: str, settings: Settings, store: Store, concurrency: int | None = None,
           on_progress: ProgressCallback | None = None, freeze_inputs: bool = False,
           lease_s: float | None = None) -> RunReport:
    """Execute a stored run (pending, interrupted, cancelled or with failed cases) exactly as it was configured,
    as one more worker of it when others are already on it (its stored concurrency unless ``concurrency`` is given);
    ``freeze_inputs`` as for ``launch``; ``lease_s``: how long its case claims last without a heartbeat."""
    config = startable(store, run_id)
    settings = run_settings(settings, config)
    benchmark = registry.benchmark(config.benchmark)
    if config.kind == RunKind.SCORE:
        if config.source_run_id is None:
            raise BenchmarkError(f"Score run {run_id} does not name the run it scores.")
        return score_run(config.source_run_id, ScoreParams.model_validate(config.params), settings, store,
                         run_id=run_id, concurrency=concurrency, on_progress=on_progress)
    report = _continue(benchmark, config, run_id, settings, store, concurrency, on_progress, freeze_inputs, lease_s)
    if report.status == RunStatus.COMPLETED:
        run_score_stages(run_id, settings, store, concurrency, on_progress)
    return report


def run_score_stages(run_id: str, settings: Settings, store: Store, concurrency: int | None = None,
                     on_progress: ProgressCallback | None = None) -> list[RunReport]:
    """Execute the score runs stored as *pending* over ``run_id`` (the stages a launch planned after it, such as
    a judge over its responses): a launched run's worker does every stage of its plan."""
    return [score_run(run_id, ScoreParams.model_validate(row.config["params"]), settings, store, run_id=row.id,
                      concurrency=concurrency, on_progress=on_progress)
            for row in store.runs_scoring(run_id) if row.status == RunStatus.PENDING]


def record_worker_error(store: Store, run_id: str, exc: BaseException) -> None:
    """Keep why a worker stopped on the run (its ``error``), so the runs page says it; a run that does not exist
    has nowhere to keep it."""
    from medeval_core.errors import DatabaseUnavailable, StoreFullError
    from medeval_core.runs.runner import describe_error

    if isinstance(exc, (DatabaseUnavailable, StoreFullError)):
        return  # the database itself gave out: nothing can be kept there, and the CLI's one line says why
    if store.find_run(run_id) is not None and store.get_run(run_id).error is None:
        store.update_run(run_id, error=f"A worker stopped: {describe_error(exc)}")


def run_settings(settings: Settings, config: RunConfig) -> Settings:
    """``settings`` with the model roles the run was launched with (as stored in its config, the environment's
    overrides at launch included): a resume or a worker continues with the run's backends, whatever the
    defaults are now. Keys stay in the environment (a role names the variable, never the key)."""
    stored = config.settings.get("roles")
    if not stored:
        return settings
    return settings.model_copy(update={"roles": {name: BackendChoice.model_validate(choice)
                                                 for name, choice in stored.items()}})


def startable(store: Store, run_id: str) -> RunConfig:
    """The stored config of a run a worker can execute; what can be checked at once (the run exists, it is not a
    session, its benchmark is available) fails here, in the caller, with a readable message."""
    config = RunConfig.model_validate(store.get_run(run_id).config)
    if config.kind == RunKind.SESSION:
        raise BenchmarkError(f"Run {run_id} is an interactive session; continue it from its page.")
    registry.benchmark(config.benchmark)
    return config


def summarize_run(store: Store, run_id: str, settings: Settings) -> RunSummary:
    """The benchmark's summary of a run (a score run is summarised over its source's cases)."""
    config = RunConfig.model_validate(store.get_run(run_id).config)
    benchmark = registry.benchmark(config.benchmark)
    params_source = config
    if config.kind == RunKind.SCORE and config.source_run_id is not None:
        params_source = RunConfig.model_validate(store.get_run(config.source_run_id).config)
    params = benchmark.parse_params(params_source.params)
    cases, results = benchmark.cases(params, settings), store.results(run_id)
    summary = summarize_repetitions(benchmark, params, cases, results, benchmark.summarize(params, cases, results))
    actors = benchmark.actors(params)
    if config.kind == RunKind.SCORE:
        actors.judge = ScoreParams.model_validate(config.params).scorer
    return summary.model_copy(update=actors.model_dump())


def summarize_repetitions(benchmark: Benchmark[Any, Any, Any], params: BaseModel, cases: Sequence[Case],
                          results: Sequence[CaseResult], summary: RunSummary) -> RunSummary:
    """``summary`` with, for a run of several repetitions, each repetition's headline metrics (the benchmark's
    own summary of that repetition's results alone) and every headline metric's spread across them (mean,
    standard deviation, range), as protocols report runs over seeds."""
    repetitions = int(getattr(params, "repetitions", 1))
    if repetitions <= 1:
        return summary
    single = benchmark.parse_params({**params.model_dump(mode="json"), "repetitions": 1})
    per_repetition = []
    for repetition in range(repetitions):
        mine = [result for result in results if result.repetition == repetition]
        alone = benchmark.summarize(single, cases, mine)
        per_repetition.append(RepetitionSummary(repetition=repetition, counts=alone.counts,
                                                metrics=alone.headline if alone.counts.done else []))
    return summary.model_copy(update={"repetitions": per_repetition,
                                      "spread": metric_spreads(summary.headline, per_repetition)})


def metric_spreads(headline: Sequence[Metric], repetitions: Sequence[RepetitionSummary]) -> list[MetricSpread]:
    """Each headline metric's mean, sample standard deviation and range over the repetitions that report it."""
    spreads = []
    for metric in headline:
        values = np.array([found.value for repetition in repetitions
                           if (found := next((m for m in repetition.metrics if m.name == metric.name), None))
                           is not None and found.value is not None], dtype=float)
        if not values.size:
            continue
        spreads.append(MetricSpread(name=metric.name, unit=metric.unit, repetitions=int(values.size),
                                    mean=float(values.mean()),
                                    sd=float(values.std(ddof=1)) if values.size > 1 else None,
                                    low=float(values.min()), high=float(values.max())))
    return spreads


def closing_summary(store: Store, run_id: str, settings: Settings, status: RunStatus) -> RunSummary:
    """The summary a run is stored with when it ends with ``status``. No case finished: no metric at all (a row
    of zeros beside the published reference rows would read as a result). Cancelled: the metrics cover only the
    cases that finished, and say so."""
    summary = summarize_run(store, run_id, settings)
    if summary.counts.done:
        summary = summary.model_copy(update={"case_metrics": case_metric_summaries(store, run_id)})
    counts = summary.counts
    if counts.done == 0:
        return summary.model_copy(update={
            "headline": [], "groups": [],
            "notes": [f"No case finished ({counts.failed} failed, {counts.pending} pending): no metric is shown.",
                      *summary.notes]})
    if status == RunStatus.CANCELLED:
        return summary.model_copy(update={"notes": [
            f"Cancelled: the metrics cover only the {counts.done} of {counts.expected} cases that finished.",
            *summary.notes]})
    return summary


def stored_summary(store: Store, run_id: str) -> RunSummary | None:
    """The summary stored with the run at its last finish, or None (never finished, or stored by an older
    version in another shape)."""
    return parsed_summary(store.get_run(run_id).summary)


def parsed_summary(raw: Mapping[str, Any] | None) -> RunSummary | None:
    """A run row's stored summary as a ``RunSummary``; None when there is none or it has an older shape."""
    try:
        return RunSummary.model_validate(raw) if raw else None
    except ValidationError:
        return None


def summary_of(overview: RunOverview) -> RunSummary | None:
    return parsed_summary(overview.summary)


def export_results(store: Store, run_id: str, path: Path) -> Path:
    """Write a run's case results as CSV or JSON Lines, chosen by the file's suffix (``exports.write_results``:
    spreadsheet formulas neutralised, JSON cells)."""
    from medeval_core.results.exports import write_results

    results = store.results(run_id)
    try:
        return write_results(results, path)
    except ValueError as exc:
        raise StoreError(str(exc)) from None


RunLiveness = Literal["pending", "running", "cancelling", "interrupted", "completed", "cancelled", "failed",
                      "open", "finished", "abandoned", "closed"]
"""A batch or score run's state, or a session's own: *open*, *finished*, *abandoned* (open but idle longer than
``MEDEVAL_WALKTHROUGH_IDLE_HOURS``), *closed* by its owner, or *failed*. A session is never *running*."""


def session_state(status: str, last_activity: datetime, now: datetime | None = None,
                  idle_limit: timedelta | None = None) -> RunLiveness:
    if status == RunStatus.COMPLETED:
        return "finished"
    if status == RunStatus.FAILED:
        return "failed"
    if status in (RunStatus.CANCELLED, RunStatus.CANCELLING):
        return "closed"
    moment = last_activity if last_activity.tzinfo is not None else last_activity.replace(tzinfo=UTC)
    idle = (now or utc_now()) - moment
    return "abandoned" if idle > (idle_limit or walkthrough_idle_limit()) else "open"


def last_activity(store: Store, row: RunRow) -> datetime:
    """A session's last step (its newest turn), else when it was opened. A batch run's turns are not read: only a
    session's state depends on them, and the newest of a 134,529-case run's 1.6 million turns took ~0.7 s of
    every opening and switch of run on the Batch runs page."""
    steps = store.last_turn_times([row.id]) if row.kind == RunKind.SESSION else {}
    return steps.get(row.id) or row.started_at or row.created_at


def liveness(status: str, live_workers: int, kind: str = RunKind.BATCH,
             last_activity: datetime | None = None) -> RunLiveness:
    """A stored status with the workers' heartbeats taken into account: running or cancelling with no live
    worker is *interrupted* (its workers died; resume it), a pending run a worker took is *running*. A session
    has no worker (a page drives it): its own state (``session_state``) from its last step."""
    if kind == RunKind.SESSION:
        return session_state(status, last_activity or utc_now())
    if status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        return cast(RunLiveness, status) if live_workers else "interrupted"
    if status == RunStatus.PENDING and live_workers:
        return "running"
    return cast(RunLiveness, str(status))


class RunOverview(BaseModel):
    """One run as the runs page and ``runs show`` present it."""

    id: str
    benchmark: str
    kind: str
    source_run_id: str | None
    label: str
    status: str
    """As stored."""
    state: RunLiveness
    """As people should see it (``liveness``): *interrupted* when no worker of a running run is alive."""
    live_workers: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expected_cases: int | None
    done: int
    failed: int
    pending: int | None
    rate_per_s: float | None
    """Cases finished per second since the run (re)started, while it is running."""
    eta_s: float | None
    """Seconds until the pending cases are done at that rate, while it is running."""
    settings_hash: str
    versions: dict[str, Any]
    params: dict[str, Any]
    inputs: dict[str, Any]
    summary: dict[str, Any]
    error: str | None

    @property
    def active(self) -> bool:
        return self.state in ("running", "cancelling")

    @property
    def resumable(self) -> bool:
        """Not a session, no worker on it, and something left to do: a case not finished, or no summary yet (a
        run killed between its last case and its summary)."""
        return (self.kind != RunKind.SESSION and not self.active
                and (self.status != RunStatus.COMPLETED or self.failed > 0 or not self.summary))

    @property
    def cancellable(self) -> bool:
        return self.kind != RunKind.SESSION and self.state in ("running", "pending")


def _rate_and_eta(store: Store, row: Any, state: str, pending: int | None) -> tuple[float | None, float | None]:
    if state != "running" or row.started_at is None:
        return None, None
    started = row.started_at if row.started_at.tzinfo else row.started_at.replace(tzinfo=UTC)
    elapsed = (utc_now() - started).total_seconds()
    finished = store.finished_since(row.id, started)
    if elapsed <= 0 or not finished:
        return None, None
    rate = finished / elapsed
    return rate, (pending / rate if pending is not None else None)


def run_overview(store: Store, run_id: str) -> RunOverview:
    row = store.get_run(run_id)
    counts = store.result_counts(run_id)
    done, failed = counts.get(CaseStatus.OK, 0), counts.get(CaseStatus.FAILED, 0)
    live = len(store.live_workers(run_id))
    state = liveness(row.status, live, row.kind, last_activity(store, row))
    pending = None if row.expected_cases is None else max(row.expected_cases - done - failed, 0)
    rate, eta = _rate_and_eta(store, row, state, pending)
    return RunOverview(
        id=row.id, benchmark=row.benchmark, kind=row.kind, source_run_id=row.source_run_id, label=row.label,
        status=row.status, state=state, live_workers=live, created_at=row.created_at, started_at=row.started_at,
        finished_at=row.finished_at, expected_cases=row.expected_cases, done=done, failed=failed, pending=pending,
        rate_per_s=rate, eta_s=eta, settings_hash=row.settings_hash, versions=row.versions,
        params=row.config.get("params", {}), inputs=row.config.get("inputs", {}), summary=row.summary,
        error=row.error,
    )


class RunSnapshot(BaseModel):
    """Everything the runs page shows about one run, read in one call so it is drawn from one moment: the
    overview (state, counts, rate, ETA), the stored summary and the metric summaries over the finished cases."""

    overview: RunOverview
    summary: RunSummary | None
    metrics: list[MetricSummary]
    """Over the finished cases; empty when none finished (no metric over zero cases)."""


def case_metric_summaries(store: Store, run_id: str) -> list[MetricSummary]:
    """Every per-case metric of the run's finished results with its interval, computed from the results (what a
    run stores with its closing summary)."""
    from medeval_core.results.compare import summarize_metric_rows

    return summarize_metric_rows(store.metric_rows(run_id))


def metric_summaries(store: Store, run_id: str, overview: RunOverview | None = None,
                     summary: RunSummary | None = None) -> list[MetricSummary]:
    """The per-case metric summaries the pages show: a finished run's stored ones (read with its summary, no
    result read), else computed over the finished results so far (``compare.run_summaries``, cached per result
    stamp)."""
    from medeval_core.results.compare import run_summaries

    overview = overview or run_overview(store, run_id)
    if not overview.done:
        return []
    summary = summary if summary is not None else stored_summary(store, run_id)
    if not overview.active and overview.state != "pending" and summary is not None and summary.case_metrics:
        return [item.model_copy() for item in summary.case_metrics]
    return run_summaries(store, run_id)


def run_snapshot(store: Store, run_id: str) -> RunSnapshot:
    """The run's overview, stored summary and metric summaries together: a finished run's are read from its
    stored summary; a live run's are computed (cached per result stamp)."""
    overview = run_overview(store, run_id)
    summary = summary_of(overview)
    return RunSnapshot(overview=overview, summary=summary,
                       metrics=metric_summaries(store, run_id, overview, summary))
