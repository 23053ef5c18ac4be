"""The parameters of a MEDIQ run, stored whole with the run (a resume continues exactly these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from medeval_core.benchmark import LineFileParams
from medeval_core.benchmarks.mediq.experts import DEFAULT_SCALE_THRESHOLD, Abstention
from medeval_core.benchmarks.mediq.interaction import DEFAULT_MAX_QUESTIONS
from medeval_core.benchmarks.mediq.patients import DEFAULT_MAX_FACTS, DEFAULT_THRESHOLD
from medeval_core.interaction import MAX_TURNS


class MediqParams(LineFileParams):
    cases: str = Field(description="MEDIQ JSON Lines file (absolute path)")
    expert: Literal["llm", "replay", "person"] = Field(description="llm, replay of --actions, or the person at "
                                                                   "the walkthrough page")
    actions: str | None = Field(default=None, description="replay: JSON Lines of actions per case")
    patient: Literal["offline", "llm"] = Field(default="offline", description="patient system")
    max_turns: int = Field(default=DEFAULT_MAX_QUESTIONS, ge=0, le=100, validation_alias=MAX_TURNS,
                           description="question budget")
    abstention: Abstention = Field(default="scale", description="llm expert: fixed, binary or scale")
    threshold: int = Field(default=DEFAULT_SCALE_THRESHOLD, ge=1, le=5, description="scale abstention cut-off")
    fact_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0, le=1,
                                  description="offline patient: the least similarity of a fact given")
    max_facts: int = Field(default=DEFAULT_MAX_FACTS, ge=1, le=20, description="offline patient: facts per answer")
    withhold_answer_facts: bool = Field(default=False, description="patient: never give a fact that contains the "
                                        "correct option's text (MediQ's patient gives them: off by default)")
    limit: int | None = Field(default=None, ge=1, description="only the first N valid cases")
    baseline: bool = Field(default=True, description="also ask the expert without questions (accuracy beside)")
    models: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra={"in_form": False},
        description="older runs only: the LLM roles' backends at launch (a run now keeps them once, in its stored "
                    "settings)")
