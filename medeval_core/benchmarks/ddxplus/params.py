"""The parameters of a DDXPlus run, stored whole with the run (a resume continues exactly these)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from medeval_core.benchmark import LineFileParams
from medeval_core.interaction import with_max_turns

BUILT_IN_AGENTS = ("kb-bayes", "llm")


class DDXPlusParams(LineFileParams):
    # ``input`` tells the launch form (medeval_core/forms.py) to offer the data folder's files or folders.
    patients: str = Field(description="DDXPlus patients CSV or release zip to question (absolute path)",
                          json_schema_extra={"input": "file"})
    train: str | None = Field(default=None, description="training patients (likelihoods, learnt differential)",
                              json_schema_extra={"input": "file"})
    kb: str = Field(description="folder with release_evidences.json and release_conditions.json",
                    json_schema_extra={"input": "folder"})
    agent: str = Field(description="kb-bayes, llm, or an import path 'package.module:Class' of your own agent",
                       examples=list(BUILT_IN_AGENTS))
    limit: int | None = Field(default=None, ge=1, description="question only the first N loaded patients")
    case_ids: list[str] | None = Field(default=None, description="question only these patients, by case id "
                                                                   '(["row-0", "row-17"]; row-N is the file\'s row N)')
    agent_params: dict[str, Any] = Field(default_factory=dict, description="the agent's own settings")
    reads_kb: bool = Field(default=False, description="whether the agent read the KB's condition lists",
                           json_schema_extra={"in_form": False})  # the agent says so (prepare_params)

    @field_validator("agent_params")
    @classmethod
    def _one_turn_budget_name(cls, given: dict[str, Any]) -> dict[str, Any]:
        """An agent stored when its budget was ``max_questions`` reads as ``max_turns``, so its run is the same run."""
        return with_max_turns(given)
