"""The SDBench benchmark's spec (light: no model, pandas or embedding imports)."""

from __future__ import annotations

from pathlib import Path

from medeval_core.benchmarks.sdbench import AGENT_ROLE, CLI, GATEKEEPER_ROLE, JUDGE_ROLE, PRICING_ROLE
from medeval_core.benchmarks.sdbench.sources import CASES, COSTING
from medeval_core.registry import BenchmarkSpec, ModelRole, PageInfo

SPEC = BenchmarkSpec(
    name="sdbench",
    title="SDBench sequential diagnosis",
    description="An agent asks questions and orders tests of a gatekeeper until it commits a diagnosis; a judge "
                "scores it 1-5 (4-5 correct) and each visit and test is priced: accuracy against cost per case.",
    factory="medeval_core.benchmarks.sdbench.benchmark:SDBenchBenchmark",
    cli=CLI,
    pages=(PageInfo(
        path=str(Path(__file__).with_name("page_walkthrough.py")),
        title="SDBench walkthrough", icon=":material/labs:",
        section="Benchmarks", url_path="sdbench",
        start_here="work up a case with the offline gatekeeper and judge",
        description="Read a case summary, ask the gatekeeper questions and order tests with their running cost, "
                    "commit a diagnosis and see the judge's score, the reference and the findings you never asked "
                    "for.",
    ),),
    model_roles=(
        ModelRole(name=AGENT_ROLE, title="Chat agent model",
                  description="the chat model of the SDBench baseline agent (--agent llm)"),
        ModelRole(name=GATEKEEPER_ROLE, title="SDBench gatekeeper",
                  description="the SDBench LLM gatekeeper (--gatekeeper llm)", offline=True),
        ModelRole(name=JUDGE_ROLE, title="SDBench judge", description="the SDBench 1-5 diagnosis judge (--judge llm)",
                  offline=True),
        ModelRole(name=PRICING_ROLE, title="Test pricing model",
                  description="estimates the price of tests the alias table cannot map"),
    ),
    judges=("sdbench-llm-judge", "sdbench-offline-judge"),
    # The AgentClinic cases are declared by the open-diagnosis benchmark, which reads them too.
    data_sources=("agentclinic", COSTING, CASES),
)
