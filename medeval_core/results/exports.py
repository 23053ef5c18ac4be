"""A run's case results as CSV and JSON Lines files that are safe to open.

CSV: structured cells (dicts, lists: a differential, the inquired evidences) are written as JSON, never as Python
reprs; text cells that a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return; OWASP's list) get a leading apostrophe, which spreadsheets show as text. Numbers are never
touched (``-0.5`` stays a number). JSON Lines keeps every value as JSON, nested values as nested objects.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medeval_core.records import CaseResult

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: Any) -> Any:
    """One CSV cell: JSON for structured values, an apostrophe before text a spreadsheet would evaluate."""
    if isinstance(value, dict | list | tuple):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def result_rows(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """One row per case result: identifiers, status, error, times, then ``metric.*`` and ``output.*`` columns."""
    return [
        {
            "run_id": r.run_id, "case_id": r.case_id, "repetition": r.repetition, "status": r.status.value,
            "error": r.error,
            "started_at": r.started_at.isoformat() if r.started_at else None,
            "finished_at": r.finished_at.isoformat() if r.finished_at else None,
            **{f"metric.{k}": v for k, v in r.metrics.items()},
            **{f"output.{k}": v for k, v in r.output.items()},
        }
        for r in results
    ]


def results_csv(results: Sequence[CaseResult]) -> str:
    import pandas as pd

    frame = pd.DataFrame(result_rows(results)).astype(object).map(neutralise_cell)
    # RFC 4180 line ends (CRLF): the writer then quotes any cell holding a carriage return or a newline, so one
    # stays inside its cell.
    return frame.to_csv(index=False, lineterminator="\r\n")


def results_jsonl(results: Sequence[CaseResult]) -> str:
    buffer = io.StringIO()
    for row in result_rows(results):
        buffer.write(json.dumps(row, ensure_ascii=False, default=str))
        buffer.write("\n")
    return buffer.getvalue()


def write_results(results: Sequence[CaseResult], path: Path) -> Path:
    """Write ``results`` as CSV or JSON Lines, chosen by the file's suffix (``.csv``, ``.jsonl``)."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl"):
        raise ValueError(f"Cannot export to {path.name}: use a .csv or .jsonl file name.")
    text = results_csv(results) if suffix == ".csv" else results_jsonl(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
    return path
