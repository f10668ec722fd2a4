"""Where a chart's legend goes, so that no legend, title, axis title or caption prints over another.

A figure builder says where its legend belongs; `ui.figures` then plans the room from what the
chart holds (title lines, tick labels, axis title, legend entries, caption): it computes the
margins, puts a legend placed `LEGEND_BELOW` under the x axis title and the caption under the
legend, and grows the figure's height for them rather than shrinking the plot. A legend in rows
on the plot's top edge (y 1.02, anchored at its bottom) gets room under the title. No legend
stands beside the plot: on a phone it would take half the chart's width.
"""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go

# y is a placeholder: ui.figures sets it from the room the axis takes.
LEGEND_BELOW = {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.3, "yanchor": "top"}


def wrap(text: str, width: int) -> str:
    """Plotly does not wrap text: lines of at most `width` characters, joined by <br>."""
    return "<br>".join(textwrap.wrap(text, width)) or text


FONT_SIZE = 16
TITLE_SIZE = 19


def style(figure: go.Figure, title: str, height: int = 400) -> go.Figure:
    """The labs' common look: title, text sizes, margins and a legend below (ui.figures plans the room)."""
    figure.update_layout(
        title={"text": title, "font": {"size": TITLE_SIZE}},
        font={"size": FONT_SIZE},
        height=height,
        margin={"t": 70, "l": 70, "r": 20, "b": 60},
        legend=LEGEND_BELOW,
    )
    return figure
