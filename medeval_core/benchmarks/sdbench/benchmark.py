"""SDBench as a ``Benchmark``: each case is an episode of the core ``interaction.Episode`` between an agent and the
gatekeeper (``gatekeeper.CaseEnvironment``), every exchange a turn; the judge and the cost are scorers, so that a
stored run is re-judged or re-costed (``recost``) as a score run without replaying it.

The summary follows SDBench's reporting: accuracy (score >= 4) with a Wilson interval and the mean score per judge
(each judge under its own name), mean cost per case with a bootstrap interval, mean visits, questions and tests,
and the share of REAL answers; errored and incomplete cases are counted apart and kept out of accuracy. It holds
figures only: no diagnosis and no finding of any case.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from medeval_core.benchmark import (
    Benchmark,
    BenchmarkError,
    CaseContext,
    LineFileParams,
    Metric,
    MetricGroup,
    MetricRole,
    ReferenceRow,
    RunActors,
    RunSummary,
    Score,
    Scorer,
    Solver,
    model_names,
)
from medeval_core.benchmarks.sdbench import (
    AGENT_ROLE,
    GATEKEEPER_ROLE,
    JUDGE_ROLE,
    PRICING_ROLE,
)
from medeval_core.benchmarks.sdbench.agents import (
    ActionsFileError,
    Agent,
    IncompleteEpisode,
    LLMAgent,
    ReplayAgent,
    load_actions,
)
from medeval_core.benchmarks.sdbench.cases import CaseFileError, SDBenchCase, load_any
from medeval_core.benchmarks.sdbench.catalog import CatalogError, load_catalog
from medeval_core.benchmarks.sdbench.costing import (
    Pricer,
    PriceTableError,
    StorePriceCache,
    chat_estimator,
    load_prices,
    priced_turns,
)
from medeval_core.benchmarks.sdbench.gatekeeper import (
    CaseEnvironment,
    Gatekeeper,
    Interpretation,
    LLMGatekeeper,
    OfflineGatekeeper,
    Reply,
    agent_view,
)
from medeval_core.benchmarks.sdbench.judge import (
    LLM_JUDGE,
    METRIC_PREFIX,
    OFFLINE_JUDGE,
    JudgeFailure,
    LLMJudge,
    OfflineJudge,
    judgement,
)
from medeval_core.benchmarks.sdbench.spec import SPEC
from medeval_core.interaction import Episode, Limits
from medeval_core.models import for_role, is_served
from medeval_core.prompts import load_prompt
from medeval_core.records import CaseResult
from medeval_core.settings import Settings

COST_SCORER = "sdbench-cost"
JUDGE_SCORERS = {"llm": LLM_JUDGE, "offline": OFFLINE_JUDGE}
GATEKEEPER_ACTOR = "gatekeeper"
REFERENCE_SOURCE = ("Nori et al., Sequential Diagnosis with Language Models (arXiv 2506.22405), NEJM CPC cases; "
                    "hospital list prices, not comparable in dollars with this table's Medicare prices")
REFERENCE_ROWS = {
    "Physicians": {"accuracy %": 19.9, "mean cost $": 2963},
    "GPT-4o": {"accuracy %": 49.3, "mean cost $": 2745},
    "o3": {"accuracy %": 78.6, "mean cost $": 7850},
    "MAI-DxO (budgeted)": {"accuracy %": 79.9, "mean cost $": 2396},
    "MAI-DxO (ensemble)": {"accuracy %": 85.5, "mean cost $": 7184},
}


class SDBenchParams(LineFileParams):
    cases: str = Field(description="SDBench case file, or an AgentClinic file converted on load (absolute path)")
    agent: Literal["llm", "replay", "person"] = Field(description="llm (the tag baseline) or replay (--actions)")
    actions: str | None = Field(default=None, description="JSON Lines of actions to replay (--agent replay)")
    gatekeeper: Literal["llm", "offline"] = "offline"
    interpretation: Interpretation = Field(
        default="withhold", description="withhold (the paper's rule) or keep the interpretive clauses of real "
                                        "results that name the case's diagnosis")
    judge: Literal["llm", "offline"] = "offline"
    prices: str = Field(default="", description="price table CSV of code and price (absolute path); empty: the "
                                                "shipped Medicare prices, MEDEVAL_DATA_DIR/costing/cms_prices.csv")
    split: str | None = Field(default=None, description="only the cases of this split")
    limit: int | None = Field(default=None, ge=1, description="only the first N selected cases")
    case_ids: list[str] | None = Field(default=None, description="only these case ids, in this order")
    max_turns: int | None = Field(default=None, ge=1, description="question and test turns before the diagnosis")
    max_cost: float | None = Field(default=None, ge=0, description="budget in dollars before the diagnosis")
    model_args: dict[str, Any] = Field(default_factory=dict, description="merged into each agent request")
    models: dict[str, dict[str, Any]] = Field(
        default_factory=dict, json_schema_extra={"in_form": False},
        description="older runs only: the backend of each role they used (a run now keeps them once, in its "
                    "stored settings)")


class TurnRecord(BaseModel):
    kind: Literal["questions", "tests", "diagnosis"]
    items: list[dict[str, Any]] = Field(default_factory=list)
    """Each request with its source (REAL, SYNTHETIC, REFUSED) and what it matched; never the answer text."""
    cost: float = 0.0


class SDBenchOutput(BaseModel):
    split: str
    diagnosis: str | None
    incomplete: bool = False
    incomplete_reason: str | None = None
    turns: list[TurnRecord] = Field(default_factory=list)
    questions: int = 0
    tests: int = 0
    visits: int = 0
    sources: dict[str, int] = Field(default_factory=dict)
    withheld: int = 0
    """Interpretive clauses naming the diagnosis withheld from the gatekeeper's answers."""
    cost: float = 0.0
    agent: str = ""
    gatekeeper: str = ""


