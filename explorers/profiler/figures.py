"""The Profiler lab's figures and tables, drawn from a `ProfileResult` (no torch runs here)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from explorers.profiler.your_model import PHASES, ProfileResult

PHASE_COLOURS = {
    "data": "#9467bd",
    "copy": "#8c564b",
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "optimizer": "#2ca02c",
    "other": "#c7c7c7",
}


def phases_figure(result: ProfileResult, title: str = "Milliseconds per step, by phase") -> go.Figure:
    """Stacked bars: warm-up steps (perf_counter) first, then the active steps (profiler)."""
    steps = [*result.warmup_steps, *result.steps]
    labels = [f"warm-up {i + 1}" for i in range(len(result.warmup_steps))]
    labels += [f"step {i + 1}" for i in range(len(result.steps))]
    figure = go.Figure()
    for phase in (*PHASES, "other"):
        values = [s.other_ms if phase == "other" else s.phases[phase] for s in steps]
        figure.add_trace(go.Bar(name=phase, x=labels, y=values, marker_color=PHASE_COLOURS[phase]))
    if result.warmup_steps:
        figure.add_vrect(
            x0=-0.5,
            x1=len(result.warmup_steps) - 0.5,
            fillcolor="#eeeeee",
            opacity=0.5,
            line_width=0,
            annotation_text="warm-up",
            annotation_position="top left",
        )
    figure.update_layout(barmode="stack", title=title, yaxis_title="ms", height=420, legend={"orientation": "h"})
    return figure


def timeline_figure(result: ProfileResult) -> go.Figure:
    """A Gantt of the active steps: where each phase starts and ends, from the profiler's events."""
    figure = go.Figure()
    for phase in PHASES:
        spans = [(start, end) for step in result.steps for name, start, end in step.spans if name == phase]
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
        title="Timeline of the active steps",
        xaxis_title="ms since the first active step",
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
    """Per active step: the profiler's wall time, the phases it explains, and a plain perf_counter stopwatch."""
    return pd.DataFrame(
        [
            {
                "step": i + 1,
                "profiler ms": round(step.wall_ms, 2),
                "phases ms": round(sum(step.phases.values()), 2),
                "stopwatch ms": round(naive, 2),
            }
            for i, (step, naive) in enumerate(zip(result.steps, result.naive_ms, strict=True))
        ]
    )
