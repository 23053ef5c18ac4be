"""The MEDIQ benchmark's spec (light: no model imports)."""

from __future__ import annotations

from pathlib import Path

from medeval_core.benchmarks.mediq import CLI
from medeval_core.benchmarks.mediq.sources import SOURCE
from medeval_core.registry import BenchmarkSpec, ModelRole, PageInfo

SPEC = BenchmarkSpec(
    name="mediq",
    title="MEDIQ",
    description="An expert asks a patient system (the case's atomic facts only) one question at a time, 10 at "
                "most, then chooses an option; accuracy with a Wilson interval, Ave-Q, the timeout rate and the "
                "accuracy without asking.",
    factory="medeval_core.benchmarks.mediq.benchmark:MediqBenchmark",
    cli=CLI,
    pages=(PageInfo(
        path=str(Path(__file__).with_name("page_walkthrough.py")),
        title="MEDIQ walkthrough", icon=":material/quiz:",
        section="Benchmarks", url_path="mediq",
        description="Ask a MEDIQ patient questions, choose an option, then see the answer, the facts you never "
                    "uncovered and what the LLM expert would have asked.",
    ),),
    model_roles=(ModelRole(name="expert", title="MEDIQ expert", description="the MEDIQ LLM expert (--expert llm)"),
                 ModelRole(name="patient", title="Simulated patient",
                           description="the LLM patient of MEDIQ and open diagnosis "
                                       "(--patient llm)")),
    data_sources=(SOURCE,),
)
