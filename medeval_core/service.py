"""Launch, resume, score-run, summarise and export runs: the one entry point for the CLI and the pages.

A run's parameters are the benchmark's typed ``Params``, stored whole (workers included) with the effective
settings, their hash, the library versions and the sha256 of every input file. A ``run_id`` that names an
existing run continues *that run's stored configuration*: a launch whose parameters differ is refused, and so is
a resume after an input file changed, so two files' rows or two protocols never mix in one run.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from medeval_core import registry
from medeval_core.benchmark import Benchmark, BenchmarkError, CaseContext, ModelRoles, RunSummary, Scorer, Solver
from medeval_core.memory import long_lived
from medeval_core.records import (
    Case,
    CaseOutcome,
    CaseResult,
    CaseStatus,
    InputFile,
    RunConfig,
    RunKind,
    RunStatus,
)
from medeval_core.runner import BatchRunner, ProgressCallback, RunReport
from medeval_core.settings import Settings, runtime_versions
from medeval_core.store import Store, StoreError

# Workers change how fast a run goes, never what it computes: a resume may choose another number.
RUNTIME_ONLY_PARAMS = frozenset({"workers"})

T = TypeVar("T")


class ScoreParams(BaseModel):
    """A score run's parameters: which scorer, its options, and how many cases are scored at once."""

    model_config = ConfigDict(extra="forbid")

    scorer: str
    options: dict[str, Any] = Field(default_factory=dict)
    workers: int = Field(default=1, ge=1, le=512)


