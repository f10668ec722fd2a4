"""The Profiler lab's figures and tables, drawn from a `ProfileResult` (no torch runs here)."""

from __future__ import annotations

import statistics

import pandas as pd
import plotly.graph_objects as go

from explorers import chartroom
from explorers.profiler.your_model import PHASES, ProfileResult, StepTiming
from explorers.units import ms

OUTLIER_FACTOR = 3  # a step longer than 3x the median step would flatten the others: its bar is cut and marked
HEADROOM = 1.1

PHASE_COLOURS = {
    "data": "#9467bd",
    "copy": "#8c564b",
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "optimizer": "#2ca02c",
    "other": "#c7c7c7",
}


def _bar_height(step: StepTiming) -> float:
    return sum(step.phases.values()) + step.other_ms


def axis_top(*results: ProfileResult) -> float:
    """One y-axis top for these results' charts, so they compare at a glance: the longest typical step fits.

    A step over `OUTLIER_FACTOR` times its run's median step is an outlier (a first step's
    one-off costs, a hiccup of the machine); it is drawn cut at the top and labelled with its length.
    """
    typical_tops = []
    for result in results:
        heights = [_bar_height(s) for s in (*result.warmup_steps, *result.steps)]
        median = statistics.median(heights)
        typical_tops.append(max(h for h in heights if h <= OUTLIER_FACTOR * median))
    return HEADROOM * max(typical_tops)


MARKER_PX = 12  # a cut bar's marker


def phases_figure(
    result: ProfileResult, title: str = "Milliseconds per step, by phase", top: float | None = None
) -> go.Figure:
    """Stacked bars: warm-up steps (perf_counter) first, then the profiled steps, round by round.

    `top` fixes the y-axis (pass the same `axis_top` to charts that are compared); bars above it are marked.
    """
    steps = [*result.warmup_steps, *result.steps]
    per_round = result.steps_per_round
    # Short, level labels (round.step): rotated long ones were cut off and ran into the legend.
    labels = [f"w{i + 1}" for i in range(len(result.warmup_steps))]
    labels += [f"{i // per_round + 1}.{i % per_round + 1}" for i in range(len(result.steps))]
    top = top or axis_top(result)
    figure = go.Figure()
    for phase in (*PHASES, "other"):
        values = [s.other_ms if phase == "other" else s.phases[phase] for s in steps]
        figure.add_trace(go.Bar(name=phase, x=labels, y=values, marker_color=PHASE_COLOURS[phase]))
    # At the bar's index: plotly reads a category written like a number ("1.4") as that number, not as the name.
    cut = [(at, height) for at, step in enumerate(steps) if (height := _bar_height(step)) > top]
    cut_at, lowered = {at for at, _ in cut}, set()
    for at, height in cut:
        text = f"▲ {ms(height)}"
        # Upright and small. Two cut bars side by side on a phone are about 20 px apart, as wide as an upright
        # marker: the second of two neighbours stands lower, one marker's length down.
        drop = 0
        if at - 1 in cut_at and at - 1 not in lowered:
            drop = round(len(text) * 0.6 * MARKER_PX) + 8
            lowered.add(at)
        figure.add_annotation(
            x=at,
            y=top,
            text=text,
            showarrow=False,
            yanchor="top",
            yshift=-drop,
            textangle=-90,
            font={"size": MARKER_PX},
        )
    subtitle = f"axis cut at {ms(top)} ms: {len(cut)} longer step(s) marked ▲" if cut else ""
    if result.warmup_steps:
        figure.add_vrect(
            x0=-0.5,
            x1=len(result.warmup_steps) - 0.5,
            fillcolor="#eeeeee",
            opacity=0.5,
            line_width=0,
        )
    figure.update_layout(
        barmode="stack",
        title={"text": title, "subtitle": {"text": subtitle}},
        yaxis={"title": "ms", "range": [0, top]},
        xaxis={
            "title": "step (w: warm-up; round.step: profiled)",
            "tickangle": 0,
            "type": "category",
            # every bar labelled ran the labels into each other at 1280 px: the first warm-up step and each
            # round's first step, by index (as the markers above)
            "tickvals": (firsts := sorted({0, *range(len(result.warmup_steps), len(steps), per_round)})),
            "ticktext": [labels[at] for at in firsts],
        },
        height=460,
        margin={"t": 90, "l": 70, "r": 20},
        # under the plot (beside it, it would take a phone's chart half its width), in the stack's order
        legend={**chartroom.LEGEND_BELOW, "traceorder": "reversed"},
    )
    return figure


def timeline_figure(result: ProfileResult) -> go.Figure:
    """A Gantt of the last round's profiled steps (the ones in the Chrome trace), from the profiler's events."""
    figure = go.Figure()
    for phase in PHASES:
        spans = [(start, end) for step in result.last_round for name, start, end in step.spans if name == phase]
        figure.add_trace(
            go.Bar(
                name=phase,
                y=[phase] * len(spans),
                x=[end - start for start, end in spans],
                base=[start for start, _ in spans],
                orientation="h",
                marker_color=PHASE_COLOURS[phase],
                showlegend=False,
            )
        )
    figure.update_layout(
        title="Timeline of the last round's profiled steps",
        xaxis_title="ms since that round's first profiled step",
        yaxis={"autorange": "reversed"},
        height=320,
        barmode="overlay",
    )
    return figure


def top_ops_table(result: ProfileResult) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"operator": op.name, "calls": op.calls, "self ms": op.self_ms, "total ms": op.total_ms}
            for op in result.top_ops
        ]
    )


def timing_table(result: ProfileResult) -> pd.DataFrame:
    """Per profiled step: the profiler's wall time, the phases it explains, and a plain perf_counter stopwatch."""
    per_round = result.steps_per_round
    return pd.DataFrame(
        [
            {
                "round": i // per_round + 1,
                "step": i % per_round + 1,
                "profiler ms": round(step.wall_ms, 2),
                "phases ms": round(sum(step.phases.values()), 2),
                "stopwatch ms": round(naive, 2),
            }
            for i, (step, naive) in enumerate(zip(result.steps, result.naive_ms, strict=True))
        ]
    )
