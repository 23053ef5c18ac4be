"""Plotly figures shared by the pages and the HTML report, built from typed summaries (pages only place them).

Runs are named by their labels (``results.run_label``), never by their ids alone, so legends read as the user
named the runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from pydantic import BaseModel

from medeval_core.benchmark import RunSummary
from medeval_core.results.compare import MetricSummary

_LAYOUT = {"margin": {"t": 40, "b": 40}, "height": 380, "legend": {"orientation": "h"}}


def metric_intervals(series: Mapping[str, Sequence[MetricSummary]]) -> go.Figure:
    """One bar per metric and run (keyed by its label), with its 95 % interval as error bars."""
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
    figure.update_layout(barmode="group", yaxis_title="value (95% CI)", **_LAYOUT)
    return figure


class CostPoint(BaseModel):
    label: str
    accuracy: float
    cost: float
    on_front: bool = False


def pareto_front(points: Sequence[CostPoint]) -> list[CostPoint]:
    """``points`` with ``on_front`` set where no other point is at least as accurate for at most the cost and
    strictly better in one (higher accuracy is better, lower cost is better)."""
    marked = []
    for point in points:
        dominated = any(other.accuracy >= point.accuracy and other.cost <= point.cost
                        and (other.accuracy > point.accuracy or other.cost < point.cost) for other in points)
        marked.append(point.model_copy(update={"on_front": not dominated}))
    return marked


def cost_points(summaries: Mapping[str, RunSummary]) -> list[CostPoint]:
    """The runs whose summaries have a metric in the accuracy role and one in the cost role (``Metric.role``,
    whatever the benchmark names them), with the Pareto front marked."""
    points = []
    for label, summary in summaries.items():
        accuracy, cost = summary.with_role("accuracy"), summary.with_role("cost")
        if accuracy is not None and cost is not None and accuracy.value is not None and cost.value is not None:
            points.append(CostPoint(label=label, accuracy=accuracy.value, cost=cost.value))
    return pareto_front(points)


def accuracy_vs_cost(points: Sequence[CostPoint]) -> go.Figure:
    """Accuracy against mean cost per case, one marker per run, the Pareto front joined by a line."""
    figure = go.Figure()
    figure.add_scatter(x=[p.cost for p in points], y=[p.accuracy for p in points], mode="markers+text",
                       text=[p.label for p in points], textposition="top center", name="runs",
                       hovertemplate="%{text}: accuracy %{y:.3f} at %{x:,.0f}<extra></extra>")
    front = sorted((p for p in points if p.on_front), key=lambda p: p.cost)
    if front:
        figure.add_scatter(x=[p.cost for p in front], y=[p.accuracy for p in front], mode="lines",
                           name="Pareto front", line={"dash": "dash"})
    figure.update_layout(xaxis_title="mean cost per case", yaxis_title="accuracy", **_LAYOUT)
    return figure


def group_dimensions(summary: RunSummary) -> list[str]:
    return list(dict.fromkeys(group.dimension for group in summary.groups))


def group_breakdown(summary: RunSummary, dimension: str, metric: str) -> go.Figure:
    """``metric`` per group of one dimension (pathology, skin tone, malignancy, split), with n in the hover."""
    labels, values, counts, above, below = [], [], [], [], []
    for group in summary.groups:
        if group.dimension != dimension:
            continue
        found = next((m for m in group.metrics if m.name == metric and m.value is not None), None)
        if found is None or found.value is None:
            continue
        labels.append(group.label)
        values.append(found.value)
        counts.append(found.n)
        low, high = found.interval or (found.value, found.value)
        above.append(high - found.value)
        below.append(found.value - low)
    figure = go.Figure()
    figure.add_bar(x=labels, y=values, customdata=counts, name=metric,
                   error_y={"type": "data", "symmetric": False, "array": above, "arrayminus": below},
                   hovertemplate="%{x}: %{y:.3f} (n=%{customdata})<extra></extra>")
    figure.update_layout(xaxis_title=dimension, yaxis_title=metric, **{**_LAYOUT, "height": 420})
    return figure


def paired_differences_plot(metric: str, differences: Sequence[float], label_a: str, label_b: str) -> go.Figure:
    """The per-case differences (A minus B) on the shared cases, as a histogram with the mean marked."""
    figure = go.Figure()
    figure.add_histogram(x=list(differences), name=f"{label_a} minus {label_b}", nbinsx=min(41, max(5, len(
        set(differences)))))
    if differences:
        mean = sum(differences) / len(differences)
        figure.add_vline(x=mean, line_dash="dash", annotation_text=f"mean {mean:+.3f}")
    figure.update_layout(xaxis_title=f"{metric}: {label_a} minus {label_b}, per shared case",
                         yaxis_title="cases", **_LAYOUT)
    return figure
