"""The Memory lab's figures, drawn from measured points (no torch runs here).

Every axis picks the binary unit its largest value reads best in (B, KiB, MiB, GiB, TiB), and
hovering a bar or point shows its exact size in the same units the lesson uses.
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorers import chartroom
from explorers.memory.experiment import MemoryOptions, Point, budget_bytes
from explorers.memory.your_model import Measurement
from explorers.units import byte_axis_unit, format_bytes

# Title above the plot; tick labels, the axis title, the legend and the caption below it, each in
# room that ui.figures plans (b: the plot's planned height ends there).
MARGIN = {"t": 70, "l": 70, "r": 20, "b": 60}
TIMELINE_LABEL_CHARS = 10  # a moment's label per line: they stand upright where they do not fit side by side
HEADROOM = 1.3  # the timeline's axis above its highest peak, for that peak's label
STACKED = {  # Measurement attribute -> legend name, bottom to top
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations",
    "weight_copies": "weight copies",
    "batch": "batch",
}
CATEGORY_COLOURS = {
    "parameters": "#1f77b4",
    "gradients": "#ff7f0e",
    "optimizer_state": "#2ca02c",
    "activations": "#d62728",
    "weight_copies": "#9467bd",
    "batch": "#7f7f7f",
}


def _stacked_categories(points: tuple[Point, ...]) -> list[str]:
    """Every category, but weight copies only where autocast made some."""
    return [c for c in STACKED if c != "weight_copies" or any(p.result.weight_copies for p in points)]


def sweep_figure(points: tuple[Point, ...], options: MemoryOptions) -> go.Figure:
    """Each category stacked per batch size, with both steps' real peaks as markers.

    The stack can exceed the peaks: the categories are never all alive at the same moment.
    """
    labels = [f"{p.batch:,}" + ("" if p.measured else " (est.)") for p in points]
    categories = _stacked_categories(points)
    tallest = max(
        max(p.result.peak, p.result.first_step.peak, sum(getattr(p.result, c) for c in categories)) for p in points
    )
    budget = budget_bytes(options)
    draw_budget = tallest >= budget / 20  # only where it does not flatten every bar
    unit, scale = byte_axis_unit(max(tallest, budget) if draw_budget else tallest)
    figure = go.Figure()
    for category in categories:
        sizes = [getattr(p.result, category) for p in points]
        figure.add_trace(
            go.Bar(
                name=STACKED[category],
                x=labels,
                y=[size / scale for size in sizes],
                customdata=[format_bytes(size) for size in sizes],
                hovertemplate="%{customdata}",
                marker={
                    "color": CATEGORY_COLOURS[category],
                    "pattern": {"shape": ["" if p.measured else "/" for p in points]},
                    "line": {"width": [3 if p.batch == options.batch_size else 0 for p in points], "color": "black"},
                },
            )
        )
    for name, step, symbol in (("peak, step 2 on", "steady_step", "diamond"), ("peak, step 1", "first_step", "x")):
        peaks = [getattr(p.result, step).peak for p in points]
        figure.add_trace(
            go.Scatter(
                x=labels,
                y=[peak / scale for peak in peaks],
                customdata=[format_bytes(peak) for peak in peaks],
                hovertemplate="%{customdata}",
                mode="markers",
                name=name,
                marker={"symbol": symbol, "size": 13, "color": "black"},
            )
        )
    title = "Memory of a training step, by batch size"
    if draw_budget:
        figure.add_trace(
            go.Scatter(
                x=labels,
                y=[budget / scale] * len(points),
                mode="lines",
                name=f"{options.budget_gb} GiB device",
                line={"dash": "dash", "color": "#d62728"},
            )
        )
    else:
        title += f"<br><sub>all far below the {options.budget_gb} GiB device</sub>"
    figure.update_layout(
        barmode="stack",
        title=title,
        yaxis_title=unit,
        height=470,
        xaxis={
            "type": "category",  # "4", "8": numbers as text, one bar each, evenly spaced
            "title": "batch size"
            + (f", in {options.accumulation} micro-batches" if options.accumulation > 1 else "")
            + " (outlined: yours; hatched: estimated on fake tensors)",  # ui.figures wraps it to the plot
        },
        legend=chartroom.LEGEND_BELOW,  # beside the bars, nine entries would take a phone's chart half its width
        margin={"t": 90, "l": 70, "r": 20, "b": 60},
    )
    return figure


def timeline_figure(result: Measurement) -> go.Figure:
    """Live bytes at the moments of steps 1 and 2, and each step's peak (reached inside a phase).

    Each peak's label stands on the side of its line away from the other peak (the higher one above,
    the lower one below), so two close peaks do not print over each other; the axis leaves room above.
    """
    steps = {"step 1": result.first_step, "step 2 on": result.steady_step}
    highest = max(step.peak for step in steps.values())
    unit, scale = byte_axis_unit(highest)
    figure = go.Figure()
    for name, step in steps.items():
        figure.add_trace(
            go.Scatter(
                x=[_moment(moment) for moment, _ in step.timeline],
                y=[size / scale for _, size in step.timeline],
                customdata=[format_bytes(size) for _, size in step.timeline],
                hovertemplate="%{customdata}",
                name=name,
                mode="lines+markers",
                line={"shape": "hv", "width": 3, "dash": "dot" if name == "step 1" else "solid"},
                marker={"size": 10},
            )
        )
    first, steady = steps.values()
    peaks = {first.peak: "step 1", steady.peak: "step 2 on"}
    if first.peak == steady.peak:
        peaks = {first.peak: "steps 1 and 2"}
    for peak, whose in peaks.items():
        figure.add_hline(
            y=peak / scale,
            line_dash="dot",
            annotation_text=f"peak, {whose}: {format_bytes(peak)}",
            annotation_position="top left" if peak == highest else "bottom left",
        )
    figure.update_layout(
        title="Live memory through a training step",
        xaxis={"title": "after each phase of the step", "type": "category"},
        yaxis={"title": unit, "range": [0, HEADROOM * highest / scale]},
        height=420,
        legend=chartroom.LEGEND_BELOW,
        margin=MARGIN,
    )
    return figure


def _moment(moment: str) -> str:
    """'after optimizer step' -> 'optimizer<br>step': the axis title says "after"."""
    return chartroom.wrap(moment.removeprefix("after "), TIMELINE_LABEL_CHARS)


def retention_figure(curves: dict[str, list[int]]) -> go.Figure:
    unit, scale = byte_axis_unit(max(max(live) for live in curves.values()))
    figure = go.Figure()
    for name, live in curves.items():
        dash = "dot" if name.endswith("item()") else "solid"  # the two training loops overlap exactly
        figure.add_trace(
            go.Scatter(
                x=list(range(1, len(live) + 1)),
                y=[b / scale for b in live],
                customdata=[format_bytes(b) for b in live],
                hovertemplate="%{customdata}",
                name=name,
                mode="lines+markers",
                line={"dash": dash, "width": 3},
            )
        )
    figure.update_layout(
        title="Live memory after each step",
        xaxis_title="step",
        yaxis_title=unit,
        height=380,
        legend=chartroom.LEGEND_BELOW,
        margin=MARGIN,
    )
    return figure
