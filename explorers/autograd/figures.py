"""The Autograd lab's table and chart, drawn from a recorded run (no torch runs here)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

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


def saved_bytes_figure(result: AutogradRun) -> go.Figure:
    """Bytes held for backward after each step, one horizontal bar per step (labels stay level at any count)."""
    steps = result.steps
    unit, size = byte_axis_unit(max((s.saved_bytes for s in steps), default=0))
    labels = [f"{i}. {ACTIONS[s.action]}" for i, s in enumerate(steps, 1)] or ["(no steps)"]
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
    figure.update_layout(
        title="Saved for backward after each step",
        xaxis_title=f"{unit} saved for backward",
        yaxis={"autorange": "reversed"},
        height=160 + 34 * len(labels),
        margin={"t": 60, "l": 20, "r": 140},
    )
    figure.update_yaxes(automargin=True)
    return figure
