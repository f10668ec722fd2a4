"""The Reproducibility lab's figures and tables, drawn from recorded runs (no torch runs here).

Runs that are bitwise equal draw on top of each other, so each run gets its own dash pattern
and marker: an exact overlay still shows every run. Steps count from 0. Titles are short
enough for a half-width chart.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

import explorers.reproducibility.lesson as lesson
from explorers import chartroom, units
from explorers.reproducibility.experiment import COMPONENTS, CompareOptions, Comparison, ResumeResult

TITLE_SIZE = 19
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
MARKERS = ("circle", "x", "triangle-up", "square", "diamond")
SEEDED_NAMES = ("torch", "numpy", "random", "workers")
SEEDED_FLAGS = ("seed_torch", "seed_numpy", "seed_python", "seed_workers")
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


def _style(figure: go.Figure, title: str, height: int = 400) -> go.Figure:
    """Title, height, and the legend below the axis title (ui.figures plans its room, then the caption's)."""
    figure.update_layout(
        title={"text": title, "font": {"size": TITLE_SIZE}},
        height=height,
        margin={"t": 70, "l": 70, "r": 20, "b": 60},
        legend=chartroom.LEGEND_BELOW,
    )
    return figure


def caption_settings(options: CompareOptions) -> dict[str, object]:
    """What a caption names: the settings that produced the figure."""
    seeded = [name for name, on in zip(SEEDED_NAMES, SEEDED_FLAGS, strict=True) if getattr(options, on)]
    return {
        "runs": options.runs,
        "seeded": ", ".join(seeded) or "nothing",
        "deterministic": "on" if options.deterministic else "off",
        "workers": options.num_workers,
        "steps": options.steps,
        "seed": options.seed,
        "augmentation": options.augmentation,
    }


def loss_figure(c: Comparison) -> go.Figure:
    figure = go.Figure()
    for index, losses in enumerate(c.losses):
        figure.add_trace(
            go.Scatter(
                x=list(range(len(losses))),
                y=losses,
                mode="lines+markers",
                name=f"run {index + 1}",
                line={"dash": DASHES[index], "width": 4 if index == 0 else 2, "color": COLOURS[index]},
                marker={"symbol": MARKERS[index], "size": 7},
            )
        )
    figure.update_xaxes(title="step")
    figure.update_yaxes(title="training loss")
    return _style(figure, f"Loss per step, {c.options.runs} fresh runs")


def difference_figure(c: Comparison) -> go.Figure:
    """|loss − run 1's loss| per step, for every other run; an all-zero chart says so in words."""
    figure = go.Figure()
    differences = c.loss_differences()
    for index, gaps in enumerate(differences, start=1):
        figure.add_trace(
            go.Scatter(
                x=list(range(len(gaps))),
                y=gaps,
                mode="lines+markers",
                name=f"run {index + 1}",
                line={"dash": DASHES[index], "color": COLOURS[index]},
                marker={"symbol": MARKERS[index], "size": 7},
            )
        )
    if all(gap == 0 for gaps in differences for gap in gaps):
        figure.update_yaxes(range=[-0.05, 1])
        figure.add_annotation(
            text="every difference is exactly 0", xref="paper", yref="paper", x=0.5, y=0.6, showarrow=False
        )
    if c.first_divergent_step is not None:
        figure.add_vline(x=c.first_divergent_step, line={"dash": "dot", "color": "#888"})
    figure.update_xaxes(title="step")
    figure.update_yaxes(title="|loss − run 1's loss|")
    return _style(figure, "Loss difference from run 1")


def components_table(c: Comparison) -> pd.DataFrame:
    first = c.component_first_difference
    return pd.DataFrame(
        [
            {
                "what the source produced": name,
                "same in every run": "yes" if first[name] is None else "no",
                "first step that differs": "–" if first[name] is None else str(first[name]),
            }
            for name in COMPONENTS
        ]
    )


def runs_table(c: Comparison) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "run": index + 1,
                "final loss": f"{run.losses[-1]:.6f}",
                "parameters digest": run.parameters_digest,
                "process start (s)": round(run.start_s, 2),
                "whole run (s)": round(run.total_s, 2),
            }
            for index, run in enumerate(c.runs)
        ]
    )


def draws_table(c: Comparison) -> pd.DataFrame:
    """Run 1's first two batches: which worker made each sample, and the scale it drew."""
    rows = []
    for step, samples in enumerate(c.runs[0].first_draws):
        worker = samples[0][0]
        rows.append(
            {
                "step": step,
                "made by": "main process" if worker < 0 else f"worker {worker}",
                "first scales drawn": ", ".join(f"{scale:.4f}" for _, scale in samples[:4]) + ", …",
            }
        )
    return pd.DataFrame(rows)


def resume_figure(r: ResumeResult) -> go.Figure:
    k = r.options.checkpoint_at
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=list(range(len(r.straight_losses))),
            y=r.straight_losses,
            mode="lines+markers",
            name="straight through",
            line={"width": 4, "color": COLOURS[0]},
        )
    )
    for index, run in enumerate(r.resumed, start=1):
        figure.add_trace(
            go.Scatter(
                x=list(range(k, k + len(run.losses))),
                y=run.losses,
                mode="lines+markers",
                name=lesson.variant_name(run),
                line={"dash": DASHES[index % len(DASHES)], "color": COLOURS[index % len(COLOURS)]},
                marker={"symbol": MARKERS[index % len(MARKERS)], "size": 7},
            )
        )
    figure.add_vline(x=k - 0.5, line={"dash": "dot", "color": "#888"})
    figure.add_annotation(
        x=k - 0.5, y=1, yref="paper", yanchor="top", text="checkpoint", showarrow=False, xanchor="right"
    )
    figure.update_xaxes(title="step")
    figure.update_yaxes(title="training loss")
    return _style(figure, f"Straight through vs resumed after {lesson.plural_steps(k)}", height=480)


def resume_table(r: ResumeResult) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "resumed": lesson.variant_name(run),
                "bitwise equal": "yes" if run.equal else "no",
                "first step that differs": "–" if run.first_divergent_step is None else str(run.first_divergent_step),
                "max |Δ loss|": units.format_number(run.max_loss_diff),
                "max |Δ parameter|": units.format_number(run.max_param_diff),
            }
            for run in r.resumed
        ]
    )


def manifest_table(differences) -> pd.DataFrame:
    return pd.DataFrame([{"field": d.field, "left": d.left, "right": d.right} for d in differences])
