"""A self-contained HTML report of one run: summary, settings and versions, plots, the per-case table.

The file opens offline: plotly's JavaScript is inlined once (no script is fetched from anywhere) and there are no
external styles or images. Every stored string (labels, case ids, errors, model output) is HTML-escaped, so a
model that writes ``<script>`` produces text, never markup.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from medeval_core.benchmark import RunSummary
from medeval_core.records import utc_now
from medeval_core.results import plots
from medeval_core.results.summaries import case_rows, run_label
from medeval_core.runs import service
from medeval_core.store import Store

SECTIONS = ("Summary", "Settings and versions", "Plots", "Per-case results")

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #1f2933; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #cbd2d9; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f0f4f8; }
pre { background: #f5f7fa; padding: 0.75rem; overflow-x: auto; white-space: pre-wrap; }
.note { color: #52606d; }
"""


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return escape(json.dumps(value, ensure_ascii=False, default=str))
    return escape("" if value is None else str(value))


def _table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    if not rows:
        return '<p class="note">None.</p>'
    columns = columns or list(dict.fromkeys(key for row in rows for key in row))
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(row.get(c))}</td>" for c in columns) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _summary_html(summary: RunSummary | None) -> str:
    if summary is None:
        return '<p class="note">The run has no stored summary yet (it has not finished once).</p>'
    counts = summary.counts
    parts = [f"<p>Expected {counts.expected}, done {counts.done}, failed {counts.failed}, "
             f"pending {counts.pending}.</p>"]
    if summary.headline and counts.done:
        parts.append(_table([{"metric": m.name, "value": m.format(m.value), "95% interval": m.formatted_interval(),
                              "n": m.n, "denominator": m.denominator} for m in summary.headline]))
    elif not counts.done:
        parts.append('<p class="note">No case finished: no metric is reported.</p>')
    if summary.spread:
        parts.append(f"<h3>Across {len(summary.repetitions)} repetitions</h3>")
        parts.append(_table([{"metric": s.name, "mean ± SD (range)": s.formatted()} for s in summary.spread]))
        parts.append(_table([{"repetition": r.repetition, "done": r.counts.done, "failed": r.counts.failed,
                              **{m.name: m.format(m.value) for m in r.metrics}} for r in summary.repetitions]))
    if summary.groups:
        parts.append("<h3>By group</h3>")
        parts.append(_table([{"dimension": g.dimension, "group": g.label,
                              **{m.name: m.format(m.value) for m in g.metrics},
                              "n": g.metrics[0].n if g.metrics else ""} for g in summary.groups]))
    if summary.reference:
        parts.append("<h3>Published reference rows</h3>")
        parts.append(_table([{"row": r.label, **r.values, "source": r.source} for r in summary.reference]))
    parts += [f'<p class="note">{escape(note)}</p>' for note in summary.notes]
    return "".join(parts)


def _figures(store: Store, run_id: str, summary: RunSummary | None, label: str) -> list[go.Figure]:
    if summary is None or not summary.counts.done:
        return []
    figures = [plots.metric_intervals({label: service.metric_summaries(store, run_id, summary=summary)})]
    for dimension in plots.group_dimensions(summary):
        first = next((g for g in summary.groups if g.dimension == dimension), None)
        if first and first.metrics:
            figures.append(plots.group_breakdown(summary, dimension, first.metrics[0].name))
    points = plots.cost_points({label: summary})
    if points:
        figures.append(plots.accuracy_vs_cost(points))
    return figures


def _figures_html(figures: list[go.Figure]) -> str:
    if not figures:
        return '<p class="note">No plot: no case finished.</p>'
    # plotly.js inlined with the first figure only: the later ones reuse it, and nothing loads from a CDN. The
    # template is named: the process default may be Streamlit's theme, which a standalone file does not have.
    return "".join(figure.update_layout(template="plotly_white").to_html(full_html=False,
                                                                        include_plotlyjs=index == 0)
                   for index, figure in enumerate(figures))


def run_report_html(store: Store, run_id: str) -> str:
    """The whole report as one HTML document."""
    row = store.get_run(run_id)
    summary = service.stored_summary(store, run_id)
    label = run_label(row)
    config = row.config if isinstance(row.config, dict) else {}
    results = store.results(run_id)
    rows = case_rows(results)
    settings_rows: list[dict[str, Any]] = [
        {"item": "run id", "value": row.id}, {"item": "label", "value": row.label},
        {"item": "benchmark", "value": row.benchmark}, {"item": "kind", "value": row.kind},
        {"item": "status", "value": row.status}, {"item": "settings hash", "value": row.settings_hash},
        {"item": "created", "value": row.created_at}, {"item": "finished", "value": row.finished_at},
    ]
    body = [
        f"<h1>{escape(label)}</h1>",
        f'<p class="note">medeval report of run {escape(row.id)}, written {utc_now():%Y-%m-%d %H:%M UTC}.</p>',
        f"<h2>{SECTIONS[0]}</h2>", _summary_html(summary),
        f"<h2>{SECTIONS[1]}</h2>", _table(settings_rows),
        "<h3>Parameters</h3>", f"<pre>{escape(json.dumps(config.get('params', {}), indent=2, default=str))}</pre>",
        "<h3>Input files</h3>", _table([{"name": name, **info} for name, info in config.get("inputs", {}).items()]),
        "<h3>Versions</h3>", _table([{"library": k, "version": v} for k, v in (row.versions or {}).items()]),
        f"<h2>{SECTIONS[2]}</h2>", _figures_html(_figures(store, run_id, summary, label)),
        f"<h2>{SECTIONS[3]} ({len(rows)})</h2>", _table(rows),
    ]
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(label)} - medeval report</title><style>{_STYLE}</style></head>"
            f"<body>{''.join(body)}</body></html>")


def write_run_report(store: Store, run_id: str, path: Path) -> Path:
    """Write the report to ``path`` (through a temporary file, so a failure leaves no half-written report)."""
    document = run_report_html(store, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(document, encoding="utf-8")
    partial.replace(path)
    return path
