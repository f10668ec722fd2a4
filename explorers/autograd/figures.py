"""The Autograd lab's table and chart, drawn from a recorded run (no torch runs here)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from explorers import chartroom
from explorers.autograd.experiment import ACTIONS, RATIO_LABEL, AutogradRun, Snapshot
from explorers.units import byte_axis_unit, format_bytes


def tensor_table(snapshot: Snapshot) -> pd.DataFrame:
    """The per-tensor table as the lab shows it."""
    return pd.DataFrame(
        [
            {
                "tensor": r.name,
                "role": r.role,
                "shape": str(r.shape),
                "is_leaf": r.is_leaf,
                "requires_grad": r.requires_grad,
                "grad_fn": r.grad_fn or "None",
                ".grad": r.grad,
                "‖grad‖": r.grad_norm,
                RATIO_LABEL: r.grad_vs_one_pass,
                "version": r.version,
            }
            for r in snapshot.tensors
        ]
    )


ROW_PX = {1: 34, 2: 52}  # a step's bar and the gap to the next, by the lines of its label
MIN_PLOT_PX = 150  # one or two steps still get a bar you can see, clear of the axis ticks
MARGIN = {"t": 60, "l": 20, "r": 20, "b": 70}  # ui.figures widens l and r for the step and bar labels
LABEL_LINE_CHARS = 18


def _step_label(index: int, action: str) -> str:
    """'4. backward(<br>retain_graph=True)': long labels on two lines, so the bars keep their width."""
    label = f"{index}. {ACTIONS[action]}"
    if len(label) <= LABEL_LINE_CHARS:
        return label
    if "(" in label and not label.endswith("()"):
        return label.replace("(", "(<br>", 1)
    return chartroom.wrap(label, LABEL_LINE_CHARS)


def saved_bytes_figure(result: AutogradRun) -> go.Figure:
    """Bytes held for backward after each step, one horizontal bar per step (labels stay level at any count).

    The plot area is at least MIN_PLOT_PX tall whatever the number of steps, and each step is a
    category of its own on the y axis, so "2. backward() 0 B" (the graph freed) keeps its row.
    """
    steps = result.steps
    unit, size = byte_axis_unit(max((s.saved_bytes for s in steps), default=0))
    labels = [_step_label(i, s.action) for i, s in enumerate(steps, 1)] or ["(no steps)"]
    figure = go.Figure(
        go.Bar(
            y=labels,
            x=[s.saved_bytes / size for s in steps] or [0],
            orientation="h",
            text=[("✗ PyTorch raised" if s.error else format_bytes(s.saved_bytes)) for s in steps] or [""],
            textposition="outside",
            cliponaxis=False,
            marker_color=["#d62728" if s.error else "#ff7f0e" for s in steps],
        )
    )
    plot = max(MIN_PLOT_PX, ROW_PX[max(label.count("<br>") + 1 for label in labels)] * len(labels) + 40)
    figure.update_layout(
        title="Saved for backward after each step",
        xaxis_title=f"{unit} saved for backward",
        yaxis={"autorange": "reversed", "type": "category", "categoryorder": "array", "categoryarray": labels},
        height=MARGIN["t"] + plot + MARGIN["b"],
        margin=MARGIN,
    )
    return figure
