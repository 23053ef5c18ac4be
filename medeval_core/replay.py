"""Replay files: one JSON line of recorded actions per case (``{"case_id", "actions": [...]}``), read and validated
the same way for every benchmark whose agent can be replayed (MEDIQ experts, open-diagnosis doctors)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

L = TypeVar("L", bound=BaseModel)


class ActionFileError(ValueError):
    """The replay file cannot be used; the message names the line and the problem."""


def load_replay(path: str | Path, line_model: type[L], check: Callable[[L], None], shape: str) -> dict[str, L]:
    """Lines by case id. ``check`` raises ValueError for a line the model accepts but the benchmark does not;
    ``shape`` is the line's format, quoted in every error. A numeric ``case_id`` is read as text (files use the
    data's own ids)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ActionFileError(f"Cannot read the actions file {path} ({exc}); give a JSON Lines file.") from None
    found: dict[str, L] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            if isinstance(raw, dict) and isinstance(raw.get("case_id"), int):
                raw["case_id"] = str(raw["case_id"])
            item = line_model.model_validate(raw)
            check(item)
        except (json.JSONDecodeError, ValidationError, ValueError) as exc:
            message = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise ActionFileError(f"{path} line {number}: {message}; each line is {shape}.") from None
        case_id = str(getattr(item, "case_id"))  # noqa: B009 - every replay line model has a case_id
        if case_id in found:
            raise ActionFileError(f"{path} line {number}: case {case_id} has actions on an earlier line.")
        found[case_id] = item
    return found
