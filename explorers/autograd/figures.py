"""The Autograd lab's table and chart, drawn from a recorded run (no torch runs here)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from explorers.autograd.experiment import ACTIONS, AutogradRun, Snapshot
from explorers.units import format_bytes


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
                "× one pass": r.grad_vs_one_pass,
                "version": r.version,
            }
            for r in snapshot.tensors
        ]
    )


def saved_bytes_figure(result: AutogradRun) -> go.Figure:
    """Bytes held for backward after each step; steps that raised are red."""
    steps = result.steps
    figure = go.Figure(
        go.Bar(
            x=[f"{i}. {ACTIONS[s.action]}" for i, s in enumerate(steps, 1)] or ["(no steps)"],
            y=[s.saved_bytes for s in steps] or [0],
            text=[format_bytes(s.saved_bytes) for s in steps] or [""],
            textposition="outside",
            cliponaxis=False,
            marker_color=["#d62728" if s.error else "#ff7f0e" for s in steps],
        )
    )
    figure.update_layout(
        title="After each step (red: PyTorch raised)", yaxis_title="bytes saved for backward", height=400
    )
    return figure
