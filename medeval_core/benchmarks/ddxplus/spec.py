"""The DDXPlus benchmark's spec (light: no numpy, pandas or model imports)."""

from __future__ import annotations

from pathlib import Path

from medeval_core.benchmarks.ddxplus import CLI
from medeval_core.benchmarks.ddxplus.sources import SOURCE
from medeval_core.registry import BenchmarkSpec, ModelRole, PageInfo

SPEC = BenchmarkSpec(
    name="ddxplus",
    title="DDXPlus",
    description="Question simulated DDXPlus patients (30 questions at most) with an agent and score DDR, DDP, "
                "DDF1, GTPA, GTPA@1, PER and IL beside the published AARLC and BASD rows.",
    factory="medeval_core.benchmarks.ddxplus.benchmark:DDXPlusBenchmark",
    cli=CLI,
    pages=(PageInfo(
        path=str(Path(__file__).with_name("page_walkthrough.py")),
        title="DDXPlus walkthrough", icon=":material/forum:",
        section="Benchmarks", url_path="ddxplus", reopen_query="walkthrough",
        start_here="question a simulated patient, give your differential and see how it scores",
        description="Question a simulated DDXPlus patient, give a ranked differential and see the official "
                    "metrics, the ground truth beside yours and the evidences you missed; ask what the KB-Bayes "
                    "agent would do.",
    ),),
    model_roles=(ModelRole(name="chat", title="Chat agent model",
                           description="the chat model of the DDXPlus LLM agent (--agent llm)"),),
    data_sources=(SOURCE,),
)
