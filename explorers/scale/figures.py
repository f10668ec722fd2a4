"""The Real-scale lab's figures: the peak per GPU by part against GPU budgets, and the remedies measured."""

from __future__ import annotations

import plotly.graph_objects as go

from explorers.scale.experiment import GIB, Plan
from explorers.scale.lesson import kind_name
from explorers.scale.remedies import Remedies

KIND_COLOURS = {
    "parameters": "#1f77b4",
    "gradients": "#ff7f0e",
    "optimizer state": "#2ca02c",
    "activations": "#d62728",
    "weight copies": "#9467bd",
    "gathered unit": "#8c564b",
}
# Kinds without a colour of their own (temporaries, the batch, buffers) take these in turn: two of them shared
# one grey, with "other" too, so the legend could not tell them apart.
SPARE_COLOURS = ("#7f7f7f", "#17becf", "#bcbd22", "#e377c2", "#393b79")
OTHER_COLOUR = "#c7c7c7"
OTHER = "other (under 1% each)"
MARGIN = {"l": 10, "r": 20, "t": 90, "b": 60}  # the legend above the plot; the axis title and caption below


def _gib(nbytes: int) -> float:
    return nbytes / GIB


def peak_parts(plan: Plan) -> list[tuple[str, int]]:
    """What was alive at the peak, largest first; parts under 1% of it summed as "other" (the sum stays the peak)."""
    large = [(kind, n) for kind, n in plan.at_peak.items() if n >= plan.peak / 100]
    other = plan.peak - sum(n for _, n in large)
    return sorted(large, key=lambda kv: -kv[1]) + ([(OTHER, other)] if other else [])


def peak_figure(plan: Plan, budgets: tuple[int, ...], chosen: int, text_size: int = 14) -> go.Figure:
    """One bar: what was alive at the peak, largest first, with a line at each GPU budget (its tick on the axis)."""
    figure = go.Figure()
    spare = iter(SPARE_COLOURS)
    for kind, nbytes in peak_parts(plan):
        name = kind_name(kind) if kind != OTHER else OTHER
        colour = OTHER_COLOUR if kind == OTHER else KIND_COLOURS.get(kind) or next(spare, SPARE_COLOURS[0])
        figure.add_trace(
            go.Bar(
                y=["at the peak"],
                x=[_gib(nbytes)],
                name=name,
                orientation="h",
                marker_color=colour,
                hovertemplate=f"{name}: %{{x:,.2f}} GiB<extra></extra>",
            )
        )
    for budget in budgets:
        mine = budget == chosen
        figure.add_vline(x=budget, line={"color": "#222" if mine else "#888", "dash": "solid" if mine else "dot"})
    figure.update_layout(
        title={"text": "Memory per GPU at the peak"},
        barmode="stack",
        height=300 + 4 * text_size,
        margin=MARGIN,
        font={"size": text_size},
        legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
        xaxis={
            "title": "GiB per GPU (lines: GPU memory)",
            "range": [0, max(_gib(plan.peak), max(budgets)) * 1.05],
            "tickvals": [0, *budgets],
        },
        yaxis={"showticklabels": False},
    )
    return figure


def remedies_figure(remedies: Remedies, chosen: int, text_size: int = 14) -> go.Figure:
    """The measured peak per GPU as set and after each change, with the chosen budget."""
    names = ["as set", *(r.name for r in remedies.remedies)]
    peaks = [_gib(remedies.before.peak), *(_gib(r.plan.peak) for r in remedies.remedies)]
    colours = ["#444", *("#2ca02c" if r.plan.peak <= chosen * GIB else "#d62728" for r in remedies.remedies)]
    figure = go.Figure(
        go.Bar(
            y=names,
            x=peaks,
            orientation="h",
            marker_color=colours,
            text=[f"{p:,.1f}" for p in peaks],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:,.2f} GiB<extra></extra>",
        )
    )
    figure.add_vline(x=chosen, line={"color": "#222"}, layer="below")  # under the bars' numbers, not through them
    top = max(max(peaks), chosen) * 1.15
    figure.update_layout(
        title={"text": "Peak per GPU after each change"},
        height=140 + 2.6 * text_size * len(names),
        margin={"l": 10, "r": 40, "t": 20, "b": 60},
        font={"size": text_size},
        xaxis={"title": "peak GiB per GPU (line: GPU memory)", "range": [0, top], "tickvals": [0, chosen]},
        yaxis={"autorange": "reversed", "type": "category"},
        showlegend=False,
    )
    return figure