def file_fingerprint(path: str | Path) -> InputFile:
    """The sha256 and size of the file's bytes. Read in large blocks into one buffer: hashing on a helper thread
    (``_fingerprints_while``) then takes the GIL back only a few times per file."""
    digest = hashlib.sha256()
    size = 0
    buffer = memoryview(bytearray(1 << 24))
    with open(path, "rb", buffering=0) as handle:
        while read := handle.readinto(buffer):
            digest.update(buffer[:read])
            size += read
    return InputFile(path=str(path), sha256=digest.hexdigest(), bytes=size)


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
        changed = _differences(config.params, requested)
        if changed:
            detail = "; ".join(f"{key}: stored {config.params.get(key)!r}, asked {requested.get(key)!r}"
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


def _scored(case: Case, output: BaseModel, ctx: CaseContext, scorers: Sequence[Scorer[Any, Any]]) -> CaseOutcome:
    scores = {}
    for scorer in scorers:
        scores.update(scorer(case, output, ctx))
    return CaseOutcome(
        output=output.model_dump(mode="json"),
        metrics={name: score.value for name, score in scores.items()},
        scores={name: score.model_dump(mode="json") for name, score in scores.items()},
    )


def launch(
    benchmark_name: str,
    params: BaseModel | Mapping[str, Any],
    settings: Settings,
    store: Store,
    run_id: str | None = None,
    label: str = "",
    workers: int | None = None,
    on_progress: ProgressCallback | None = None,
    freeze_inputs: bool = False,
) -> RunReport:
    """Start a batch run, or continue ``run_id`` when it exists with the same parameters. ``freeze_inputs``:
    the process does this one run and exits (the command line), so the loaded inputs and cases are moved out of
    the garbage collector's reach (``memory.long_lived``)."""
    benchmark = registry.benchmark(benchmark_name)
    raw = params.model_dump(mode="json") if isinstance(params, BaseModel) else dict(params)
    try:
        typed = benchmark.parse_params(raw)
    except ValidationError as exc:
        raise BenchmarkError(f"Invalid {benchmark_name} parameters: {exc}") from None
    requested = typed.model_dump(mode="json")
    stored = _stored_config(store, run_id, benchmark_name, RunKind.BATCH, requested) if run_id else None
    if stored is not None:
        return _continue(benchmark, stored, run_id or "", settings, store, workers, on_progress, freeze_inputs)
    with long_lived(freeze_inputs):
        inputs, cases = _fingerprints_while(benchmark.input_files(typed), lambda: benchmark.cases(typed, settings))
        config = new_run_config(benchmark_name, settings, typed, label=label, inputs=inputs)
        row = store.create_run(config, run_id=run_id, expected_cases=len(cases) * config.repetitions)
        runner, run_case, repetitions = _prepare(benchmark, typed, cases, row.id, settings, store, workers,
                                                 on_progress)
    return _execute(runner, row.id, cases, run_case, repetitions, settings, store)


def _continue(benchmark: Benchmark[Any, Any, Any], config: RunConfig, run_id: str, settings: Settings,
              store: Store, workers: int | None, on_progress: ProgressCallback | None,
              freeze_inputs: bool = False) -> RunReport:
    typed = benchmark.parse_params(config.params)
    with long_lived(freeze_inputs):
        _, cases = _fingerprints_while(benchmark.input_files(typed), lambda: benchmark.cases(typed, settings),
                                       lambda current: _check_inputs(config, current, run_id))
        runner, run_case, repetitions = _prepare(benchmark, typed, cases, run_id, settings, store, workers,
                                                 on_progress)
    return _execute(runner, run_id, cases, run_case, repetitions, settings, store)


def _prepare(benchmark: Benchmark[Any, Any, Any], params: BaseModel, cases: Sequence[Case], run_id: str,
             settings: Settings, store: Store, workers: int | None,
             on_progress: ProgressCallback | None) -> tuple[BatchRunner, Any, int]:
    """The runner, the per-case function and the repetitions of a run (the solver sees the cases still to do)."""
    repetitions = int(getattr(params, "repetitions", 1))
    finished = store.finished_keys(run_id)
    todo: Sequence[Case] = (list(cases) if not finished else
                            [case for case in cases
                             if any((case.case_id, rep) not in finished for rep in range(repetitions))])
    solver = benchmark.solver(params, settings, todo)
    run_case = _case_function(solver, benchmark.scorers(params, settings))
    runner = BatchRunner(store, settings, workers=workers or int(getattr(params, "workers", 1)),
                         models=ModelRoles(benchmark.models(params, settings)), on_progress=on_progress)
    return runner, run_case, repetitions


def _execute(runner: BatchRunner, run_id: str, cases: Sequence[Case], run_case: Any, repetitions: int,
             settings: Settings, store: Store) -> RunReport:
    report = runner.execute(run_id, cases, run_case, repetitions)
    refresh_summary(store, run_id, settings)
    return report


def score_run(
    source_run_id: str,
    params: ScoreParams,
    settings: Settings,
    store: Store,
    run_id: str | None = None,
    label: str = "",
    workers: int | None = None,
    on_progress: ProgressCallback | None = None,
) -> RunReport:
    """Apply a scorer to a stored run's outputs, as a run of its own that names its ``source_run_id``."""
    source = RunConfig.model_validate(store.get_run(source_run_id).config)
    if source.kind == RunKind.SCORE:
        raise BenchmarkError(f"Run {source_run_id} is itself a score run; score the run it scored instead.")
    benchmark = registry.benchmark(source.benchmark)
    source_params = benchmark.parse_params(source.params)
    benchmark.scorer(params.scorer, params.options, settings)  # an unknown scorer or bad options fail here
    requested = params.model_dump(mode="json")
    if run_id is not None and _stored_config(store, run_id, source.benchmark, RunKind.SCORE, requested,
                                             source_run_id) is not None:
        _check_inputs(source, _fingerprints(benchmark.input_files(source_params)), source_run_id)
        cases = benchmark.cases(source_params, settings)
        score_run_id = run_id
    else:
        config = new_run_config(source.benchmark, settings, params, label=label, kind=RunKind.SCORE,
                                source_run_id=source_run_id, inputs=source.inputs)
        config = config.model_copy(update={"repetitions": source.repetitions})
        cases = benchmark.cases(source_params, settings)
        score_run_id = store.create_run(config, run_id=run_id, expected_cases=len(cases) * source.repetitions).id
    return _execute_score(benchmark, params, source_params, cases, source_run_id, score_run_id,
                          source.repetitions, settings, store, workers, on_progress)


def _execute_score(benchmark: Benchmark[Any, Any, Any], params: ScoreParams, source_params: BaseModel,
                   cases: Sequence[Case], source_run_id: str, run_id: str, repetitions: int, settings: Settings,
                   store: Store, workers: int | None, on_progress: ProgressCallback | None) -> RunReport:
    scorer = benchmark.scorer(params.scorer, params.options, settings)
    outputs = {(r.case_id, r.repetition): r.output for r in store.results(source_run_id, CaseStatus.OK)}

    def run_case(case: Case, ctx: CaseContext) -> CaseOutcome:
        raw = outputs.get((case.case_id, ctx.repetition))
        if raw is None:
            raise LookupError(f"Run {source_run_id} has no finished output for {case.case_id}; resume that run "
                              "first, then this one.")
        return _scored(case, benchmark.parse_output(raw), ctx, [scorer])

    runner = BatchRunner(store, settings, workers=workers or params.workers,
                         models=ModelRoles(benchmark.models(source_params, settings)), on_progress=on_progress)
    return _execute(runner, run_id, cases, run_case, repetitions, settings, store)


def resume(run_id: str, settings: Settings, store: Store, workers: int | None = None,
           on_progress: ProgressCallback | None = None, freeze_inputs: bool = False) -> RunReport:
    """Continue a stored run exactly as it was configured (its stored workers unless ``workers`` is given);
    ``freeze_inputs`` as for ``launch``."""
    config = RunConfig.model_validate(store.get_run(run_id).config)
    if config.kind == RunKind.SESSION:
        raise BenchmarkError(f"Run {run_id} is an interactive session; continue it from its page.")
    benchmark = registry.benchmark(config.benchmark)
    if config.kind == RunKind.SCORE:
        if config.source_run_id is None:
            raise BenchmarkError(f"Score run {run_id} does not name the run it scores.")
        return score_run(config.source_run_id, ScoreParams.model_validate(config.params), settings, store,
                         run_id=run_id, workers=workers, on_progress=on_progress)
    return _continue(benchmark, config, run_id, settings, store, workers, on_progress, freeze_inputs)


def resume_in_background(run_id: str, settings: Settings, store: Store,
                         workers: int | None = None) -> threading.Thread:
    """Resume a run on a daemon thread (the app keeps serving); progress is read back from the store.

    What can be checked at once (the run exists, it is not a session, its benchmark is available) fails here,
    in the caller, with a readable message."""
    config = RunConfig.model_validate(store.get_run(run_id).config)
    if config.kind == RunKind.SESSION:
        raise BenchmarkError(f"Run {run_id} is an interactive session; continue it from its page.")
    registry.benchmark(config.benchmark)
    thread = threading.Thread(target=resume, args=(run_id, settings, store, workers), name=f"resume-{run_id}",
                              daemon=True)
    thread.start()
    return thread


def summarize_run(store: Store, run_id: str, settings: Settings) -> RunSummary:
    """The benchmark's summary of a run (a score run is summarised over its source's cases)."""
    config = RunConfig.model_validate(store.get_run(run_id).config)
    benchmark = registry.benchmark(config.benchmark)
    params_source = config
    if config.kind == RunKind.SCORE and config.source_run_id is not None:
        params_source = RunConfig.model_validate(store.get_run(config.source_run_id).config)
    params = benchmark.parse_params(params_source.params)
    return benchmark.summarize(params, benchmark.cases(params, settings), store.results(run_id))


def refresh_summary(store: Store, run_id: str, settings: Settings) -> RunSummary:
    summary = summarize_run(store, run_id, settings)
    store.update_run(run_id, summary=summary.model_dump(mode="json"))
    return summary


def stored_summary(store: Store, run_id: str) -> RunSummary | None:
    """The summary stored with the run at its last finish, or None (never finished, or stored by an older
    version in another shape)."""
    raw = store.get_run(run_id).summary
    try:
        return RunSummary.model_validate(raw) if raw else None
    except ValidationError:
        return None


def results_frame(results: list[CaseResult]) -> Any:
    """One row per case result, outputs and metrics flattened into columns."""
    import pandas as pd

    rows = [
        {
            "run_id": r.run_id, "case_id": r.case_id, "repetition": r.repetition, "status": r.status.value,
            "error": r.error, "started_at": r.started_at, "finished_at": r.finished_at,
            **{f"metric.{k}": v for k, v in r.metrics.items()},
            **{f"output.{k}": v for k, v in r.output.items()},
        }
        for r in results
    ]
    return pd.DataFrame(rows)


def export_results(store: Store, run_id: str, path: Path) -> Path:
    """Write a run's case results as CSV or JSON Lines, chosen by the file's suffix."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl"):
        raise StoreError(f"Cannot export to {path.name}: use a .csv or .jsonl file name.")
    frame = results_frame(store.results(run_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True, date_format="iso")
    return path


class RunOverview(BaseModel):
    """One run as the runs page and ``runs show`` present it."""

    id: str
    benchmark: str
    kind: str
    source_run_id: str | None
    label: str
    status: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expected_cases: int | None
    done: int
    failed: int
    pending: int | None
    settings_hash: str
    versions: dict[str, Any]
    params: dict[str, Any]
    inputs: dict[str, Any]
    summary: dict[str, Any]
    error: str | None

    @property
    def active(self) -> bool:
        return self.status in (RunStatus.RUNNING, RunStatus.CANCELLING)

    @property
    def resumable(self) -> bool:
        return (self.kind != RunKind.SESSION and not self.active
                and (self.status != RunStatus.COMPLETED or self.failed > 0))

    @property
    def cancellable(self) -> bool:
        return self.kind != RunKind.SESSION and self.status in (RunStatus.RUNNING, RunStatus.PENDING)


def run_overview(store: Store, run_id: str) -> RunOverview:
    row = store.get_run(run_id)
    counts = store.result_counts(run_id)
    done, failed = counts.get(CaseStatus.OK, 0), counts.get(CaseStatus.FAILED, 0)
    return RunOverview(
        id=row.id, benchmark=row.benchmark, kind=row.kind, source_run_id=row.source_run_id, label=row.label,
        status=row.status, created_at=row.created_at, started_at=row.started_at, finished_at=row.finished_at,
        expected_cases=row.expected_cases, done=done, failed=failed,
        pending=None if row.expected_cases is None else row.expected_cases - done - failed,
        settings_hash=row.settings_hash, versions=row.versions, params=row.config.get("params", {}),
        inputs=row.config.get("inputs", {}), summary=row.summary, error=row.error,
    )
