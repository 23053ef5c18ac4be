"""The four interfaces every benchmark implements (design.md §2, second version), and the run context.

A benchmark is generic over its parameter model ``P`` (pydantic, stored whole with the run), its case type ``C``
and its per-case output ``O`` (a pydantic model stored as the case result's output):

- ``Benchmark[P, C, O]``: ``cases(params, settings)``, ``solver(params, settings, todo)``,
  ``scorers(params, settings)``,
  ``summarize(params, cases, results)``; ``scorer(name, options, settings)`` for score runs over stored outputs.
- ``Solver[C, O]``: ``(case, ctx) -> output`` (one generation, or a whole episode).
- ``Scorer[C, O]``: ``name`` and ``(case, output, ctx) -> {metric name: Score}``.
- ``RunSummary``: counts, headline metrics with interval, n and the denominator named, groups, reference rows,
  extras.

Case code never opens the store: it records what happened through the ``CaseContext`` it is handed, and the
runner (or a session) persists those records with the case result.
"""

from __future__ import annotations

import hashlib
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from medeval_core.errors import BenchmarkError
from medeval_core.records import Case, CaseResult, InputFile, Judgement, MetricSummary, ModelCall, Turn
from medeval_core.settings import Settings

P = TypeVar("P", bound=BaseModel)
C = TypeVar("C", bound=Case)
O = TypeVar("O", bound=BaseModel)  # noqa: E741 - the conventional name of a solver's output type
C_contra = TypeVar("C_contra", bound=Case, contravariant=True)
O_co = TypeVar("O_co", bound=BaseModel, covariant=True)
O_contra = TypeVar("O_contra", bound=BaseModel, contravariant=True)


class Score(BaseModel):
    """One named score of one case, with where it came from (judge, model, prompt version, or rule)."""

    model_config = ConfigDict(frozen=True)

    value: float | bool | None
    explanation: str | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)


CONCURRENCY = AliasChoices("concurrency", "workers")
"""How a run's ``concurrency`` is read: runs stored before it was renamed call it ``workers``."""


class RunParams(BaseModel):
    """Fields every benchmark's ``Params`` has: how many cases run at once, and how often each one runs."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    concurrency: int = Field(default=1, ge=1, le=512, validation_alias=CONCURRENCY, description="cases run at once")
    repetitions: int = Field(default=1, ge=1, le=100, description="times each case is run")


class ScoreParams(BaseModel):
    """A score run's parameters: which scorer, its options, and how many cases are scored at once."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    scorer: str
    options: dict[str, Any] = Field(default_factory=dict)
    concurrency: int = Field(default=1, ge=1, le=512, validation_alias=CONCURRENCY)


class LineFileParams(RunParams):
    """A benchmark whose cases come from a file read line by line: a bad line refuses the file unless asked."""

    skip_bad_lines: bool = Field(default=False, description="run the good lines of an input file and record the "
                                                            "bad ones with the run, instead of refusing the file")


class CaseContext(ABC):
    """What a solver or scorer gets with each case: which run, which repetition, settings, models by role, and
    where to record dialogue turns, judge attempts and model calls."""

    run_id: str
    case_id: str
    repetition: int
    settings: Settings

    @abstractmethod
    def record_turn(self, actor: str, action: str, payload: Mapping[str, Any] | None = None,
                    cost: float = 0.0) -> Turn: ...

    @abstractmethod
    def record_judgement(self, judgement: Judgement) -> None: ...

    @abstractmethod
    def record_model_call(self, call: ModelCall) -> None: ...

    @abstractmethod
    def model(self, role: str) -> Any:
        """The backend bound to ``role`` for this run (``vlm``, ``judge``, ``chat``, ...)."""


class Solver(Protocol[C_contra, O_co]):
    """Solves one case. A solver that computes cases in groups (a generation batch) may also have
    ``claim_group(case_id) -> int | None`` (a group being consecutive cases of the run, as a generation batch is):
    workers sharing a run then claim whole groups (``runner.BatchRunner``)."""

    def __call__(self, case: C_contra, ctx: CaseContext, /) -> O_co: ...


