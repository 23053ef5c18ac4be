"""The DDI benchmark's spec (light: no torch, image or model imports)."""

from pathlib import Path

from medeval_core.benchmarks.ddi import CLI, JUDGE_ROLE, VLM_ROLE
from medeval_core.benchmarks.ddi.sources import DDI, LESIONS
from medeval_core.registry import BenchmarkSpec, ModelRole, PageInfo

SPEC = BenchmarkSpec(
    name="ddi",
    title="DDI lesion diagnosis",
    description="DDI lesion diagnosis: the tested vision-language model, then the judge (a score run over its "
                "responses)",
    factory="medeval_core.benchmarks.ddi.benchmark:DdiBenchmark",
    cli=CLI,
    pages=(
        PageInfo(
            path=str(Path(__file__).with_name("page_lesion.py")),
            title="Lesion diagnosis", icon=":material/dermatology:",
            section="Benchmarks", url_path="lesion",
            description="Upload a skin-lesion image, run the tested vision-language model with the DDI or 23-label "
                        "prompts, and see the final diagnosis and the judge's verdict; or judge a pasted answer from "
                        "another system.",
        ),
    ),
    model_roles=(
        ModelRole(name=VLM_ROLE, title="Vision-language model",
                  description="the tested vision-language model (Qwen2.5-VL checkpoint or an "
                              "OpenAI-compatible vision endpoint)"),
        ModelRole(name=JUDGE_ROLE, title="DDI judge",
                  description="the DDI judge (an OpenAI-compatible chat endpoint; offline rules "
                              "when none is configured)"),
    ),
    judges=("ddi-llm", "offline-rules"),
    data_sources=(DDI, LESIONS),
)