def observation_payload(observation: Any) -> dict[str, Any]:
    if isinstance(observation, Reply):
        return agent_view(observation)
    return {"case_summary": str(observation)}


def open_episode(environment: CaseEnvironment, ctx: CaseContext, limits: Limits) -> Episode[Any, Any]:
    """The core episode over one case; turn 0 is the summary the agent starts from."""
    return Episode(environment, ctx, limits, start_actor=GATEKEEPER_ACTOR, observation_payload=observation_payload)


def output_of(environment: CaseEnvironment, agent: str, incomplete_reason: str | None = None) -> SDBenchOutput:
    turns: list[TurnRecord] = []
    sources = {"REAL": 0, "SYNTHETIC": 0, "REFUSED": 0}
    for action, reply in environment.history:
        items = [{"request": a.request, "source": a.source, "matched": a.matched} for a in reply.answers]
        for answer in reply.answers:
            sources[answer.source] += 1
        cost = sum(p.price for p in reply.prices) + (300.0 if reply.visit_charged else 0.0)
        turns.append(TurnRecord(kind=action.kind, items=items, cost=cost))
    if environment.diagnosis is not None:
        turns.append(TurnRecord(kind="diagnosis"))
    return SDBenchOutput(
        split=environment.case.split, diagnosis=environment.diagnosis,
        incomplete=environment.diagnosis is None, incomplete_reason=incomplete_reason, turns=turns,
        questions=sum(len(t.items) for t in turns if t.kind == "questions"),
        tests=sum(len(t.items) for t in turns if t.kind == "tests"),
        visits=sum(1 for _, reply in environment.history if reply.visit_charged), sources=sources,
        withheld=sum(len(a.withheld) for _, reply in environment.history for a in reply.answers),
        cost=round(sum(t.cost for t in turns), 2), agent=agent, gatekeeper=environment.gatekeeper.name,
    )


def play(agent: Agent, episode: Episode[Any, Any], limits: Limits) -> None:
    """Let ``agent`` act until it commits; at the turn cap or once the budget is spent only a diagnosis is taken."""
    observation = episode.first_observation
    while not episode.done:
        spent = limits.max_cost is not None and episode.cost >= limits.max_cost
        step = episode.act(agent.act(observation, must_commit=episode.turns_left <= 0 or spent), actor=agent.name)
        observation = step.observation


