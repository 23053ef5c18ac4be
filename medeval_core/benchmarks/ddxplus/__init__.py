"""DDXPlus (Fansi Tchango et al., NeurIPS 2022): KB, patients, simulator, agents, runs. See design.md §3.2.

This module holds the benchmark's spec only (light: no numpy, pandas or model imports), so that the CLI and the
app start fast; ``benchmark.py`` is imported when a DDXPlus run is built.
"""

from __future__ import annotations

from pathlib import Path

from medeval_core.benchmarks.ddxplus.sources import SAMPLE_PATIENTS, SOURCE
from medeval_core.registry import BenchmarkSpec, ModelRole, PageInfo

__all__ = ["SAMPLE_PATIENTS", "SPEC", "default_kb_dir"]


def default_kb_dir(data_dir: Path) -> Path:
    """Where the KB files live under the data folder (``MEDEVAL_DATA_DIR``)."""
    return SOURCE.folder_in(data_dir)


SPEC = BenchmarkSpec(
    name="ddxplus",
    title="DDXPlus",
    description="Question simulated DDXPlus patients (30 questions at most) with an agent and score DDR, DDP, "
                "DDF1, GTPA, GTPA@1, PER and IL beside the published AARLC and BASD rows.",
    factory="medeval_core.benchmarks.ddxplus.benchmark:DDXPlusBenchmark",
    cli="medeval_core.benchmarks.ddxplus.cli:CLI",
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
