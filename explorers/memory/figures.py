"""The Memory lab's figures, drawn from measured points (no torch runs here)."""

from __future__ import annotations

import plotly.graph_objects as go

from explorers.memory.experiment import MemoryOptions, Point
from explorers.memory.your_model import CATEGORIES, Measurement

CATEGORY_COLOURS = {
    "parameters": "#1f77b4",
    "gradients": "#ff7f0e",
    "optimizer_state": "#2ca02c",
    "activations": "#d62728",
    "temporaries": "#9467bd",
}


def sweep_figure(points: tuple[Point, ...], options: MemoryOptions) -> go.Figure:
    """The four measured categories stacked per batch size, with the step's real peak as a marker.

    The stack can exceed the peak: activations are freed during backward, before the
    optimizer's state is created, so the categories are never all alive at once.
    """
    labels = [f"{p.batch:,}" + ("" if p.measured else " (est.)") for p in points]
    figure = go.Figure()
    for category in CATEGORIES[:4]:
        figure.add_trace(
            go.Bar(
                name=category.replace("_", " "),
                x=labels,
                y=[getattr(p.result, category) / 2**20 for p in points],
                marker={
                    "color": CATEGORY_COLOURS[category],
                    "pattern": {"shape": ["" if p.measured else "/" for p in points]},
                    "line": {"width": [3 if p.batch == options.batch_size else 0 for p in points], "color": "black"},
                },
            )
        )
    figure.add_trace(
        go.Scatter(
            x=labels,
            y=[p.result.peak / 2**20 for p in points],
            mode="markers",
            name="peak",
            marker={"symbol": "diamond", "size": 13, "color": "black"},
        )
    )
    budget_mib = options.budget_gb * 10**9 / 2**20
    tallest = max(max(p.result.peak, sum(getattr(p.result, c) for c in CATEGORIES[:4])) for p in points) / 2**20
    title = "Memory of one training step, by batch size"
    if tallest >= budget_mib / 20:  # draw the device line only where it does not flatten every bar
        figure.add_trace(
            go.Scatter(
                x=labels,
                y=[budget_mib] * len(points),
                mode="lines",
                name=f"{options.budget_gb} GB device",
                line={"dash": "dash", "color": "#d62728"},
            )
        )
    else:
        title += f"<br><sub>all far below the {options.budget_gb} GB device</sub>"
    figure.update_layout(
        barmode="stack",
        title=title,
        yaxis_title="MiB",
        height=470,
        xaxis_title="batch size (outlined: yours; hatched: estimated on fake tensors)",
        legend={"orientation": "h", "y": -0.3},
    )
    return figure


def timeline_figure(result: Measurement) -> go.Figure:
    figure = go.Figure(
        go.Scatter(
            x=[name for name, _ in result.timeline],
            y=[b / 2**20 for _, b in result.timeline],
            mode="lines+markers",
            line={"shape": "hv", "width": 3},
            marker={"size": 10},
        )
    )
    figure.add_hline(y=result.peak / 2**20, line_dash="dot", annotation_text=f"peak {result.peak / 2**20:.1f} MiB")
    figure.update_layout(title="Live memory through one training step", yaxis_title="MiB", height=380)
    return figure


def retention_figure(curves: dict[str, list[int]]) -> go.Figure:
    figure = go.Figure()
    for name, live in curves.items():
        dash = "dot" if name.endswith("item()") else "solid"  # the two training loops overlap exactly
        figure.add_trace(
            go.Scatter(
                x=list(range(1, len(live) + 1)),
                y=[b / 2**20 for b in live],
                name=name,
                mode="lines+markers",
                line={"dash": dash, "width": 3},
            )
        )
    figure.update_layout(
        title="Live memory after each step",
        xaxis_title="step",
        yaxis_title="MiB",
        height=380,
        legend={"orientation": "h", "y": -0.3},
    )
    return figure