class Resources:
    """What one run (or session page) shares across its cases: cases, catalogue, pricer, actions, judges."""

    def __init__(self, params: SDBenchParams, settings: Settings) -> None:
        self.params = params
        self.settings = settings
        try:
            self.all_cases = load_any(params.cases, params.skip_bad_lines).cases
            self.catalog = load_catalog(settings.prompts_dir)
            self.prices = load_prices(params.prices)
            self.actions = load_actions(params.actions) if params.actions else None
        except (CaseFileError, CatalogError, PriceTableError, ActionsFileError) as exc:
            raise BenchmarkError(str(exc)) from None
        self._pricer: Pricer | None = None

    def selected(self) -> list[SDBenchCase]:
        params = self.params
        cases = [case for case in self.all_cases if params.split is None or case.split == params.split]
        if params.case_ids:
            by_id = {case.case_id: case for case in cases}
            unknown = [case_id for case_id in params.case_ids if case_id not in by_id]
            if unknown:
                raise BenchmarkError(f"{params.cases} has no case {', '.join(map(repr, unknown[:5]))}"
                                     f"{' in split ' + repr(params.split) if params.split else ''}; check --case-ids.")
            cases = [by_id[case_id] for case_id in params.case_ids]
        if params.limit is not None:
            cases = cases[: params.limit]
        if not cases:
            raise BenchmarkError(f"No case of {params.cases} is selected (split {params.split!r}); check --split.")
        return cases

    def pricer(self, estimator_backend: Callable[[], Any] | None = None) -> Pricer:
        if self._pricer is None:
            from medeval_core.store import open_store

            estimator = None
            model = "offline"
            if estimator_backend is not None:
                backend = estimator_backend()
                estimator = chat_estimator(backend, load_prompt("sdbench_price_estimate", self.settings.prompts_dir))
                model = str(getattr(backend, "model", "llm"))
            self._pricer = Pricer(self.catalog, self.prices, StorePriceCache(open_store(self.settings.db_url)),
                                  estimator=estimator, estimator_model=model)
        return self._pricer


def uses_pricing_model(params: SDBenchParams, settings: Settings) -> bool:
    """Whether tests missing from the price table are priced by the pricing role's model: when a model serves
    that role (older runs named it in their ``models``)."""
    return PRICING_ROLE in params.models or is_served(settings.role(PRICING_ROLE))


def build_gatekeeper(kind: str, case: SDBenchCase, res: Resources, ctx: CaseContext) -> Gatekeeper:
    if kind == "llm":
        return LLMGatekeeper(case, ctx.model(GATEKEEPER_ROLE),
                             load_prompt("sdbench_gatekeeper_system", res.settings.prompts_dir),
                             on_call=ctx.record_model_call, interpretation=res.params.interpretation)
    return OfflineGatekeeper(case, res.catalog, interpretation=res.params.interpretation)


class EpisodeSolver:
    def __init__(self, res: Resources) -> None:
        self.res = res

    def agent(self, case: SDBenchCase, ctx: CaseContext) -> Agent:
        params = self.res.params
        if params.agent == "replay":
            actions = (self.res.actions or {}).get(case.case_id)
            if actions is None:
                raise ActionsFileError(f"{params.actions} has no actions for case {case.case_id}.")
            return ReplayAgent(actions)
        if params.agent == "llm":
            return LLMAgent(ctx.model(AGENT_ROLE), load_prompt("sdbench_agent_system", self.res.settings.prompts_dir),
                            on_call=ctx.record_model_call)
        raise BenchmarkError("A person plays SDBench cases on the walkthrough page, not in a batch run.")

    def __call__(self, case: SDBenchCase, ctx: CaseContext) -> SDBenchOutput:
        params = self.res.params
        pricing = (lambda: ctx.model(PRICING_ROLE)) if uses_pricing_model(params, self.res.settings) else None
        environment = CaseEnvironment(case, build_gatekeeper(params.gatekeeper, case, self.res, ctx),
                                      self.res.pricer(pricing))
        limits = Limits(max_turns=params.max_turns, max_cost=params.max_cost)
        episode = open_episode(environment, ctx, limits)
        agent = self.agent(case, ctx)
        try:
            play(agent, episode, limits)
        except IncompleteEpisode as exc:
            return output_of(environment, agent.name, incomplete_reason=str(exc))
        return output_of(environment, agent.name)


class JudgeScorer:
    """The run's judge as a scorer: ``<prefix>_score`` (1-5) and ``<prefix>_correct`` (score >= 4)."""

    def __init__(self, judge: LLMJudge | OfflineJudge) -> None:
        self.judge = judge
        self.name = judge.name
        self.prefix = METRIC_PREFIX[judge.name]

    def __call__(self, case: SDBenchCase, output: SDBenchOutput, ctx: CaseContext) -> dict[str, Score]:
        provenance = {"judge": self.judge.name, "model": self.judge.model}
        if output.diagnosis is None:
            reason = "No diagnosis was committed (incomplete case)."
            return {f"{self.prefix}_score": Score(value=None, explanation=reason, provenance=provenance),
                    f"{self.prefix}_correct": Score(value=None, explanation=reason, provenance=provenance)}
        if isinstance(self.judge, LLMJudge):
            grade = self.judge.grade(case.final_diagnosis, output.diagnosis, on_call=ctx.record_model_call,
                                     on_attempt=ctx.record_judgement)
        else:
            grade = self.judge.grade(case.final_diagnosis, output.diagnosis)
            ctx.record_judgement(judgement(self.judge.name, self.judge.model, grade))
        return {f"{self.prefix}_score": Score(value=grade.score, explanation=grade.reasoning, provenance=provenance),
                f"{self.prefix}_correct": Score(value=grade.correct, explanation=grade.reasoning,
                                                provenance=provenance)}