class Scorer(Protocol[C_contra, O_contra]):
    @property
    def name(self) -> str: ...

    def __call__(self, case: C_contra, output: O_contra, ctx: CaseContext, /) -> dict[str, Score]: ...


MetricUnit = Literal["proportion", "percent", "count", "number"]
MetricRole = Literal["accuracy", "cost", "turns"]
"""What a headline metric measures, for plots that read across benchmarks (accuracy against cost, turns) whatever
each benchmark names its metrics."""


class Metric(BaseModel):
    """A headline figure: its value, 95 % interval, n, which denominator n is, and its unit (a proportion in
    [0, 1] is shown as a percentage; ``percent`` is already on 0-100, for protocols that report their metrics so)."""

    name: str
    value: float | None
    interval: tuple[float, float] | None = None
    n: int
    denominator: str
    method: str = ""
    unit: MetricUnit = "proportion"
    role: MetricRole | None = None

    def format(self, value: float | None) -> str:
        """``value`` (the metric's or an interval bound) as the CLI and the pages show it."""
        return format_value(value, self.unit)

    def formatted_interval(self) -> str:
        return f"{self.format(self.interval[0])} - {self.format(self.interval[1])}" if self.interval else ""


def format_value(value: float | None, unit: MetricUnit) -> str:
    if value is None:
        return "n/a"
    if unit == "proportion":
        return f"{100 * value:.2f}%"
    if unit == "count":
        return f"{value:.0f}"
    return f"{value:.2f}"


class MetricGroup(BaseModel):
    """The headline metrics within one subgroup (a skin-tone band, a pathology, a split)."""

    dimension: str
    label: str
    metrics: list[Metric]


class ReferenceRow(BaseModel):
    """A published figure to read a run against, with its source."""

    label: str
    source: str
    values: dict[str, float]


class RunCounts(BaseModel):
    expected: int
    done: int
    failed: int
    pending: int

    @classmethod
    def of(cls, expected: int, results: Sequence[CaseResult]) -> RunCounts:
        done = sum(r.ok for r in results)
        failed = len(results) - done
        return cls(expected=expected, done=done, failed=failed, pending=max(expected - done - failed, 0))


class MetricSpread(BaseModel):
    """One headline metric across a run's repetitions, as protocols report runs over seeds: the
    mean of the per-repetition values, their sample standard deviation (None for one repetition) and range."""

    name: str
    unit: MetricUnit = "proportion"
    repetitions: int
    mean: float
    sd: float | None
    low: float
    high: float

    def formatted(self) -> str:
        sd = f" ± {format_value(self.sd, self.unit)}" if self.sd is not None else ""
        return (f"{format_value(self.mean, self.unit)}{sd} (range {format_value(self.low, self.unit)} - "
                f"{format_value(self.high, self.unit)}, {self.repetitions} repetitions)")


class RepetitionSummary(BaseModel):
    """The headline metrics of one repetition alone."""

    repetition: int
    counts: RunCounts
    metrics: list[Metric]


class RunActors(BaseModel):
    """Who a run puts to work, named by its benchmark from the run's params: the agent that solves the cases, the
    model of each role it calls, and the judge (or scorer) that scores them; empty where the run has none."""

    agent: str = ""
    models: dict[str, str] = Field(default_factory=dict)
    """Role -> model name (``{"chat": "qwen2.5-7b-instruct"}``)."""
    judge: str = ""


