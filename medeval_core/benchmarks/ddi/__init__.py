"""DDI open-ended lesion diagnosis and candidate-label classification (SkinGPT-R1 evaluation settings).

This module is the benchmark's light spec only. ``cases`` loads images and references, ``images`` validates image
files, ``tasks`` builds the prompts and maps classification answers to labels, ``params`` holds a run's stages,
``benchmark`` implements the interfaces (model and responses runs, the judge and exact-label scorers), ``summary``
summarises a run, ``interactive`` serves the lesion page (a session per evaluation), ``sources`` declares the DDI
and ISIC data sources, ``reported`` recomputes the document's reported figures from their counts, and ``cli`` adds
the ``run ddi`` options, ``judge ddi`` and ``check-reported`` (``reported_cli``).
"""

from pathlib import Path

from medeval_core.benchmarks.ddi.sources import DDI, LESIONS
from medeval_core.registry import BenchmarkSpec, ModelRole, PageInfo

VLM_ROLE = "vlm"
JUDGE_ROLE = "judge"

SPEC = BenchmarkSpec(
    name="ddi",
    title="DDI lesion diagnosis",
    description="DDI lesion diagnosis: the tested vision-language model, then the judge (a score run over its "
                "responses)",
    factory="medeval_core.benchmarks.ddi.benchmark:DdiBenchmark",
    cli="medeval_core.benchmarks.ddi.cli:CLI",
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