class CostScorer:
    """The case's cost from its stored turns: visits at $300 plus every performed test, priced by code or
    flagged as estimated."""

    name = COST_SCORER

    def __init__(self, pricer: Pricer) -> None:
        self.pricer = pricer

    def __call__(self, case: SDBenchCase, output: SDBenchOutput, ctx: CaseContext) -> dict[str, Score]:
        breakdown = self.pricer.cost(priced_turns([turn.model_dump() for turn in output.turns]))
        provenance = self.pricer.describe()
        estimated = [t.name for t in breakdown.tests if t.estimated]
        detail = "; ".join(f"{t.name}: ${t.price:.2f} ({', '.join(t.codes) or t.method}"
                           f"{', estimated' if t.estimated else ''})" for t in breakdown.tests)
        summary = breakdown.summary()
        return {
            "cost": Score(value=round(breakdown.total, 2), explanation=detail or "no tests", provenance=provenance),
            "visits": Score(value=breakdown.visits, provenance=provenance),
            "test_cost": Score(value=round(breakdown.test_cost, 2), provenance=provenance),
            "tests_priced_by_code": Score(value=summary["tests_priced_by_code"], provenance=provenance),
            "tests_estimated": Score(value=summary["tests_estimated"], explanation=", ".join(estimated) or None,
                                     provenance=provenance),
        }