def model_names(models: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Role -> model name of the backends a run stored by role (``{"chat": {"base_url": ..., "model": ...}}``)."""
    return {role: str(choice.get("model") or "") for role, choice in models.items()}


class RunSummary(RunActors):
    """Every benchmark's run summary; the runs page and the CLI printer render any of them the same way. Its
    ``agent``, ``models`` and ``judge`` are the benchmark's ``actors`` of the run's params."""

    benchmark: str
    title: str = ""
    counts: RunCounts
    headline: list[Metric] = Field(default_factory=list)
    groups: list[MetricGroup] = Field(default_factory=list)
    reference: list[ReferenceRow] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    extras: dict[str, Any] = Field(default_factory=dict)
    repetitions: list[RepetitionSummary] = Field(default_factory=list)
    """Per repetition, when the run has more than one (``summarize_repetitions``)."""
    spread: list[MetricSpread] = Field(default_factory=list)
    """Each headline metric's spread across the repetitions."""
    case_metrics: list[MetricSummary] = Field(default_factory=list)
    """Every per-case metric over the finished cases with its interval (``compare``), stored with a finished run
    so that pages read it instead of every result."""

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.headline if m.name == name), None)

    def with_role(self, role: MetricRole) -> Metric | None:
        """The first headline metric that declares ``role`` (plots read roles, not names)."""
        return next((m for m in self.headline if m.role == role), None)


def score_metrics(results: Sequence[CaseResult]) -> list[Metric]:
    """Each score of the finished results as a headline metric: a proportion with its Wilson interval, any other
    number as its mean with a percentile bootstrap interval (``compare.summarize_metrics``; a case's repetitions
    are averaged first)."""
    from medeval_core.results.compare import summarize_metrics  # numpy and scipy: not at the CLI's start

    return [Metric(name=summary.metric, value=summary.value, interval=(summary.ci_low, summary.ci_high),
                   n=summary.n, denominator="finished cases", method=summary.interval,
                   unit="proportion" if summary.kind == "proportion" else "number")
            for summary in summarize_metrics(results)]


class ScoredCase(BaseModel, Generic[O]):
    """A stored case result with its output parsed back into the benchmark's output type."""

    result: CaseResult
    output: O | None


class Benchmark(ABC, Generic[P, C, O]):
    """One benchmark. Subclasses set ``name``, ``Params`` and ``Output`` and implement the four methods."""

    name: ClassVar[str]
    Params: type[P]
    Output: type[O]
    score_run_scorers: ClassVar[tuple[str, ...]] = ()
    """The scorers a score run over one of its stored runs can apply (``scorer(name, ...)``): what the New run
    page offers beside the command line's ``rescore``."""

    @abstractmethod
    def cases(self, params: P, settings: Settings) -> Sequence[C]: ...

    @abstractmethod
    def solver(self, params: P, settings: Settings, todo: Sequence[C]) -> Solver[C, O]:
        """The solver for this run; ``todo`` lists the cases still to run in order (a batching solver groups
        them in fixed batches, so batch composition never depends on thread timing)."""

    def scorers(self, params: P, settings: Settings) -> Sequence[Scorer[C, O]]:
        """Scorers applied in the same pass as the solver (score runs apply others later)."""
        return ()

    def scorer(self, name: str, options: Mapping[str, Any], settings: Settings) -> Scorer[C, O]:
        """A named scorer for a score run over a stored run's outputs."""
        raise BenchmarkError(f"The {self.name} benchmark has no scorer called {name!r}.")

    def score_stages(self, params: P, settings: Settings) -> list[ScoreParams]:
        """Score runs that complete a run of these params once its cases are done (e.g. a judge over its
        responses); none by default. A launched run does them in its worker, as a benchmark's own ``run`` may."""
        return []

    def summarize(self, params: P, cases: Sequence[C], results: Sequence[CaseResult]) -> RunSummary:
        """The run's counts and each score over its finished cases (``score_metrics``); a benchmark overrides it
        to add what its protocol reports, starting from ``run_counts``."""
        return RunSummary(benchmark=self.name, counts=self.run_counts(params, cases, results),
                          headline=score_metrics(results))

    def run_counts(self, params: P, cases: Sequence[C], results: Sequence[CaseResult]) -> RunCounts:
        """Expected (every case once per repetition), done, failed and pending results."""
        return RunCounts.of(len(cases) * int(getattr(params, "repetitions", 1)), results)

    def actors(self, params: P) -> RunActors:
        """The run's agent, models by role and judge, named from its params (the runs page lists them); a score
        run's judge is its scorer. None by default."""
        return RunActors()

    def input_files(self, params: P) -> dict[str, str]:
        """Input files (name -> path) whose sha256 is stored with the run; a resume refuses when one changed."""
        return {}

    def models(self, params: P, settings: Settings) -> dict[str, Callable[[], Any]]:
        """Role -> a factory for the backend the run uses for it (built lazily, on first ``ctx.model(role)``), each
        one a ``models.for_role`` call so that every role follows the same precedence and errors."""
        return {}

    def parse_params(self, raw: Mapping[str, Any]) -> P:
        return self.Params.model_validate(raw)

    def comparison_key(self, params: P, inputs: Mapping[str, InputFile]) -> dict[str, Any]:
        """What must be equal for two runs' case ids to name the same cases of the same dataset and task (runs are
        only compared, case by case, when it is). By default the input files' contents (their sha256)."""
        return {f"{name} sha256": item.sha256 for name, item in sorted(inputs.items())}

    def form_defaults(self, settings: Settings, variant: str | None = None) -> dict[str, Any]:
        """Field -> the value the launch form starts with where the ``Params`` field has no default of its own
        (values that come from the settings, such as the protocol's generation settings); none by default."""
        return {}

    def prepare_params(self, params: P, settings: Settings) -> P:
        """The params a new run stores, completed from what a form or caller gave (absolute paths, the full
        settings of what they name), so a run made by ``service.create_run`` stores what the command line
        stores; as given by default."""
        return params

    def parse_output(self, raw: Mapping[str, Any]) -> O:
        return self.Output.model_validate(raw)


