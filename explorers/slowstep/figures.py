"""The slow-step lab's figures and table, drawn from a measured run (no torch runs here)."""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go

from explorers import chartroom
from explorers.profiler.figures import PHASE_COLOURS
from explorers.slowstep.measure import PHASES, Evidence, EvidenceRun, FixRun
from explorers.units import ms

LANES = {"phase": "phases", "operator": "operators"}


def phases_figure(evidence: Evidence, title: str = "Milliseconds per step, by phase") -> go.Figure:
    """One bar per phase, in the step's order: the phase bars the learner can pick as evidence."""
    values = [evidence.phases[p] for p in PHASES]
    figure = go.Figure(
        go.Bar(
            y=list(PHASES), x=values, orientation="h", marker_color=[PHASE_COLOURS[p] for p in PHASES],
            text=[f"{ms(v)} ms" for v in values], textposition="auto", showlegend=False,
        )
    )  # fmt: skip
    figure.update_layout(xaxis_title="ms per step", yaxis={"autorange": "reversed"})
    return chartroom.style(figure, title, height=340)


def comparison_figure(slow: dict[str, float], other: dict[str, float], names: tuple[str, str], title: str) -> go.Figure:
    """Two loops' phases side by side (the slow loop against the correct one, or against a fix)."""
    figure = go.Figure()
    for name, values, pattern in ((names[0], slow, ""), (names[1], other, "/")):
        figure.add_trace(
            go.Bar(
                name=name, y=list(PHASES), x=[values[p] for p in PHASES], orientation="h",
                marker={"color": [PHASE_COLOURS[p] for p in PHASES], "pattern_shape": pattern},
                text=[f"{ms(values[p])}" for p in PHASES], textposition="auto",
            )
        )  # fmt: skip
    figure.update_layout(barmode="group", xaxis_title="ms per step", yaxis={"autorange": "reversed"})
    return chartroom.style(figure, title, height=420)


def fix_figure(run: FixRun) -> go.Figure:
    medians = {which: {p: run.blocks.typical(which, p) for p in PHASES} for which in ("slow", "other")}
    return comparison_figure(
        medians["slow"], medians["other"], ("the loop", "with your fix"), "Your fix against the loop"
    )


def breakable(name: str) -> str:
    """An operator's name with a zero-width break after each "#", "." and "(": a profiler label such as
    enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ is one word a table could not wrap."""
    return re.sub(r"([#.(])", "\\1\u200b", name)


def ops_table(evidence: Evidence) -> pd.DataFrame:
    """The operators with the largest self time per step, and each phase's own Python time, as rows to pick."""
    return pd.DataFrame(
        [
            {"operator": breakable(r.name), "inputs": r.inputs or "–", "phase": r.phase,
             "calls/step": round(r.calls), "self ms/step": round(r.self_ms, 3)}
            for r in evidence.ops
        ]
    )  # fmt: skip


def timeline_figure(evidence: Evidence) -> go.Figure:
    """One profiled step (the median): its phases, and the operators each phase called directly."""
    figure = go.Figure()
    for phase in PHASES:
        spans = [s for s in evidence.timeline if s.lane == "phase" and s.name == phase]
        figure.add_trace(
            go.Bar(
                name=phase, y=[LANES["phase"]] * len(spans), x=[s.end_ms - s.start_ms for s in spans],
                base=[s.start_ms for s in spans], orientation="h", marker_color=PHASE_COLOURS[phase],
            )
        )  # fmt: skip
    ops = [s for s in evidence.timeline if s.lane == "operator"]
    figure.add_trace(
        go.Bar(
            name="operators", y=[LANES["operator"]] * len(ops), x=[s.end_ms - s.start_ms for s in ops],
            base=[s.start_ms for s in ops], orientation="h", marker_color="#7f7f7f", hovertext=[s.name for s in ops],
            hoverinfo="text+x",
        )
    )  # fmt: skip
    figure.update_layout(barmode="overlay", xaxis_title="ms since the step began", yaxis={"autorange": "reversed"})
    return chartroom.style(figure, f"One step's timeline ({ms(evidence.step_ms)} ms, profiled)", height=300)


def correct_figure(run: EvidenceRun) -> go.Figure:
    return comparison_figure(
        run.evidence.phases, run.correct.phases, ("the loop", "the correct loop"), "The loop against the correct loop"
    )
