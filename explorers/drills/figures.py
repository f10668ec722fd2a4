"""The Fix-the-loop lab's figures, drawn from recorded runs (no torch here).

The main figure is the logged loss per batch, the buggy loop's, with the correct loop's beside it
only once the answer is given (the page decides; a figure draws what it is handed). Below it the
three readings an engineer looks at next: ‖.grad‖ per layer at each step (log scale: a None or an
exact zero has no place on it and is counted in the title instead), live tensor bytes after each
forward, and accuracy per epoch.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from explorers import chartroom
from explorers.drills.experiment import LoopRun
from explorers.drills.harness import Recording
from explorers.drills.symptoms import METRIC_NAMES

FONT_SIZE = 16
TITLE_SIZE = 19
BUGGY, CORRECT, FIXED = "#d62728", "#2ca02c", "#1f77b4"
LAYER_COLOURS = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
PHASE_COLOURS = {"training": "#1f77b4", "validation": "#ff7f0e"}
LOG_RANGE = 50  # a loss curve whose largest value is this many times its smallest gets a log axis


def _style(figure: go.Figure, title: str, height: int = 380) -> go.Figure:
    figure.update_layout(
        title={"text": title, "font": {"size": TITLE_SIZE}},
        font={"size": FONT_SIZE},
        height=height,
        margin={"t": 70, "l": 70, "r": 20, "b": 60},
        legend=chartroom.LEGEND_BELOW,
    )
    return figure


def _finite(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def loss_figure(runs: list[tuple[str, LoopRun]]) -> go.Figure:
    """Each run's logged loss per batch, named as given: ("buggy loop", run), ("correct loop", run), ..."""
    colours = {"buggy loop": BUGGY, "correct loop": CORRECT}
    figure = go.Figure()
    shown: list[float] = []
    raised_first: list[str] = []
    for name, run in runs:
        losses = run.recording.losses
        shown += [v for v in losses if math.isfinite(v) and v > 0]
        figure.add_trace(
            go.Scatter(
                x=list(range(1, len(losses) + 1)),
                y=_finite(losses),
                mode="lines",
                name=name,
                line={"width": 3, "color": colours.get(name, FIXED), "dash": "solid" if name in colours else "dot"},
            )
        )
        if run.recording.error and losses:  # marked where it stopped, on the last loss it logged
            figure.add_trace(
                go.Scatter(
                    x=[len(losses)],
                    y=[losses[-1]],
                    mode="markers",
                    name=f"{name}: PyTorch raised",
                    marker={"symbol": "x", "size": 16, "color": colours.get(name, FIXED)},
                )
            )
        elif run.recording.error:  # nothing logged: no point to draw, and no made-up value to draw it at
            raised_first.append(name)
    if raised_first:
        figure.add_annotation(
            text="<br>".join(f"{name}: PyTorch raised before it logged a loss" for name in raised_first),
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"size": FONT_SIZE},
        )
    if shown and max(shown) / min(shown) > LOG_RANGE:
        figure.update_yaxes(type="log", exponentformat="power")
    figure.update_yaxes(title="logged loss")
    figure.update_xaxes(title="batch")
    return _style(figure, "Logged loss per batch", height=420)


def gradient_figure(recording: Recording) -> go.Figure:
    """‖.grad‖ per layer at each optimizer.step(), log scale; steps where a layer had None or 0 are counted."""
    figure = go.Figure()
    missing = 0
    for colour, layer in zip(LAYER_COLOURS * 4, recording.layers, strict=False):
        norms = [step.grad_norms.get(layer) for step in recording.steps]
        missing += sum(1 for n in norms if not n)
        figure.add_trace(
            go.Scatter(
                x=list(range(1, len(norms) + 1)),
                y=[n if n else None for n in norms],
                mode="lines+markers",
                name=layer,
                line={"width": 2, "color": colour},
                marker={"size": 5},
            )
        )
    figure.update_yaxes(type="log", title="‖.grad‖ at step()", exponentformat="power")
    figure.update_xaxes(title="optimizer step")
    title = "Gradient per layer at each step"
    if not recording.steps:
        title = "Gradient per layer: no step ran"
    elif missing:
        title += f" ({missing} None or 0, not drawn)"
    return _style(figure, title)


def memory_figure(recording: Recording) -> go.Figure:
    """Live tensor bytes after each forward of the model, coloured by the part of the loop it was in."""
    figure = go.Figure()
    for phase, colour in PHASE_COLOURS.items():
        points = [
            (i + 1, b)
            for i, (b, p) in enumerate(zip(recording.live_bytes, recording.forward_phases, strict=True))
            if p == phase
        ]
        if points:
            figure.add_trace(
                go.Scatter(
                    x=[i for i, _ in points],
                    y=[b / 1024 for _, b in points],
                    mode="markers",
                    name=phase,
                    marker={"size": 6, "color": colour},
                )
            )
    figure.update_yaxes(title="live tensors (KiB)", rangemode="tozero")
    figure.update_xaxes(title="forward")
    return _style(figure, "Memory after each forward")


def accuracy_figure(recording: Recording) -> go.Figure:
    """Per epoch: training and validation metric measured in eval() under no_grad, and what the loop reported."""
    metric = METRIC_NAMES[recording.task].removeprefix("validation ")
    epochs = list(range(1, len(recording.epochs) + 1))
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(x=epochs, y=[e.train_metric for e in recording.epochs], mode="lines+markers", name="training")
    )
    figure.add_trace(
        go.Scatter(x=epochs, y=[e.val_metric for e in recording.epochs], mode="lines+markers", name="validation")
    )
    reported = [e.reported for e in recording.epochs]
    if any(r is not None for r in reported) and recording.task == "classification":
        same_scale = all(r is None or 0 <= r <= 1 for r in reported)
        if same_scale:
            figure.add_trace(
                go.Scatter(
                    x=epochs,
                    y=reported,
                    mode="markers",
                    name="the loop's own number",
                    marker={"symbol": "diamond", "size": 12},
                )
            )
    figure.update_yaxes(title=metric)
    figure.update_xaxes(title="epoch", dtick=1)
    return _style(figure, f"{metric.capitalize()} per epoch (eval, no_grad)")


def numbered_source(source: str) -> str:
    """The loop's source as shown beside its line picker: numbered, so "line 9" points at one line."""
    lines = source.rstrip("\n").split("\n")
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}}  {line}" for i, line in enumerate(lines, 1))
