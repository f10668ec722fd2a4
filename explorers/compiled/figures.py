"""The compile lab's figures, drawn from results (no torch here).

The main figure is what dynamo did at each call: graphs compiled (bars) and compiled graphs
called (markers), so a recompile, automatic dynamic's one extra graph and the fall back to eager
after the recompile limit are each visible at the call where they happened. The payoff figure
is the time spent in all after n steps, eager and compiled, from the measured first step and the
measured steady steps; beyond the measured steps it is drawn dashed, at the measured means.
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorers import chartroom
from explorers.compiled.experiment import PayoffRun
from explorers.compiled.recompiles import Recompiles
from explorers.wording import two_figures

COMPILED, CALLED, EAGER = "#1f77b4", "#ff7f0e", "#7f7f7f"


def recompile_figure(r: Recompiles) -> go.Figure:
    calls = list(range(1, len(r.steps) + 1))
    figure = go.Figure()
    figure.add_trace(
        go.Bar(x=calls, y=[s.graphs_compiled for s in r.steps], name="graphs compiled", marker_color=COMPILED)
    )
    figure.add_trace(
        go.Scatter(
            x=calls,
            y=[s.graph_calls for s in r.steps],
            mode="lines+markers",
            name="compiled graphs called",
            line={"width": 3, "color": CALLED},
            marker={"size": 9},
        )
    )
    figure.update_xaxes(title="call (one batch each)", dtick=1 if len(calls) <= 12 else 2)
    figure.update_yaxes(title="graphs", rangemode="tozero", dtick=1)
    title = f"What dynamo did at each call: {r.graphs} compiled, dynamic={r.dynamic}"
    return chartroom.style(figure, title)


def payoff_figure(run: PayoffRun) -> go.Figure:
    """Seconds spent after n steps: the first step as measured, then the measured steady mean per step."""
    p = run.payoff
    measured = len(p.eager_ms) + 1
    horizon = max(measured, 2 * (p.break_even or 0))
    figure = go.Figure()
    for name, first_s, mean_ms, colour in (
        ("eager", p.first_eager_s, p.eager_mean_ms, EAGER),
        ("compiled", p.first_compiled_s, p.compiled_mean_ms, COMPILED),
    ):
        totals = [first_s + (n - 1) * mean_ms / 1e3 for n in range(1, horizon + 1)]
        figure.add_trace(
            go.Scatter(
                x=list(range(1, measured + 1)),
                y=totals[:measured],
                mode="lines",
                name=name,
                line={"width": 3, "color": colour},
            )
        )
        if horizon > measured:
            figure.add_trace(
                go.Scatter(
                    x=list(range(measured, horizon + 1)),
                    y=totals[measured - 1 :],
                    mode="lines",
                    name=f"{name}, at the measured mean",
                    line={"width": 2, "color": colour, "dash": "dash"},
                )
            )
    if p.break_even is not None:
        figure.add_vline(x=p.break_even, line={"dash": "dot", "color": "#2ca02c"})
    figure.update_xaxes(title="training steps")
    if p.first_compiled_s > 100 * (p.first_eager_s + measured * p.eager_mean_ms / 1e3):
        # a compile that dwarfs every step: on a linear axis the eager line would lie flat on zero
        figure.update_yaxes(title="seconds in all (log scale)", type="log", exponentformat="power", dtick=1)
    else:
        figure.update_yaxes(title="seconds in all", rangemode="tozero")
    title = "Time in all: compile once, then cheaper steps?"
    if p.break_even is not None:
        title = f"Time in all: compiling pays back after about {two_figures(p.break_even)} steps"
    return chartroom.style(figure, title)


def recompile_rows(r: Recompiles) -> list[dict]:
    return [
        {
            "call": i,
            "batch size": s.batch_size,
            "graphs compiled": s.graphs_compiled,
            "compiled graphs called": s.graph_calls,
            "guard that failed": " ".join(s.reasons[0].split()) if s.reasons else "",
        }
        for i, s in enumerate(r.steps, 1)
    ]
