"""The Gradients lab's figures and tables, drawn from recorded results (no torch runs here).

Gradient norms span many orders of magnitude, so the norm axes are logarithmic. A log axis
cannot show 0 or None: such layers are drawn as labelled markers on the axis floor. Titles
are short enough for a 600 px wide figure; nothing here is in bytes.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from explorers import chartroom
from explorers.gradients.clipping import Clipping, Training
from explorers.gradients.experiment import Accumulation, ScaleSweep
from explorers.gradients.your_model import Diagnosis

FONT_SIZE = 16
TITLE_SIZE = 19
STATUS_COLOURS = {"finite": "#1f77b4", "zero": "#ff9f1c", "none": "#d62728", "nonfinite": "#7f0000"}
LABEL_ROW_PX = 62  # two lines of a label at the presenting font, and a gap
STATUS_TEXT = {"finite": "", "zero": "0", "none": "None", "nonfinite": "inf/nan"}


def _style(figure: go.Figure, title: str, height: int = 420) -> go.Figure:
    """Title, size, and the legend below the axis title (ui.figures plans its room, then the caption's)."""
    figure.update_layout(
        title={"text": title, "font": {"size": TITLE_SIZE}},
        font={"size": FONT_SIZE},
        height=height,
        margin={"t": 70, "l": 70, "r": 20, "b": 60},
        legend=chartroom.LEGEND_BELOW,
    )
    return figure


def _floor(values: list[float]) -> float:
    """A value one decade below the smallest positive finite one: where 0 and None are drawn on a log axis."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    return 10 ** (math.floor(math.log10(min(positive))) - 1) if positive else 1e-3


def layer_norms_figure(diagnosis: Diagnosis) -> go.Figure:
    """Gradient norm per layer, forward order, log scale; None, 0 and inf/nan layers marked on the floor."""
    layers = diagnosis.layers
    names = [layer.label for layer in layers]
    floor = _floor([layer.grad_norm for layer in layers])
    finite = [layer.status == "finite" for layer in layers]
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=names,
            y=[layer.grad_norm if ok else None for layer, ok in zip(layers, finite, strict=True)],
            mode="lines+markers",
            name="‖grad‖",
            line={"width": 3, "color": STATUS_COLOURS["finite"]},
            marker={"size": 11},
            connectgaps=False,
        )
    )
    others = [layer for layer in layers if layer.status != "finite"]
    if others:
        figure.add_trace(
            go.Scatter(
                x=[layer.label for layer in others],
                y=[floor] * len(others),
                mode="markers+text",
                name="no usable gradient",
                text=[STATUS_TEXT[layer.status] for layer in others],
                textposition="top center",
                marker={"size": 14, "symbol": "x", "color": [STATUS_COLOURS[layer.status] for layer in others]},
            )
        )
    figure.update_yaxes(type="log", title="gradient norm", exponentformat="power")
    figure.update_xaxes(title="layer (forward order)", type="category")
    return _style(figure, "Gradient norm per layer (log scale)")


def status_table(diagnosis: Diagnosis) -> pd.DataFrame:
    """One row per parameter: what backward gave it."""
    return pd.DataFrame(
        [
            {
                "parameter": p.name,
                "shape": str(p.shape),
                "requires_grad": p.requires_grad,
                "read in forward": p.read_in_forward,
                ".grad": {"none": "None", "zero": "zeros", "finite": "values", "nonfinite": "inf/nan"}[p.status],
                "‖grad‖": None if p.status == "none" else p.norm,  # no number at all, not 0
                "‖weight‖": p.weight_norm,
            }
            for p in diagnosis.parameters.values()
        ]
    )


def layer_table(diagnosis: Diagnosis) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "layer": layer.label,
                "gradient": layer.status,
                "‖grad‖": None if layer.status == "none" else layer.grad_norm,  # no number at all, not 0
                "‖weight‖": layer.weight_norm,
                "‖grad‖ / ‖weight‖": None if layer.status == "none" else layer.ratio,
            }
            for layer in diagnosis.layers
        ]
    )


def sweep_figure(sweep: ScaleSweep) -> go.Figure:
    """Per-layer gradient norms at each initial scale: finite norms move; None, 0 and inf/nan are labelled markers."""
    floor = _floor([n for p in sweep.points for n in p.layer_norms])
    figure = go.Figure()
    for point in sweep.points:
        statuses = point.layer_statuses or tuple("finite" for _ in point.layer_names)
        shown = [s == "finite" and n > 0 and math.isfinite(n) for s, n in zip(statuses, point.layer_norms, strict=True)]
        figure.add_trace(
            go.Scatter(
                x=list(point.layer_names),
                y=[n if ok else None for n, ok in zip(point.layer_norms, shown, strict=True)],
                mode="lines+markers",
                name=f"init scale {point.init_scale:g}",
                line={"width": 3},
                marker={"size": 10},
                connectgaps=False,
                legendgroup=f"{point.init_scale:g}",
            )
        )
        others = [(name, status) for name, status, ok in zip(point.layer_names, statuses, shown, strict=True) if not ok]
        if others:
            figure.add_trace(
                go.Scatter(
                    x=[name for name, _ in others],
                    y=[floor] * len(others),
                    mode="markers+text",
                    name=f"init scale {point.init_scale:g}: no usable gradient",
                    text=[STATUS_TEXT[status] for _, status in others],
                    textposition="top center",
                    marker={"size": 14, "symbol": "x", "color": [STATUS_COLOURS[status] for _, status in others]},
                    legendgroup=f"{point.init_scale:g}",
                    showlegend=False,
                )
            )
    figure.update_yaxes(type="log", title="gradient norm", exponentformat="power")
    figure.update_xaxes(title="layer (None, 0 and inf/nan marked on the floor)", type="category")
    return _style(figure, "Gradient norm per layer at three scales")


def clipping_figure(study: Clipping) -> go.Figure:
    """Per-layer norms before and after clip_grad_norm_: the bars drop together, their ratios stay."""
    figure = go.Figure()
    for name, values, colour in (
        ("before clipping", study.layer_before, "#d62728"),
        (f"after (max_norm {study.max_norm:g})", study.layer_after, "#2ca02c"),
    ):
        figure.add_trace(go.Bar(x=list(study.layer_names), y=list(values), name=name, marker_color=colour))
    figure.update_yaxes(type="log", title="gradient norm", exponentformat="power")
    figure.update_xaxes(title="layer", type="category")
    return _style(figure, "Per-layer norm, before and after clipping")


def training_figure(training: Training) -> go.Figure:
    """Loss per step with and without clipping; where the loss stops being finite, a gap and a labelled line.

    A non-finite loss has no place on a log axis: the trace leaves a gap there, and a dotted vertical line at
    that step carries the label ("nan at step 1 / stopped", in the run's colour) at the top or the bottom of the
    chart, whichever the curves leave free beside the line, not at any loss value: on the side of the line with
    more room, one label under the other. Where both runs lost the same (step 0), the run without clipping has
    the larger marker: it rings the other's rather than hide under it.
    """
    figure = go.Figure()
    at_top = _top_is_free(training)
    for row, (name, losses, others, colour) in enumerate(
        (
            ("no clipping", training.losses_plain, training.losses_clipped, "#d62728"),
            (f"clip_grad_norm_ at {training.max_norm:g}", training.losses_clipped, training.losses_plain, "#2ca02c"),
        )
    ):
        figure.add_trace(
            go.Scatter(
                x=list(range(len(losses))),
                y=[v if math.isfinite(v) else None for v in losses],
                mode="lines+markers",
                name=name,
                line={"width": 3, "color": colour},
                marker={"size": [18 if row == 0 and others[i : i + 1] == (v,) else 7 for i, v in enumerate(losses)]},
                connectgaps=False,
            )
        )
        broken = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
        if broken is not None:
            figure.add_shape(
                type="line", x0=broken, x1=broken, y0=0, y1=1, yref="paper", line={"dash": "dot", "color": colour}
            )
            figure.add_annotation(
                x=broken,
                y=1 if at_top else 0,
                yref="paper",
                yanchor="top" if at_top else "bottom",
                yshift=-LABEL_ROW_PX * row if at_top else LABEL_ROW_PX * row,
                text=f"{losses[broken]} at step {broken}<br>stopped",
                showarrow=False,
                xanchor="left" if broken < (training.steps - 1) / 2 else "right",
                xshift=6 if broken < (training.steps - 1) / 2 else -6,  # clear of the line
                align="left",
                font={"color": colour},
            )
    figure.update_yaxes(type="log", title="loss", exponentformat="power")
    figure.update_xaxes(title="step", range=[-0.5, training.steps - 0.5])
    return _style(figure, "Loss with and without clipping")


def _top_is_free(training: Training) -> bool:
    """Whether the labels of a stopped run go at the top: no loss beside the first stop lies in the plot's upper
    part (log scale), or the lower part is taken too. Beside: the third of the steps on the label's side."""
    runs = (training.losses_plain, training.losses_clipped)
    broken = min((i for losses in runs for i, v in enumerate(losses) if not math.isfinite(v)), default=None)
    finite = [v for losses in runs for v in losses if math.isfinite(v) and v > 0]
    if broken is None or len(finite) < 2 or max(finite) == min(finite):
        return True
    low, high = math.log10(min(finite)), math.log10(max(finite))
    span = max(1, training.steps // 3)
    steps = range(broken, broken + span + 1) if broken < (training.steps - 1) / 2 else range(broken - span, broken + 1)
    beside = [
        (math.log10(v) - low) / (high - low)
        for losses in runs
        for i, v in enumerate(losses)
        if i in steps and math.isfinite(v) and v > 0
    ]
    return not beside or max(beside) <= 0.6 or min(beside) < 0.4


def accumulation_figure(accumulation: Accumulation) -> go.Figure:
    """‖.grad‖ batch by batch without zero_grad, against each batch's own gradient and k × the first."""
    batches = list(range(1, accumulation.k + 1))
    first = accumulation.batch_norms[0]
    figure = go.Figure()
    figure.add_trace(
        go.Bar(
            x=batches, y=list(accumulation.accumulated_norms), name="‖.grad‖ without zero_grad", marker_color="#d62728"
        )
    )
    figure.add_trace(
        go.Scatter(
            x=batches,
            y=list(accumulation.batch_norms),
            mode="lines+markers",
            name="this batch alone (with zero_grad)",
            line={"width": 3, "color": "#1f77b4"},
        )
    )
    figure.add_trace(
        go.Scatter(
            x=batches,
            y=[i * first for i in batches],
            mode="lines",
            name="k × the first batch",
            line={"dash": "dot", "color": "#555"},
        )
    )
    figure.update_xaxes(title="batches since the last zero_grad", dtick=1)
    figure.update_yaxes(title="gradient norm")
    return _style(figure, "‖.grad‖ without zero_grad, batch by batch")
