"""The open-diagnosis benchmark's spec (light: no model or vocabulary imports)."""

from __future__ import annotations

from pathlib import Path

from medeval_core.benchmarks.dynamicare import CLI
from medeval_core.benchmarks.dynamicare.sources import AGENTCLINIC
from medeval_core.registry import BenchmarkSpec, ModelRole, PageInfo

SPEC = BenchmarkSpec(
    name="dynamicare",
    title="Open diagnosis (DynamiCare)",
    description="A doctor questions a patient simulated from a record (10 questions at most) and ranks up to 10 "
                "diagnoses, mapped to ICD-9; Hit@5, Hit@10, Rec@5, Rec@10 on the categories and Ave-Q.",
    factory="medeval_core.benchmarks.dynamicare.benchmark:DynamicareBenchmark",
    cli=CLI,
    pages=(PageInfo(
        path=str(Path(__file__).with_name("page_walkthrough.py")), title="Open diagnosis walkthrough",
        icon=":material/medical_information:", section="Benchmarks", url_path="open-diagnosis",
        description="Question a patient simulated from a record, rank diagnoses, check and correct each one's "
                    "ICD-9 code, then see Hit@K / Rec@K and the codes matched.",
    ),),
    model_roles=(ModelRole(name="doctor", title="Open-diagnosis doctor",
                           description="the open-diagnosis LLM doctor and the DynamiCare team"),
                 ModelRole(name="coder", title="ICD-9 coder",
                           description="the ICD-9 mapper's choice within the shortlist (--mapper llm)")),
    data_sources=(AGENTCLINIC,),
)