class ModelRoles:
    """The models a run binds to its roles, each built on first use and shared by every case of the run (building
    a backend can mean loading a checkpoint; a finished run resumed or summarised never loads one)."""

    def __init__(self, factories: Mapping[str, Callable[[], Any]] | None = None) -> None:
        self._factories = dict(factories or {})
        self._built: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, role: str) -> Any:
        with self._lock:
            if role not in self._built:
                if role not in self._factories:
                    known = ", ".join(sorted(self._factories)) or "none"
                    raise KeyError(f"This run binds no model to the role {role!r} (roles: {known}).")
                self._built[role] = self._factories[role]()
            return self._built[role]

    def built(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._built)


class RecordingContext(CaseContext):
    """A context that keeps what a case records in memory: the batch runner writes it with the case result; an
    offline trial of an agent just reads it."""

    def __init__(self, run_id: str, case_id: str, repetition: int, settings: Settings, models: ModelRoles) -> None:
        self.run_id = run_id
        self.case_id = case_id
        self.repetition = repetition
        self.settings = settings
        self._models = models
        self.turns: list[Turn] = []
        self.judgements: list[Judgement] = []
        self.model_calls: list[ModelCall] = []

    def record_turn(self, actor: str, action: str, payload: Mapping[str, Any] | None = None,
                    cost: float = 0.0) -> Turn:
        turn = Turn(run_id=self.run_id, case_id=self.case_id, repetition=self.repetition, index=len(self.turns),
                    actor=actor, action=action, payload=dict(payload or {}), cost=cost)
        self.turns.append(turn)
        return turn

    def record_judgement(self, judgement: Judgement) -> None:
        self.judgements.append(judgement.model_copy(
            update={"run_id": self.run_id, "case_id": self.case_id, "repetition": self.repetition}))

    def record_model_call(self, call: ModelCall) -> None:
        self.model_calls.append(call.model_copy(
            update={"run_id": self.run_id, "case_id": self.case_id, "repetition": self.repetition}))

    def model(self, role: str) -> Any:
        return self._models.get(role)


def messages_sha256(messages: Any) -> str:
    """The hash recorded with a model call: the exact messages sent, canonical JSON (images as their data)."""
    canonical = json.dumps(messages, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
