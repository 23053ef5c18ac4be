"""Replay files: one JSON line of recorded actions per case (``{"case_id", "actions": [...]}``), read and validated
the same way for every benchmark whose agent can be replayed (an expert's or a doctor's questions and answer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from medeval_core.data.files import read_json_lines

L = TypeVar("L", bound=BaseModel)


class ActionFileError(ValueError):
    """The replay file cannot be used; the message names the line and the problem."""


def load_replay(path: str | Path, line_model: type[L], check: Callable[[L], None], shape: str) -> dict[str, L]:
    """Lines by case id. ``check`` raises ValueError for a line the model accepts but the benchmark does not;
    ``shape`` is the line's format, quoted in every error. A numeric ``case_id`` is read as text (files use the
    data's own ids)."""
    def parse(raw: object) -> L:
        if isinstance(raw, dict) and isinstance(raw.get("case_id"), int):
            raw["case_id"] = str(raw["case_id"])
        item = line_model.model_validate(raw)
        check(item)
        return item

    items, _ = read_json_lines(
        Path(path), ActionFileError, "does not exist; give the replay actions JSON Lines file.", parse,
        lambda item: str(getattr(item, "case_id")),  # noqa: B009 - every replay line model has a case_id
        duplicate="case {key} has actions on an earlier line", nothing_valid="no actions",
        remedy=f"each line is {shape}")
    return {str(getattr(item, "case_id")): item for item in items}  # noqa: B009