class SDBenchBenchmark(Benchmark[SDBenchParams, SDBenchCase, SDBenchOutput]):
    name = "sdbench"
    Params = SDBenchParams
    Output = SDBenchOutput
    score_run_scorers = (COST_SCORER, *JUDGE_SCORERS.values())

    def __init__(self) -> None:
        self._resources: dict[str, Resources] = {}

    def resources(self, params: SDBenchParams, settings: Settings) -> Resources:
        key = params.model_dump_json() + settings.settings_hash()
        if key not in self._resources:
            if len(self._resources) >= 8:  # the page's listing and its sessions alternate; keep a few
                self._resources.pop(next(iter(self._resources)))
            self._resources[key] = Resources(params, settings)
        return self._resources[key]

    def prepare_params(self, params: SDBenchParams, settings: Settings) -> SDBenchParams:
        """A run stores the price table it used: left empty (as the CLI allows), the shipped one."""
        if params.prices:
            return params
        return params.model_copy(update={"prices": str(default_prices(settings).resolve())})

    def form_defaults(self, settings: Settings, variant: str | None = None) -> dict[str, Any]:
        """The form suggests the shipped price table when the data directory has it."""
        try:
            return {"prices": str(default_prices(settings).resolve())}
        except BenchmarkError:
            return {}

    def input_files(self, params: SDBenchParams) -> dict[str, str]:
        files = {"cases": params.cases, "prices": params.prices}
        if params.actions:
            files["actions"] = params.actions
        return files

    def cases(self, params: SDBenchParams, settings: Settings) -> Sequence[SDBenchCase]:
        return self.resources(params, settings).selected()

    def models(self, params: SDBenchParams, settings: Settings) -> dict[str, Callable[[], Any]]:
        factories: dict[str, Callable[[], Any]] = {}
        if params.agent == "llm":
            factories[AGENT_ROLE] = lambda: for_role(AGENT_ROLE, settings, request_options=dict(params.model_args))
        if params.gatekeeper == "llm":
            factories[GATEKEEPER_ROLE] = lambda: for_role(GATEKEEPER_ROLE, settings)
        if params.judge == "llm":
            factories[JUDGE_ROLE] = lambda: for_role(JUDGE_ROLE, settings)
        if uses_pricing_model(params, settings):
            factories[PRICING_ROLE] = lambda: for_role(PRICING_ROLE, settings)
        return factories

    def solver(self, params: SDBenchParams, settings: Settings,
               todo: Sequence[SDBenchCase]) -> Solver[SDBenchCase, SDBenchOutput]:
        return EpisodeSolver(self.resources(params, settings))

    def judge(self, kind: str, settings: Settings) -> LLMJudge | OfflineJudge:
        if kind == "llm":
            return LLMJudge.from_backend(for_role(JUDGE_ROLE, settings), settings.prompts_dir)
        try:
            return OfflineJudge.from_file(settings.prompts_dir)
        except JudgeFailure as exc:
            raise BenchmarkError(str(exc)) from None

    def scorers(self, params: SDBenchParams,
                settings: Settings) -> Sequence[Scorer[SDBenchCase, SDBenchOutput]]:
        res = self.resources(params, settings)
        pricing = (lambda: for_role(PRICING_ROLE, settings)) if uses_pricing_model(params, settings) else None
        return (JudgeScorer(self.judge(params.judge, settings)), CostScorer(res.pricer(pricing)))

    def scorer(self, name: str, options: Mapping[str, Any],
               settings: Settings) -> Scorer[SDBenchCase, SDBenchOutput]:
        if name == COST_SCORER:
            from medeval_core.benchmarks.sdbench.sources import cms_prices_path

            prices = options.get("prices") or str(cms_prices_path(settings.data_dir))
            try:
                table = load_prices(prices)
                catalog = load_catalog(settings.prompts_dir)
            except (PriceTableError, CatalogError) as exc:
                raise BenchmarkError(str(exc)) from None
            from medeval_core.store import open_store

            return CostScorer(Pricer(catalog, table, StorePriceCache(open_store(settings.db_url))))
        for kind, judge_name in JUDGE_SCORERS.items():
            if name == judge_name:
                return JudgeScorer(self.judge(kind, settings))
        known = ", ".join([COST_SCORER, *JUDGE_SCORERS.values()])
        raise BenchmarkError(f"The sdbench benchmark has no scorer called {name!r}; it has {known}.")

    def actors(self, params: SDBenchParams) -> RunActors:
        return RunActors(agent=params.agent, models=model_names(params.models), judge=params.judge)

    def summarize(self, params: SDBenchParams, cases: Sequence[SDBenchCase],
                  results: Sequence[CaseResult]) -> RunSummary:
        from medeval_core.metrics.stats import wilson_interval

        counts = self.run_counts(params, cases, results)
        finished = [r for r in results if r.ok]
        incomplete = [r for r in finished if r.output.get("incomplete")]
        complete = [r for r in finished if not r.output.get("incomplete")]
        headline: list[Metric] = []
        judged_note = "judged cases (errored and incomplete left out)"
        for judge_name, prefix in METRIC_PREFIX.items():
            scored = [r for r in complete if r.metrics.get(f"{prefix}_score") is not None]
            if not scored:
                continue
            right = sum(bool(r.metrics[f"{prefix}_correct"]) for r in scored)
            headline.append(Metric(name=f"accuracy ({judge_name})", value=right / len(scored),
                                   interval=wilson_interval(right, len(scored)), n=len(scored),
                                   denominator=judged_note, method="score >= 4; Wilson 95%",
                                   role=None if any(m.role == "accuracy" for m in headline) else "accuracy"))
            headline.append(_mean_metric(f"mean score ({judge_name})",
                                         [float(r.metrics[f"{prefix}_score"]) for r in scored], judged_note,
                                         "1-5 rubric; percentile bootstrap 95%"))
        costed = [r for r in complete if r.metrics.get("cost") is not None]
        if costed:
            headline.append(_mean_metric("mean cost per case ($)", [float(r.metrics["cost"]) for r in costed],
                                         "completed cases", "visits $300 + test prices; percentile bootstrap 95%",
                                         role="cost"))
            estimated = sum(int(r.metrics.get("tests_estimated") or 0) for r in costed)
            by_code = sum(int(r.metrics.get("tests_priced_by_code") or 0) for r in costed)
            headline.append(Metric(name="tests priced by code", value=by_code / (by_code + estimated)
                                   if by_code + estimated else None, n=by_code + estimated,
                                   interval=wilson_interval(by_code, by_code + estimated)
                                   if by_code + estimated else None, method="Wilson 95%",
                                   denominator="ordered tests (refused left out)"))
        if complete and "questions" in complete[0].output:
            for field, label in (("visits", "mean visits"), ("questions", "mean questions"),
                                 ("tests", "mean tests")):
                headline.append(_mean_metric(label, [float(r.output.get(field, 0)) for r in complete],
                                             "completed cases", "mean; percentile bootstrap 95%",
                                             role="turns" if field == "questions" else None))
            answers = {key: sum(int(r.output.get("sources", {}).get(key, 0)) for r in complete)
                       for key in ("REAL", "SYNTHETIC", "REFUSED")}
            total = sum(answers.values())
            headline.append(Metric(name="REAL answers", value=answers["REAL"] / total if total else None,
                                   interval=wilson_interval(answers["REAL"], total) if total else None,
                                   method="Wilson 95%", n=total,
                                   denominator="gatekeeper answers (questions and tests)"))
        groups = self._split_groups(complete)
        notes = []
        withheld = sum(int(r.output.get("withheld") or 0) for r in finished)
        if withheld:
            notes.append(f"{withheld} interpretive clause(s) naming the diagnosis were withheld from the gatekeeper's "
                         f"real results (interpretation={params.interpretation}).")
        if incomplete:
            notes.append(f"{len(incomplete)} case(s) ended without a diagnosis (incomplete) and are kept out of "
                         "accuracy and cost.")
        if counts.failed:
            notes.append(f"{counts.failed} case(s) errored and are kept out of accuracy and cost; resume the run to "
                         "retry them.")
        if params.skip_bad_lines:
            with suppress(CaseFileError):
                skipped = load_any(params.cases, skip_bad_lines=True)
                if skipped.skipped:
                    notes.append(f"{Path(params.cases).name}: {skipped.summary()}.")
        reps = {r.repetition for r in results}
        extras = {"agent": params.agent, "gatekeeper": params.gatekeeper, "judge": params.judge,
                  "interpretation": params.interpretation, "withheld_clauses": withheld,
                  "errored": counts.failed, "incomplete": len(incomplete), "completed": len(complete),
                  "repetitions_seen": len(reps),
                  "answers": {key: sum(int(r.output.get("sources", {}).get(key, 0)) for r in complete)
                              for key in ("REAL", "SYNTHETIC", "REFUSED")}}
        return RunSummary(benchmark=self.name, title=SPEC.title, counts=counts, headline=headline, groups=groups,
                          reference=[ReferenceRow(label=label, source=REFERENCE_SOURCE, values=values)
                                     for label, values in REFERENCE_ROWS.items()],
                          notes=notes, extras=extras)

    @staticmethod
    def _split_groups(complete: Sequence[CaseResult]) -> list[MetricGroup]:
        from medeval_core.metrics.stats import wilson_interval

        splits = sorted({str(r.output.get("split", "")) for r in complete})
        if len(splits) < 2:
            return []
        groups = []
        for split in splits:
            rows = [r for r in complete if r.output.get("split") == split]
            metrics = []
            for judge_name, prefix in METRIC_PREFIX.items():
                scored = [r for r in rows if r.metrics.get(f"{prefix}_score") is not None]
                if scored:
                    right = sum(bool(r.metrics[f"{prefix}_correct"]) for r in scored)
                    metrics.append(Metric(name=f"accuracy ({judge_name})", value=right / len(scored),
                                          interval=wilson_interval(right, len(scored)), n=len(scored),
                                          denominator="judged cases"))
            costs = [float(r.metrics["cost"]) for r in rows if r.metrics.get("cost") is not None]
            if costs:
                metrics.append(_mean_metric("mean cost per case ($)", costs, "completed cases",
                                            "percentile bootstrap 95%"))
            groups.append(MetricGroup(dimension="split", label=split, metrics=metrics))
        return groups


def _mean_metric(name: str, values: Sequence[float], denominator: str, method: str,
                 role: MetricRole | None = None) -> Metric:
    """A mean over cases with its percentile bootstrap 95 % interval."""
    from medeval_core.metrics.stats import bootstrap_ci

    return Metric(name=name, value=sum(values) / len(values), interval=bootstrap_ci(values), n=len(values),
                  denominator=denominator, method=method, unit="number", role=role)


def default_prices(settings: Settings) -> Path:
    from medeval_core.benchmarks.sdbench.sources import cms_prices_path
    from medeval_core.data import DataError

    try:
        return cms_prices_path(settings.data_dir)
    except DataError as exc:
        raise BenchmarkError(f"{exc} Or give a price table CSV as prices (--prices on the command line).") from None


__all__ = ["SDBenchBenchmark", "SDBenchOutput", "SDBenchParams", "default_prices"]
