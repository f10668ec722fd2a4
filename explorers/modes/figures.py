"""The Modes lab's figures and tables, drawn from measured cells (no torch runs here)."""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go

from explorers.modes.experiment import ValidationRun
from explorers.modes.your_model import Cell, ModeGrid
from explorers.units import byte_axis_unit, format_bytes

FACTS: tuple[tuple[str, Callable[[Cell], bool | None]], ...] = (
    ("builds a graph", lambda c: c.builds_graph),
    ("dropout drops units", lambda c: c.dropout_active),
    ("BatchNorm uses batch statistics", lambda c: c.bn_uses_batch_stats),
    ("BatchNorm running stats change", lambda c: c.bn_running_stats_changed),
    ("a second forward differs (random)", lambda c: c.output_random),
    ("buffers change", lambda c: None if c.buffers_moved is None else bool(c.buffers_moved)),
    ("saves tensors for backward", lambda c: None if c.saved_bytes is None else c.saved_bytes > 0),
    ("output.sum().backward() works", lambda c: c.backward_works),
    ("later (out + s).backward() works", lambda c: c.reuse_add_works),
    ("later (out * s).backward() works", lambda c: c.reuse_mul_works),
    ("later out.add_(1) works", lambda c: c.reuse_inplace_works),
)
FAILED = "forward failed"


def cell_label(cell: Cell) -> str:
    return f"{cell.behaviour}() + {cell.grad_mode}"


def _text(fact: str, value: bool | None, cell: Cell) -> str:
    """A cell's mark, and its measure on a line of its own: a phone's cell is about 55 px wide."""
    if not cell.forward_works:
        return FAILED.replace(" ", "<br>")
    if value is None:
        return "n/a"
    mark = "✓" if value else "✗"
    if fact == "dropout drops units" and cell.dropout_zeroed_fraction:
        return f"{mark}<br>{cell.dropout_zeroed_fraction:.0%}"
    if fact == "saves tensors for backward" and cell.saved_bytes:
        return f"{mark}<br>{format_bytes(cell.saved_bytes)}"
    return mark


# The grid reads on a phone: each fact's name stands on its own line above its row (no label column
# takes the width), so the six columns share the whole chart. In units of a row of cells:
LABEL_ROOM = 0.6  # the line above a row that holds its fact's name
COLUMN_LABELS_PX = 130  # above the grid: the column labels, upright when six do not fit side by side
CELL_GAP = 0.03  # of a cell, on each side: the white line between neighbouring cells
HAPPENED, DID_NOT = "#7fc97f", "#e9e9e9"


def grid_figure(grid: ModeGrid) -> go.Figure:
    """Facts (rows) by the six combinations (columns), each fact's name on the line above its row.

    Green where it happened, grey where it did not, blank where the forward failed. Each cell is a
    rectangle under a text trace per fact (its marks), not a heatmap: plotly paints a heatmap on a
    canvas and encodes it as an image on every draw, which cost about 150 ms a notch in Chromium.
    """
    cells = list(grid)
    columns = [f"{c.behaviour}()<br>{c.grad_mode}" for c in cells]
    row = 1 + LABEL_ROOM
    facts, shapes, traces, labels = [], [], [], []
    for fact, measure in FACTS:
        values = [measure(c) for c in cells]
        if all(v is None for v in values):
            continue  # the model has no such module
        top = len(facts) * row + LABEL_ROOM  # the fact's cells stand under its name's line
        facts.append(fact)
        shapes += [
            {
                "type": "rect",
                "x0": column - 0.5 + CELL_GAP,
                "x1": column + 0.5 - CELL_GAP,
                "y0": top + CELL_GAP,
                "y1": top + 1 - CELL_GAP,
                "fillcolor": HAPPENED if value else DID_NOT,
                "line": {"width": 0},
                "layer": "below",
            }
            for column, value in enumerate(values)
            if value is not None
        ]
        traces.append(
            go.Scatter(
                x=columns,
                y=[top + 0.5] * len(cells),
                mode="text",
                name=fact,
                text=[_text(fact, v, c) for v, c in zip(values, cells, strict=True)],
                textfont={"size": 14},  # presenting grows it (ui.figures)
                hoverinfo="skip",
                showlegend=False,
            )
        )
        labels.append(
            {"text": fact, "x": 0, "xref": "paper", "xanchor": "left", "y": top - LABEL_ROOM / 2, "yref": "y"}
        )
    figure = go.Figure(traces)
    # Shapes and labels handed over in one call: add_shape and add_annotation validate the whole
    # layout on every call, which cost about 0.6 s for this grid's 40-odd cells.
    figure.update_layout(
        shapes=shapes,
        annotations=[{**label, "showarrow": False} for label in labels],
        title="What each combination did, measured",
        height=COLUMN_LABELS_PX + 70 + round(44 * row * len(facts)),
        yaxis={"range": [len(facts) * row, 0], "visible": False},  # first fact at the top
        # upright labels where six do not fit side by side (a phone); the top margin has room for either
        xaxis={
            "side": "top",
            "autotickangles": [0, 90],
            "showgrid": False,
            "zeroline": False,
            "range": [-0.5, len(cells) - 0.5],
        },
        margin={"t": COLUMN_LABELS_PX + 70, "b": 0, "l": 8, "r": 8},
    )
    return figure


