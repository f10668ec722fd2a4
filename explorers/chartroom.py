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

# y is a placeholder: ui.figures sets it from the room the axis takes.
LEGEND_BELOW = {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.3, "yanchor": "top"}


def wrap(text: str, width: int) -> str:
    """Plotly does not wrap text: lines of at most `width` characters, joined by <br>."""
    return "<br>".join(textwrap.wrap(text, width)) or text
