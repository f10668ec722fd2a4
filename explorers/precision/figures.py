"""The precision lab's figures, drawn from results (no torch here).

The main figure is the loss at every step in each precision, from the same weights on the same
batches (a nan or inf loss leaves a gap, counted in the title). Below it: GradScaler's scale per
step, on a log axis, with the skipped steps marked; and per layer, at the first step, the inf and
nan outputs and the underflowed gradient values of each precision.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from explorers import chartroom
from explorers.precision.experiment import LAYERS, PrecisionResult
from explorers.precision.lesson import NAMES

COLOURS = {"fp32": "#7f7f7f", "bf16": "#2ca02c", "fp16": "#d62728", "fp16 + GradScaler": "#1f77b4"}
DASHES = {"fp32": "solid", "bf16": "dash", "fp16": "dot", "fp16 + GradScaler": "dashdot"}


COINCIDE = 0.005  # two curves this close at every step (a share of the drawn loss range) are one line on screen


def _coincides_with(losses: tuple[float, ...], drawn: dict[str, tuple[float, ...]], span: float) -> tuple[str, float]:
    """The first precision already drawn whose curve this one lies on, and the largest gap between them."""
    for other, theirs in drawn.items():
        pairs = list(zip(losses, theirs, strict=True))
        if pairs and all(math.isfinite(a) and math.isfinite(b) for a, b in pairs):
            gap = max(abs(a - b) for a, b in pairs)
            if gap <= COINCIDE * span:
                return other, gap
    return "", 0.0


def loss_figure(result: PrecisionResult) -> go.Figure:
    """Each precision's loss per step. A curve that lies on another's says so in its name (with the largest gap),
    and a step whose loss was nan or inf is marked along the top, on an axis of its own: no loss value is made up
    for it."""
    figure = go.Figure()
    finite = [v for run in result.runs.values() for v in run.losses if math.isfinite(v)]
    span = (max(finite) - min(finite)) if finite else 0.0
    drawn: dict[str, tuple[float, ...]] = {}
    missing, rows = 0, 0  # rows: one row of marks per precision with nan or inf, so two never hide each other
    for precision, run in result.runs.items():
        values = [v if math.isfinite(v) else None for v in run.losses]
        steps = list(range(1, len(values) + 1))
        on, gap = _coincides_with(run.losses, drawn, span)
        apart = "identical" if gap == 0 else f"≤ {gap:.1g} apart"
        name = NAMES[precision] + (f" (≈ {NAMES[on]}, {apart})" if on else "")
        drawn[precision] = run.losses
        figure.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                mode="lines+markers",
                name=name,
                line={"width": 3, "color": COLOURS[precision], "dash": DASHES[precision]},
                marker={"size": 6},
            )
        )
        bad = [(i, v) for i, v in enumerate(run.losses, 1) if not math.isfinite(v)]
        missing += len(bad)
        if bad:
            figure.add_trace(
                go.Scatter(
                    x=[i for i, _ in bad],
                    y=[0.95 - 0.06 * rows] * len(bad),
                    yaxis="y2",
                    mode="markers",
                    name=f"{NAMES[precision]}: nan or inf",
                    marker={"symbol": "x", "size": 11, "color": COLOURS[precision]},
                    hovertext=[f"step {i}: {v}" for i, v in bad],
                    hoverinfo="text",
                )
            )
            rows += 1
    figure.update_xaxes(title="step")
    figure.update_yaxes(title="cross-entropy")
    if missing:  # the marks get a band of their own above the finite losses: they never sit on a curve
        figure.update_layout(yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True})
        if finite:
            low, high = min(finite), max(finite)
            room = (high - low) or abs(high) or 1.0
            figure.update_yaxes(range=[low - 0.05 * room, high + (0.1 + 0.06 * rows) / 0.75 * room])
    title = "Loss per step, same weights and batches"
    if missing:
        title += f" ({missing} nan or inf, marked × along the top)"
    return chartroom.style(figure, title)


def scale_figure(result: PrecisionResult) -> go.Figure:
    run = result.run("fp16 + GradScaler")
    steps = list(range(1, len(run.scales) + 1))
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=steps, y=[before for before, _ in run.scales], mode="lines+markers", name="scale at the step",
            line={"width": 3, "color": COLOURS["fp16 + GradScaler"]},
        )
    )  # fmt: skip
    skipped = run.skipped_steps
    if skipped:
        figure.add_trace(
            go.Scatter(
                x=skipped, y=[run.scales[i - 1][0] for i in skipped], mode="markers", name="step skipped",
                marker={"symbol": "x", "size": 13, "color": COLOURS["fp16"]},
            )
        )  # fmt: skip
    values = [v for pair in run.scales for v in pair if v > 0] or [1.0]
    low, high = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    # one tick per power of ten, over at least two decades: a scale that never moves gets no crowd of minor ticks
    figure.update_yaxes(
        type="log", title="loss scale", exponentformat="power", dtick=1, range=[low - 1, max(high, low + 1) + 0.2]
    )
    figure.update_xaxes(title="step")
    return chartroom.style(figure, f"GradScaler's scale: {len(skipped)} of {len(steps)} steps skipped")


def layer_figure(result: PrecisionResult) -> go.Figure:
    figure = go.Figure()
    for precision in ("bf16", "fp16", "fp16 + GradScaler"):
        run = result.run(precision)
        figure.add_trace(
            go.Bar(
                x=list(LAYERS),
                y=[run.layers[layer].grad_underflow for layer in LAYERS],
                name=f"{NAMES[precision]}: underflowed grads",
                marker_color=COLOURS[precision],
            )
        )
        figure.add_trace(
            go.Bar(
                x=list(LAYERS),
                y=[run.layers[layer].inf + run.layers[layer].nan for layer in LAYERS],
                name=f"{NAMES[precision]}: inf or nan outputs",
                marker={"color": COLOURS[precision], "pattern": {"shape": "/"}},
            )
        )
    figure.update_layout(barmode="group")
    figure.update_yaxes(title="values at step 1", rangemode="tozero")
    figure.update_xaxes(title="layer")
    return chartroom.style(figure, "Per layer at step 1: overflow and underflow", height=460)


PART_COLOURS = {
    "parameters": "#1f77b4",
    "gradients": "#ff7f0e",
    "activations": "#2ca02c",
    "weight_copies": "#9467bd",
    "batch": "#8c564b",
}


def memory_figure(parts: dict[str, dict[str, int]]) -> go.Figure:
    """Bytes per part of one steady step, stacked per precision (the Memory lab's categories)."""
    precisions = list(parts)
    figure = go.Figure()
    for part, colour in PART_COLOURS.items():
        figure.add_trace(
            go.Bar(
                x=precisions,
                y=[parts[p][part] / 1024 for p in precisions],
                name=part.replace("_", " "),
                marker_color=colour,
            )
        )
    figure.update_layout(barmode="stack")
    figure.update_yaxes(title="KiB in one steady step", rangemode="tozero")
    return chartroom.style(figure, "Memory per part, by precision")