def saved_bytes_figure(grid: ModeGrid) -> go.Figure:
    """Bars in the binary unit their labels use, so the axis and the labels read alike."""
    cells = list(grid)
    largest = max((c.saved_bytes or 0 for c in cells), default=0)
    unit, size = byte_axis_unit(largest)
    figure = go.Figure(
        go.Bar(
            x=[f"{c.behaviour}()<br>{c.grad_mode}" for c in cells],
            y=[None if c.saved_bytes is None else c.saved_bytes / size for c in cells],
            text=[FAILED if c.saved_bytes is None else format_bytes(c.saved_bytes) for c in cells],
            textposition="outside",
            cliponaxis=False,
            marker_color=["#1f77b4" if c.grad_mode == "enable_grad" else "#aaaaaa" for c in cells],
        )
    )
    figure.update_layout(
        title="Saved for backward, one forward",
        yaxis_title=f"{unit} saved",
        height=400,
        xaxis={"tickfont": {"size": 13}},  # ui.figures stands the labels upright where six do not fit side by side
    )
    return figure


def _reference_lines(run: ValidationRun) -> tuple[tuple[float, str, str], ...]:
    """The proper evaluation before and after the train-mode passes: one line when they read the same."""
    if f"{run.proper_before:.1%}" == f"{run.proper_after:.1%}":
        return ((run.proper_before, "proper eval before and after", "top"),)
    return ((run.proper_before, "proper eval before", "top"), (run.proper_after, "proper eval after", "bottom"))


def validation_figure(run: ValidationRun) -> go.Figure:
    figure = go.Figure()
    for name, values, colour in (
        ("eval()<br>no_grad", run.eval_accuracies, "#1f77b4"),
        ("train()<br>no_grad", run.train_mode_accuracies, "#d62728"),
    ):
        figure.add_trace(
            go.Box(
                y=[100 * v for v in values],
                name=name,
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                marker={"color": colour, "size": 9},
                line={"color": colour},
            )
        )
    # Reference lines as plain layout shapes: plotly's add_hline costs more than the whole chart.
    lines = _reference_lines(run)
    shapes = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": 100 * v,
            "y1": 100 * v,
            "line": {"dash": "dash", "color": "#333"},
        }
        for v, _, _ in lines
    ]
    notes = [  # in the right margin, clear of the data points
        {
            "xref": "paper",
            "x": 1.01,
            "y": 100 * v,
            "text": f"{label.replace('proper eval ', 'proper eval<br>')}: {v:.1%}",
            "showarrow": False,
            "xanchor": "left",
            "align": "left",
            "yanchor": "bottom" if side == "top" else "top",
        }
        for v, label, side in lines
    ]
    figure.update_layout(
        title=f"One validation set, {len(run.eval_accuracies)} runs each",
        shapes=shapes,
        annotations=notes,
        yaxis_title="validation accuracy (%)",
        height=430,
        showlegend=False,
        margin={"t": 60, "l": 70, "r": 170},
    )
    return figure


def grid_rows(grid: ModeGrid) -> list[dict[str, str]]:
    """The grid as table rows (one per fact), for notes."""
    rows = []
    for fact, measure in FACTS:
        row = {"fact": fact}
        for cell in grid:
            value = measure(cell)
            row[cell_label(cell)] = _text(fact, value, cell)
        rows.append(row)
    return rows
