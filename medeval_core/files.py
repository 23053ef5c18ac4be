"""Reading the project's JSON files with one readable error per failure, whose remedy the caller words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: Path, error: type[Exception], missing: str, invalid: str) -> Any:
    """Parse ``path``; raise ``error`` saying "<path> <missing>" or "<path> <invalid> (<parser message>)"."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path} {missing}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path} {invalid} ({exc})") from None
