"""A chart's text alternative, read from the figure itself: its title, axes, each trace's points and its caption.

A screen reader cannot read a plotly chart's bars; this text says what they show, with the numbers the chart
was drawn from (so it changes with the run, like the chart).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from explorers import units

MAX_POINTS = 12  # per trace: enough for a lab's sweeps and steps; longer series say how many more


def describe(figure: go.Figure, caption: str) -> str:
    layout = figure.layout
    parts = [_plain(layout.title.text) or "Chart"]
    axes = [f"{name}: {_plain(axis.title.text)}" for name, axis in (("x", layout.xaxis), ("y", layout.yaxis))]
    parts.append("; ".join(a for a in axes if not a.endswith(": ")))
    parts += [_trace(trace) for trace in figure.data]
    parts.append(caption)
    return ". ".join(p for p in parts if p) + "."


def _trace(trace: Any) -> str:
    name = _plain(getattr(trace, "name", None)) or trace.type
    z = getattr(trace, "z", None)
    if z is not None:
        return f"{name}: a grid of {len(z)} by {len(z[0]) if len(z) else 0} cells"
    x, y = getattr(trace, "x", None), getattr(trace, "y", None)
    if x is None or y is None:
        return ""
    if getattr(trace, "orientation", None) == "h":  # categories on y, values on x
        x, y = y, x
    return f"{name}: " + _points(x, y)


def _points(x: Sequence[Any], y: Sequence[Any]) -> str:
    pairs = [f"({_value(a)}, {_value(b)})" for a, b in zip(x, y, strict=False)]
    more = len(pairs) - MAX_POINTS
    return ", ".join(pairs[:MAX_POINTS]) + (f", and {more} more" if more > 0 else "")


def _value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return units.format_number(value)
    return _plain(str(value))


def _plain(text: str | None) -> str:
    """Plotly's markup (<br>, <b>…) as plain words."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text or "")).strip()
