"""The parameters of an open-diagnosis run, stored whole with the run (a resume continues exactly these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from medeval_core.benchmark import LineFileParams
from medeval_core.benchmarks.dynamicare.doctors import MAX_ROUNDS
from medeval_core.benchmarks.dynamicare.interaction import DEFAULT_MAX_QUESTIONS
from medeval_core.benchmarks.dynamicare.patients import DEFAULT_MAX_FIELDS, DEFAULT_THRESHOLD
from medeval_core.interaction import MAX_TURNS


class DynamicareParams(LineFileParams):
    cases: str = Field(description="records JSON Lines (absolute path)")
    cases_format: Literal["records", "agentclinic"] = Field(
        default="records", description="records, or an AgentClinic file read directly (diagnoses mapped at load)")
    doctor: Literal["llm", "team", "replay", "person"] = Field(
        description="llm, the DynamiCare team, replay, or the person at the walkthrough page")
    actions: str | None = Field(default=None, description="replay: JSON Lines of actions per case")
    patient: Literal["offline", "llm"] = Field(default="offline", description="patient simulator")
    max_turns: int = Field(default=DEFAULT_MAX_QUESTIONS, ge=0, le=100, validation_alias=MAX_TURNS,
                           description="question budget")
    max_rounds: int = Field(default=MAX_ROUNDS, ge=1, le=10, description="team: rounds at most")
    mapper: Literal["exact", "llm"] = Field(default="exact", description="the ICD-9 mapper's choice")
    field_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0, le=1,
                                   description="offline patient: the least similarity of a field given")
    max_fields: int = Field(default=DEFAULT_MAX_FIELDS, ge=1, le=20, description="offline patient: fields per answer")
    limit: int | None = Field(default=None, ge=1, description="only the first N valid records")
    models: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra={"in_form": False},
        description="older runs only: the LLM roles' backends at launch (a run now keeps them once, in its stored "
                    "settings)")
