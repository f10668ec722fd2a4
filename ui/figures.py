"""Figures with what a note taker needs: a caption stating the settings, and an export."""

from __future__ import annotations

import base64
import functools
import html
import math
import re
import textwrap
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from explorers import chartroom, environment, graphs, units
from explorers.cards import AnswerCard
from ui import alt_text, drill, notes
from ui.frame import presenting

# Set once: applying a template per chart cost about 8 ms a chart (its JSON still carries the template).
pio.templates.default = "plotly_white"
FONT_SIZE = 16  # plotly's 12 is unreadable on a projector
PRESENTING_FONT_SIZE = 22
PRESENTING_HEIGHT_SCALE = 1.3
PRESENTING_GRAPH_SCALE = 1.25  # 13 pt node text becomes about 22 px
MIN_GRAPH_TEXT_PX = 16
PX_PER_PT = 96 / 72


@functools.lru_cache(maxsize=128)
def _svg(dot_source: str) -> str:
    svg = graphs.render(dot_source, "svg").decode()
    return svg[svg.index("<svg") :]


def _graph_image(dot_source: str, scale: float, description: str) -> str:
    """The laid-out SVG as an <img> (Streamlit's HTML sanitiser drops inline <svg>).

    Drawn at natural size times `scale`; the browser may shrink it to fit its column, but
    never below the width at which node text would fall under MIN_GRAPH_TEXT_PX (the box scrolls instead).
    """
    svg = _svg(dot_source).encode()
    width_pt, height_pt = (float(v) for v in re.search(rb'width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    width, height = (round(v * PX_PER_PT * scale) for v in (width_pt, height_pt))
    text_px = float(graphs.FONT_SIZE) * PX_PER_PT * scale
    min_width = round(width * min(1.0, MIN_GRAPH_TEXT_PX / text_px))
    data = base64.b64encode(svg).decode()
    return (
        f'<img alt="{html.escape(description)}" width="{width}" height="{height}" '
        f'style="max-width: 100%; min-width: {min_width}px; height: auto" src="data:image/svg+xml;base64,{data}">'
    )


def caption(what: str, settings: Mapping[str, Any], device: str) -> str:
    described = " · ".join(f"{name} {value}" for name, value in settings.items())
    return f"{what} · {described} · {environment.provenance(device)}"


def graph(dot_source: str, caption_text: str, file_stem: str) -> None:
    """Draw a DOT graph at its natural size, laid out on the server, and offer it as SVG and PNG.

    Laid out here rather than in the browser: the same DOT text always gives the same
    picture (the browser's renderer sometimes kept an old graph after a change), and a
    graph is never shrunk to fit its column, so node text stays readable (13 pt is about
    17 px; presenting scales it up). A graph larger than its box scrolls inside it.
    """
    if graphs.layout_engine_name() is None:
        st.graphviz_chart(dot_source, width="content")
        st.caption(caption_text)
        st.caption("No Graphviz layout engine here, so no image export: `pip install graphviz-pure`.")
        return
    # its text alternative is the caption: what the graph shows, with this run's settings
    image = _graph_image(dot_source, PRESENTING_GRAPH_SCALE if presenting() else 1.0, caption_text)
    # focusable: a graph larger than its box scrolls, and a keyboard must reach it too (axe-core)
    st.html(f"<div class='graph' tabindex='0' role='region' aria-label='graph, scrollable'>{image}</div>")
    notes.add_graph(file_stem, caption_text, _svg(dot_source))
    st.caption(caption_text)
    svg, png = st.columns(2)
    svg.download_button(
        "⬇ Graph as SVG",
        lambda: graphs.render(graphs.captioned(dot_source, caption_text), "svg"),
        f"{file_stem}.svg",
        mime="image/svg+xml",
        on_click="ignore",
        key=f"{file_stem}-svg",
    )
    png.download_button(
        "⬇ Graph as PNG",
        lambda: graphs.render(graphs.captioned(dot_source, caption_text), "png"),
        f"{file_stem}.png",
        mime="image/png",
        on_click="ignore",
        key=f"{file_stem}-png",
    )


def plotly(figure: go.Figure, caption_text: str, file_stem: str, key: str | None = None) -> None:
    """A plotly chart that carries its caption (settings, device, torch) inside the figure, and its text
    alternative (title, axes, the points drawn, the caption) for a screen reader.

    The caption is drawn in the figure's bottom margin, so a PNG saved with the toolbar's
    camera (2x, named after the lab) still says what produced it. Presenting grows the
    fonts and the plot's height. `key` is for a chart redrawn within one run as its data
    arrives: each draft needs its own, and the notes keep the last draft (by `file_stem`).
    """
    figure, text = _laid_out(figure, caption_text, presenting())
    notes.add_chart(file_stem, caption_text, figure)
    config = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": file_stem, "scale": 2}}
    st.plotly_chart(figure, config=config, key=key or f"{file_stem}-chart", theme=None)  # keep our projector-size fonts
    st.html(f"<p class='chart-text'>{html.escape(text)}</p>")


LAID_OUT_KEPT = 256  # figures, in every session together: a few pages' worth at each presenting setting
LAID_OUT_KEPT_CHARS = 32 * 2**20  # of their JSON: a long timeline is hundreds of kB
_laid_out_figures: OrderedDict[tuple[str, str, bool], tuple[go.Figure, str]] = OrderedDict()
_laid_out_lock = threading.Lock()


def _laid_out(figure: go.Figure, caption_text: str, present: bool) -> tuple[go.Figure, str]:
    """`lay_out` and the text alternative, kept by what the figure holds.

    A notch reruns the whole page, and most of its figures come back from the engine's cache
    unchanged: laying one out again took 7-15 ms of plotly's property validation, its JSON 0.6 ms.
    What is kept is never changed afterwards (drawing and the notes only read it), so sessions share it.
    """
    key = (pio.to_json(figure, validate=False), caption_text, present)
    with _laid_out_lock:
        if key in _laid_out_figures:
            _laid_out_figures.move_to_end(key)
            return _laid_out_figures[key]
    laid_out = lay_out(figure, caption_text, present)
    kept = (laid_out, alt_text.describe(laid_out, caption_text))
    with _laid_out_lock:
        _laid_out_figures[key] = kept
        while len(_laid_out_figures) > LAID_OUT_KEPT or sum(len(k[0]) for k in _laid_out_figures) > LAID_OUT_KEPT_CHARS:
            _laid_out_figures.popitem(last=False)
    return kept


CAPTION_FONT_SIZE = {False: 13, True: 18}  # presenting: read from the back of a room, like the page's captions
CAPTION_LINE_CHARS = 44  # wrapped by hand (annotations do not wrap): fits the narrowest chart, at either size
# Plans are made for the narrowest a chart is drawn (a phone's column; presenting: a third of a
# 1280 px window), so nothing overlaps there; a wider chart has room to spare.
NARROW_FIGURE_PX = {False: 350, True: 480}
MIN_PLOT_PX = 150  # the plot area's least height, before presenting scales it
X_TICK_STANDOFF = 6  # px between the plot and the x tick labels: the y axis' lowest label reaches below the plot
FEW_DECADES = 1_000  # a log axis spanning less than this labels 1, 2 and 5 of each decade
Y_LABEL_SHARE = 0.45  # of the narrowest figure, the most that y category labels take before they wrap
PLOTLY_HEIGHT = 450  # plotly's height for a figure that sets none
DEFAULT_LEFT, DEFAULT_RIGHT = 70, 20
# A character's width, in font sizes: plotly's fonts are Verdana where installed (Windows, macOS; about
# 0.55 on average), else Arial's metrics (about 0.45, as in the browser tests): plan for the wider.
CHAR_EM = 0.6
LINE_EM, NEXT_LINE_EM = 1.3, 1.5  # a line's height, in font sizes; plotly sets further lines of a text wider apart
TITLE_PAD = 12  # above the title
GAP = 10  # between the parts stacked above and below the plot
LEGEND_SYMBOL_PX = 40  # a legend entry's symbol and the gap before its text
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TAG = re.compile(r"<[^>]+>")


def _lines(text: Any) -> list[str]:
    """The lines plotly draws for `text` (split at <br>, tags removed)."""
    return [_TAG.sub("", line) for line in _BREAK.split(str(text or ""))]


def _text_px(text: Any, size: float) -> float:
    """About how wide plotly draws `text` at font `size` (its longest line)."""
    return max(len(line) for line in _lines(text)) * CHAR_EM * size


def _text_height(lines: float, size: float) -> float:
    return size * (LINE_EM + NEXT_LINE_EM * (lines - 1))


def lay_out(figure: go.Figure, caption_text: str, present: bool) -> go.Figure:
    """Fonts, margins and height planned from what the chart holds, and the caption drawn in the bottom margin.

    Top down: the title, a legend in rows above the plot, the plot, the x tick labels and axis
    title, a legend placed `chartroom.LEGEND_BELOW`, the caption. Each part's room is computed
    from its lines and font, for the narrowest the chart is drawn, so none prints over another.
    The plot keeps the height its builder planned (at least MIN_PLOT_PX, and room for its y
    labels; presenting scales it), and the figure grows to hold the rest. Long titles, axis
    titles, y category labels and legend entries are wrapped to fit.
    """
    size = PRESENTING_FONT_SIZE if present else FONT_SIZE
    # plotly draws titles at 1.4x the font, which pushes long ones off a half-width chart; 1.15x still stands out
    title_size = round(1.15 * size)
    layout = figure.layout
    planned_height = layout.height or PLOTLY_HEIGHT
    planned_top, planned_bottom = layout.margin.t, layout.margin.b
    left = DEFAULT_LEFT if layout.margin.l is None else layout.margin.l
    right = DEFAULT_RIGHT if layout.margin.r is None else layout.margin.r
    figure.update_layout(font={"size": size, "color": "#222"}, title_font_size=title_size)
    if present:
        _grow_builder_text(figure, PRESENTING_FONT_SIZE / FONT_SIZE)
        _readable_exponents(figure, size)
    y_labels_left, y_labels_height = _y_axis_room(figure, size, NARROW_FIGURE_PX[present])
    left = max(left, y_labels_left)
    right = max(right, _bar_text_room(figure, size))
    narrow_plot = NARROW_FIGURE_PX[present] - left - right
    place = _legend_place(figure)
    legend = _legend_height(figure, size, narrow_plot) if place else 0
    above = legend + GAP if place == "above" else 0
    if above:  # on the plot's top edge, under the title
        figure.update_layout(legend={"y": 1, "yanchor": "bottom"})
    top = max(planned_top or 0, _title_room(figure, title_size, NARROW_FIGURE_PX[present]) + above)
    axis = max(planned_bottom or 0, _x_axis_room(figure, size, narrow_plot, left, right))
    plot = (
        planned_height
        - (top if planned_top is None else planned_top)
        - (axis if planned_bottom is None else planned_bottom)
    )
    plot = max(MIN_PLOT_PX, plot, round(y_labels_height))
    if present:
        plot = round(plot * PRESENTING_HEIGHT_SCALE)
    below = legend + GAP if place == "below" else 0
    if below:  # under the axis title
        figure.update_layout(legend={"y": -(axis / plot), "yanchor": "top"})
    caption = _add_caption(figure, caption_text, axis + below, left, CAPTION_FONT_SIZE[present])
    bottom = axis + below + caption
    figure.update_layout(height=top + plot + bottom, margin={"t": top, "b": bottom, "l": left, "r": right})
    # the margin is planned here (plotly growing it would move the caption); the labels stand clear of the y axis'
    figure.update_xaxes(automargin=False, ticklabelstandoff=X_TICK_STANDOFF)
    _thin_log_ticks(figure)
    return figure


SUPERSCRIPT_SHARE = 0.7  # plotly draws a power exponent (10^-3) at this share of its tick label's size
PRESENTING_LEAST_PX = 16  # presenting, no text smaller: an exponent of 15.4 px could not be read from the back


def _readable_exponents(figure: go.Figure, size: int) -> None:
    """Presenting, a log axis labelled in powers gets tick labels large enough for their exponents."""
    least = math.ceil(PRESENTING_LEAST_PX / SUPERSCRIPT_SHARE)
    for axis in (*figure.select_xaxes(), *figure.select_yaxes()):
        if axis.type == "log" and axis.exponentformat == "power":
            axis.tickfont.size = max(axis.tickfont.size or size, least)


def _grow_builder_text(figure: go.Figure, scale: float) -> None:
    """Text a builder sized itself (a heatmap's cells, a bar's labels, tick labels, a legend, a marker's note)
    grows like the rest."""
    axes = (*figure.select_xaxes(), *figure.select_yaxes())
    fonts = [getattr(trace, "textfont", None) for trace in figure.data]
    fonts += [axis.tickfont for axis in axes] + [axis.title.font for axis in axes]
    fonts += [figure.layout.legend.font]
    for font in fonts:
        if font is not None and isinstance(font.size, int | float):
            font.size = round(font.size * scale)
    for note in figure.layout.annotations:  # its shift keeps a note clear of its neighbour: it grows with the text
        if isinstance(note.font.size, int | float):
            note.font.size = round(note.font.size * scale)
            note.xshift, note.yshift = ((shift or 0) * scale for shift in (note.xshift, note.yshift))


def _thin_log_ticks(figure: go.Figure) -> None:
    """A log y axis spanning few decades gets ticks at 1, 2 and 5 of each decade (1, 2, 3 and 5, or every digit,
    where that gives fewer than three), labelled in full: plotly's own ticks label every digit, which print over
    each other on a short plot, and its 1-2-5 ticks ("D2") label only the digit: 0.2, 0.5, 1, 2 read "2, 5, 1, 2"."""
    for axis in figure.select_yaxes():
        axis_id = "y" + axis.plotly_name.removeprefix("yaxis")
        if axis.type != "log" or axis.dtick is not None or axis.tickvals is not None:
            continue
        values = [
            float(v)
            for trace in figure.data
            if (getattr(trace, "yaxis", None) or "y") == axis_id and getattr(trace, "y", None) is not None
            for v in trace.y
            if isinstance(v, int | float) and math.isfinite(v) and v > 0
        ]
        if not values or max(values) / min(values) >= FEW_DECADES:
            continue
        low, high = min(values), max(values)
        for digits in ((1, 2, 5), (1, 2, 3, 5), range(1, 10)):
            ticks = _log_ticks(low, high, digits)
            if sum(low <= t <= high for t in ticks) >= 3:
                break
        axis.update(tickvals=ticks, ticktext=[_tick_label(v) for v in ticks])


def _log_ticks(low: float, high: float, digits) -> list[float]:
    """Each digit times each power of ten, from a decade under low to a decade over high: plotly pads a log axis
    past the data (a bar's axis reaches far below its shortest bar) and draws only the ticks in its range."""
    decades = range(math.floor(math.log10(low)) - 1, math.floor(math.log10(high)) + 2)
    return [float(f"{d}e{e}") for e in decades for d in digits]  # 2e-1, not 2 * 10 ** -1 = 0.20000000000000004


def _tick_label(value: float) -> str:
    """0.2 and 500 as written; far from 1 as plotly writes a power of ten, 2×10⁻⁵ with a true minus."""
    if 1e-3 <= value < 1e4:
        return f"{value:g}"
    mantissa, exponent = f"{value:e}".split("e")
    head = f"{float(mantissa):g}×" if float(mantissa) != 1 else ""
    return f"{head}10<sup>{int(exponent)}</sup>".replace("-", "\u2212")


def _title_room(figure: go.Figure, title_size: int, narrow_figure: int) -> int:
    """Room above the plot for the title (and its subtitle), which is pinned to the figure's top."""
    title = figure.layout.title
    if not title.text:
        return round(2 * GAP + _above_plot(figure))
    room_px = narrow_figure - 2 * GAP
    width = _text_px(title.text, title_size)
    if "<br>" not in title.text and width > room_px:  # in lines of about equal length, not one long and a stub
        lines = math.ceil(width / room_px)
        title.text = chartroom.wrap(title.text, math.ceil(len(title.text) / lines) + 4)
    lines = len(_BREAK.split(title.text))
    # Pinned to the top: plotly centres a title without y in the top margin, where it may meet what is
    # planned there; and anchored at its top, it lifts one of several lines by about 3/4 of its font: put back.
    if title.y is None or lines > 1:
        pad = TITLE_PAD + (round(0.75 * title_size) if lines > 1 else 0)
        figure.update_layout(title={"y": 1, "yref": "container", "yanchor": "top", "pad": {"t": pad}})
    if title.subtitle.text:
        lines += 1.5 * len(_lines(title.subtitle.text))  # in a smaller font, but further apart
    return round(TITLE_PAD + _text_height(lines, title_size) + GAP + _above_plot(figure))


def _above_plot(figure: go.Figure) -> float:
    """The height of annotations standing on the plot's top edge (a line's label), which the title must clear."""
    size = figure.layout.font.size
    heights = [
        _text_height(len(_lines(note.text)), note.font.size or size)
        for note in figure.layout.annotations
        if note.yref == "paper" and note.y is not None and note.y >= 1 and note.yanchor == "bottom"
    ]
    return max(heights, default=0)


def _axis_values(figure: go.Figure, letter: str, axis_id: str) -> list[Any]:
    """What the traces on this axis put on it: x of vertical traces, y of horizontal ones, both of a heatmap."""
    values = []
    for trace in figure.data:
        horizontal = getattr(trace, "orientation", None) == "h"
        on = trace.xaxis if letter == "x" else trace.yaxis
        if (on or letter) != axis_id or (trace.type != "heatmap" and horizontal != (letter == "y")):
            continue
        shown = getattr(trace, letter, None)
        if shown is None and trace.type == "box" and trace.name is not None:
            shown = (trace.name,)  # a box without positions stands at its name
        values += list(shown or ())
    return values


def _categories(axis: Any, values: list[Any]) -> list[str]:
    if axis.type == "category" or (axis.type is None and values and all(isinstance(v, str) for v in values)):
        return list(dict.fromkeys(str(v) for v in values))
    return []


def _x_axis_room(figure: go.Figure, size: int, narrow_plot: int, left: int, right: int) -> int:
    """Room below the plot for the x tick labels and axis title; a long title is wrapped to the plot's width.

    Category labels that do not fit side by side on the narrowest plot stand upright
    (plotly would otherwise turn them at draw time, past the room planned here).
    """
    room = 0
    for axis in figure.select_xaxes():
        if axis.visible is False or axis.side == "top":
            continue
        axis_id = "x" + axis.plotly_name.removeprefix("xaxis")
        tick_size = axis.tickfont.size or size
        ticks = 0.0
        if axis.showticklabels is not False:
            labels = _categories(axis, _axis_values(figure, "x", axis_id))
            lines = max((len(_lines(label)) for label in labels), default=1)
            ticks = _text_height(lines, tick_size)
            if labels:
                widest = max(_text_px(label, tick_size) for label in labels)
                if axis.tickangle is None:
                    fits = widest + GAP <= narrow_plot / len(labels)
                    axis.tickangle = 0 if fits else -90
                if axis.tickangle:
                    turn = math.radians(axis.tickangle)
                    ticks = widest * abs(math.sin(turn)) + ticks * abs(math.cos(turn))
            elif axis.type == "log" and axis.exponentformat == "power":
                ticks *= 1.4  # superscript exponents
        title = 0.0
        if axis.title.text:
            title_size = axis.title.font.size or size
            # centred under the plot, a title may reach into the margins on either side
            room_px = narrow_plot + 2 * min(left, right)
            if "<br>" not in axis.title.text and _text_px(axis.title.text, title_size) > room_px:
                axis.title.text = chartroom.wrap(axis.title.text, max(12, int(room_px / (CHAR_EM * title_size))))
            title = _text_height(len(_lines(axis.title.text)), title_size) + 2 * GAP  # plotly's gap above it, then ours
        room = max(room, round(GAP + X_TICK_STANDOFF + ticks + title))
    return room


def _y_axis_room(figure: go.Figure, size: int, narrow_figure: int) -> tuple[int, float]:
    """The left margin that category labels on the y axis (a horizontal bar chart's) and its title need, and
    the height the labels need on the plot.

    Labels wider than Y_LABEL_SHARE of the narrowest figure are wrapped (as tick text; the data keep
    their names), so the bars keep the rest of the width.
    """
    axis = figure.layout.yaxis
    labels = _categories(axis, _axis_values(figure, "y", "y"))
    if axis.visible is False or axis.showticklabels is False or not labels:
        return 0, 0.0
    tick_size = axis.tickfont.size or size
    limit = Y_LABEL_SHARE * narrow_figure
    if axis.ticktext is None and max(_text_px(label, tick_size) for label in labels) > limit:
        chars = max(10, int(limit / (CHAR_EM * tick_size)))
        axis.update(tickvals=labels, ticktext=[chartroom.wrap(label, chars) for label in labels])
    shown = axis.ticktext or labels
    widest = max(_text_px(label, tick_size) for label in shown)
    lines = max(len(_lines(label)) for label in shown)
    title = LINE_EM * (axis.title.font.size or size) + GAP if axis.title.text else 0
    # plotly may widen a margin it was told to fit (automargin); it is planned here
    axis.automargin = False
    return round(GAP + widest + title), len(labels) * (_text_height(lines, tick_size) + GAP)


def _bar_text_room(figure: go.Figure, size: int) -> int:
    """The right margin that the label outside the longest horizontal bar reaches into."""
    widest = 0.0
    for trace in figure.data:
        if trace.type != "bar" or trace.orientation != "h" or trace.textposition != "outside" or trace.text is None:
            continue
        texts = trace.text if isinstance(trace.text, tuple | list) else (trace.text,)
        widest = max(widest, *(_text_px(text, trace.textfont.size or size) for text in texts))
    return round(widest + GAP) if widest else 0


def _legend_entries(figure: go.Figure) -> list[Any]:
    shown = [trace for trace in figure.data if trace.showlegend is not False]
    if figure.layout.showlegend is False or (figure.layout.showlegend is None and len(shown) < 2):
        return []
    return shown


def _legend_place(figure: go.Figure) -> str | None:
    """'below' or 'above' the plot for a legend in rows there; None for none, or one beside the plot (plotly
    widens the margin for that)."""
    legend = figure.layout.legend
    if not _legend_entries(figure):
        return None
    if legend.y is None:
        return "below" if legend.orientation == "h" else None
    if legend.y < 0:
        return "below"
    return "above" if legend.y >= 1 and legend.orientation == "h" else None


def _legend_height(figure: go.Figure, size: int, narrow_plot: int) -> int:
    """The height of a legend in rows, for the rows it takes on the narrowest plot.

    A wider plot fits as many entries a row or more, so the legend never takes more room than
    planned. Entries wider than the plot are wrapped.
    """
    entries = _legend_entries(figure)
    font = figure.layout.legend.font.size or size
    chars = max(10, int((narrow_plot - LEGEND_SYMBOL_PX) / (CHAR_EM * font)))
    for trace in entries:
        if trace.name and "<br>" not in trace.name and _text_px(trace.name, font) + LEGEND_SYMBOL_PX > narrow_plot:
            trace.name = chartroom.wrap(trace.name, chars)
    widest = max(LEGEND_SYMBOL_PX + _text_px(trace.name, font) for trace in entries)
    per_row = max(1, min(len(entries), int(narrow_plot // (widest + GAP))))
    rows = [entries[i : i + per_row] for i in range(0, len(entries), per_row)]
    height = sum(_text_height(max(len(_lines(t.name)) for t in row), font) + 8 for row in rows) + GAP
    # a legend group is one entry here
    figure.update_layout(legend={"orientation": "h", "x": 0, "xanchor": "left", "tracegroupgap": 0})
    return round(height)


def _add_caption(figure: go.Figure, text: str, above: int, left: int, size: int) -> int:
    """The caption as an annotation `above` px below the plot; returns the room it takes."""
    lines = textwrap.wrap(text, CAPTION_LINE_CHARS) or [""]
    figure.add_annotation(
        text="<br>".join(lines),
        xref="paper",
        yref="paper",
        x=0,
        y=0,
        xanchor="left",
        yanchor="top",
        yshift=-above,
        xshift=8 - left,  # from the figure's left edge, not the plot's: more room
        align="left",
        showarrow=False,
        font={"size": size, "color": "#555"},
    )
    return 8 + round(size * 1.35 * len(lines))


def why_panel(lines: Sequence[str]) -> None:
    st.subheader("Why")
    st.markdown("\n".join(f"- {line}" for line in lines))


def predict_then_reveal(
    key: str, question: str, choices: Sequence[str], answer: str | tuple[str, ...], evidence: str
) -> None:
    """Ask first; the live evidence appears only once the reader has committed to an answer.

    `answer` is the measured answer, or a tuple of them when the run has a tie. The first
    answer to each question counts towards the session's drill score (the study plan page
    shows it); changing it afterwards still reveals, but does not rescore.
    """
    answers = (answer,) if isinstance(answer, str) else answer
    st.subheader("Predict, then reveal")
    choice = st.radio(question, choices, index=None, key=key)
    if choice is None:
        st.caption("Pick an answer to see what PyTorch does.")
    else:
        drill.record(key, question, choice in answers)
        if choice in answers:
            st.success(f"Right. {evidence}")
        else:
            st.error(f"Not quite: **{' or '.join(answers)}**. {evidence}")
    right, asked = drill.score()
    if asked and choice is not None:  # under this question's answer, not before it is given
        st.caption(f"Drill score this session: {right} of {asked} first answers right.")


def predict_then_run(
    key: str, question: str, choices: Sequence[str], reveal: Callable[[], tuple[str | tuple[str, ...], str]]
) -> None:
    """predict_then_reveal for a question about a setting not on screen: `reveal()` runs that setting and returns
    (answer, evidence), and runs only once a prediction is made, so nothing on screen holds the answer before."""
    answer, evidence = reveal() if st.session_state.get(key) is not None else ((), "")
    predict_then_reveal(key, question, choices, answer, evidence)


def answer_card(card: AnswerCard) -> None:
    """The interview answer in four parts, with this run's evidence, and a timer to say it aloud."""
    notes.add_card(card)
    st.subheader("Answer card")
    with st.container(border=True):
        st.markdown(f"**{card.question}**")
        st.markdown(card.as_markdown())
    drill.timer(presenting())


GRID_CHAR_PX = 8  # a data grid's 14 px text: about this wide a character, with room to spare
GRID_CELL_PAD_PX = 24
GRID_AUTO_CHARS = 30  # about what a grid's automatic column width shows before it cuts a cell with "…"


def table(
    data: Any, *, height: int | None = None, column_config: Mapping[str, Any] | None = None, prose: bool = False
) -> None:
    """A table: a data grid to scroll and sort; a plain table, which wraps, when presenting (the grid draws on a
    canvas at a fixed size, so its text would not grow with the page's) or for `prose`, a few rows of long text
    read whole. Plain tables write numbers as the notes do; cells are text, never markdown.
    A grid's text column is made wide enough for its longest cell: the grid would cut it, and it scrolls sideways
    inside itself where its columns are wider than the page."""
    frame = pd.DataFrame(data)
    if presenting() or prose:
        st.table(frame.astype(object).map(_text_cell), hide_index=True)
        return
    config = {**_text_widths(frame), **(column_config or {})}
    st.dataframe(data, hide_index=True, height=height or "auto", column_config=config)


def _text_widths(frame: pd.DataFrame) -> dict[str, Any]:
    widths = {}
    for name in frame.columns:
        longest = max((len(v) for v in frame[name] if isinstance(v, str)), default=0)
        if longest > GRID_AUTO_CHARS:
            widths[name] = st.column_config.TextColumn(width=GRID_CELL_PAD_PX + GRID_CHAR_PX * longest)
    return widths


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as a markdown table, numbers written for people: 3 significant figures, no 'nan', no 'None'."""
    if not rows:
        return "_(empty)_"
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(row[h]) for h in header) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return units.format_number(value)
    return str(value).replace("|", "/")


def _text_cell(value: Any) -> str:
    """A cell as plain text: a plain table reads its cells as markdown, which made "__next__" a bold "next"."""
    return re.sub(r"([\\`*_~\[\]<>#])", r"\\\1", _cell(value))


def notes_download(title: str, caption_text: str, sections: Mapping[str, str], file_stem: str) -> None:
    """One click: one self-contained HTML file with the settings, the answer card, the lesson, figures and tables."""
    collected = notes.collected()
    st.download_button(
        "⬇ Notes (.html)",
        lambda: notes.document(title, caption_text, sections, collected),
        f"{file_stem}-notes.html",
        mime="text/html",
        on_click="ignore",
        key=f"{file_stem}-notes",
        help="Reads offline in any browser; its figures are images you can paste into a notes app.",
    )
