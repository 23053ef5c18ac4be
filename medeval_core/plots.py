"""Plotly figures shared by the pages, built from typed summaries (pages only place them)."""

from __future__ import annotations

import plotly.graph_objects as go

from medeval_core.compare import MetricSummary


def metric_intervals(series: dict[str, list[MetricSummary]]) -> go.Figure:
    """One bar per metric and run, with its 95 % interval as error bars."""
    figure = go.Figure()
    for name, summaries in series.items():
        figure.add_bar(
            name=name,
            x=[s.metric for s in summaries],
            y=[s.value for s in summaries],
            error_y={"type": "data", "symmetric": False,
                     "array": [s.ci_high - s.value for s in summaries],
                     "arrayminus": [s.value - s.ci_low for s in summaries]},
            hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>",
        )
    figure.update_layout(barmode="group", yaxis_title="value (95% CI)", margin={"t": 30, "b": 30}, height=360,
                         legend={"orientation": "h"})
    return figure
