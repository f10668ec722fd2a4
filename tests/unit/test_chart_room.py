"""ui.figures.lay_out plans each chart's room for the narrowest column it is drawn in (a phone's).

The browser tests check the drawn result at three window sizes; these pin the plan itself.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import pytest

from explorers import chartroom
from ui import figures

NARROW = figures.NARROW_FIGURE_PX[False]


def laid_out(figure: go.Figure, present: bool = False) -> go.Figure:
    return figures.lay_out(figure, "a caption", present)


def test_a_title_wider_than_a_phones_chart_wraps_into_even_lines_and_the_top_grows():
    short = laid_out(go.Figure(go.Bar(x=["a"], y=[1]), layout={"title": "Short"}))
    long_title = "Gradient norm per layer at three scales"
    wrapped = laid_out(go.Figure(go.Bar(x=["a"], y=[1]), layout={"title": long_title}))
    lines = wrapped.layout.title.text.split("<br>")
    assert len(lines) == 2 and " ".join(lines) == long_title
    assert abs(len(lines[0]) - len(lines[1])) <= 8  # not one long line and a stub
    assert wrapped.layout.margin.t > short.layout.margin.t


def test_long_y_labels_wrap_as_tick_text_and_leave_the_bars_most_of_the_width():
    names = ["as set", "bf16 weights, gradients and optimizer state", "activation checkpointing"]
    figure = laid_out(go.Figure(go.Bar(y=names, x=[3, 2, 1], orientation="h")))
    assert list(figure.data[0].y) == names  # the data keep their names
    assert list(figure.layout.yaxis.tickvals) == names
    assert "<br>" in figure.layout.yaxis.ticktext[1]
    assert figure.layout.margin.l <= figures.Y_LABEL_SHARE * NARROW + figures.GAP
    assert figure.layout.yaxis.automargin is False


def test_a_heatmaps_category_rows_get_a_margin_of_their_own():
    rows = ["epoch 0 · rank 0", "epoch 0 · rank 1"]
    figure = laid_out(go.Figure(go.Heatmap(z=[[1, 0], [0, 1]], x=["0", "1"], y=rows)))
    assert figure.layout.margin.l >= figures._text_px(rows[0], figures.FONT_SIZE)


def test_a_legend_in_rows_above_the_plot_gets_room_under_the_title():
    def chart(legend_y: float) -> go.Figure:
        traces = [go.Bar(x=["a"], y=[1], name=f"phase number {i}") for i in range(8)]
        return laid_out(
            go.Figure(
                traces, layout={"title": "Per-rank timeline", "legend": {**chartroom.LEGEND_BELOW, "y": legend_y}}
            )
        )

    above, below = chart(1.02), chart(-0.3)
    assert above.layout.legend.y == 1 and above.layout.legend.yanchor == "bottom"
    assert above.layout.margin.t > below.layout.margin.t + 4 * figures.FONT_SIZE  # eight entries: several rows
    assert below.layout.margin.b > above.layout.margin.b


@pytest.mark.parametrize(
    ("low", "high", "labels"),
    [
        (0.15, 3.0, ["0.2", "0.5", "1", "2"]),  # plotly's own 1-2-5 ticks read "2, 5, 1, 2"
        (0.6, 1.8, ["0.6", "0.7", "0.8", "0.9", "1"]),  # 1, 2 and 5 would leave one tick, "1"
        (
            2e-5,
            1e-3,
            ["2×10<sup>\u22125</sup>", "5×10<sup>\u22125</sup>", "10<sup>\u22124</sup>", "2×10<sup>\u22124</sup>"]
            + ["5×10<sup>\u22124</sup>", "0.001"],
        ),
    ],
)
def test_a_log_axis_of_few_decades_has_three_or_more_ticks_labelled_in_full(low, high, labels):
    figure = laid_out(go.Figure(go.Scatter(x=[0, 1], y=[low, high]), layout={"yaxis": {"type": "log"}}))
    ticks = list(zip(figure.layout.yaxis.tickvals, figure.layout.yaxis.ticktext, strict=True))
    assert [text for v, text in ticks if low <= v <= high] == labels
    # ticks go on a decade past the data: plotly pads the axis (a bar chart's reaches far under its shortest bar)
    assert min(v for v, _ in ticks) <= low / 10 and max(v for v, _ in ticks) >= high * 10 / 9


def test_a_log_axis_of_many_decades_keeps_plotly_ticks():
    figure = laid_out(go.Figure(go.Scatter(x=[0, 1], y=[1.0, 1e8]), layout={"yaxis": {"type": "log"}}))
    assert figure.layout.yaxis.tickvals is None


def test_presenting_grows_text_a_builder_sized_for_a_trace_or_an_axis():
    def sizes(present: bool) -> tuple[float, float]:
        figure = go.Figure(go.Heatmap(z=[[1]], text=[["✓"]], texttemplate="%{text}", textfont={"size": 14}))
        figure.update_layout(xaxis={"tickfont": {"size": 13}})  # Modes' mode names once stayed 13 px presenting
        drawn = laid_out(figure, present)
        return drawn.data[0].textfont.size, drawn.layout.xaxis.tickfont.size

    scale = figures.PRESENTING_FONT_SIZE / figures.FONT_SIZE
    assert sizes(False) == (14, 13)
    assert sizes(True) == (round(14 * scale), round(13 * scale))


def test_presenting_grows_the_caption_inside_a_chart():
    def caption_size(present: bool) -> float:
        (caption,) = laid_out(go.Figure(go.Bar(x=[1], y=[1])), present).layout.annotations
        return caption.font.size

    assert caption_size(True) > caption_size(False) == figures.CAPTION_FONT_SIZE[False]


def test_a_grid_text_column_is_as_wide_as_its_longest_cell_and_short_ones_keep_their_own_width():
    """A data grid cuts a cell wider than its column with "…" (Serving's contract cut the feature order)."""
    order = "tenure_months, monthly_charges, support_calls, data_gb, age, discount_pct"
    frame = pd.DataFrame({"link": ["feature order", "dtype"], "training": [order, "float32"], "rows": [1, 2]})
    widths = figures._text_widths(frame)
    assert set(widths) == {"training"}
    assert widths["training"]["width"] >= figures.GRID_CHAR_PX * len(order)


def test_a_figure_drawn_again_unchanged_is_not_laid_out_again_but_any_change_is(monkeypatch):
    """A notch reruns the page and most figures come back the same: their layout is kept, by content."""
    monkeypatch.setattr(figures, "_laid_out_figures", type(figures._laid_out_figures)())
    planned = []
    lay_out = figures.lay_out
    monkeypatch.setattr(figures, "lay_out", lambda *args: planned.append(args[1:]) or lay_out(*args))

    def chart(y: float) -> go.Figure:  # built afresh each time, as a page builds it from a fresh result
        return go.Figure(go.Bar(x=["a", "b"], y=[1, y]), layout={"title": "Loss"})

    first, text = figures._laid_out(chart(2), "lr 0.01", False)
    again, again_text = figures._laid_out(chart(2), "lr 0.01", False)
    assert planned == [("lr 0.01", False)] and again is first and again_text == text
    assert first.to_json() == lay_out(chart(2), "lr 0.01", False).to_json()  # what lay_out gives a fresh figure
    planned.clear()
    figures._laid_out(chart(3), "lr 0.01", False)  # new data
    figures._laid_out(chart(2), "lr 0.03", False)  # a new caption
    figures._laid_out(chart(2), "lr 0.01", True)  # presenting
    assert len(planned) == 3


def test_the_kept_figures_are_bounded(monkeypatch):
    monkeypatch.setattr(figures, "_laid_out_figures", type(figures._laid_out_figures)())
    monkeypatch.setattr(figures, "LAID_OUT_KEPT", 3)
    for y in range(5):
        figures._laid_out(go.Figure(go.Bar(x=["a"], y=[y])), "c", False)
    assert len(figures._laid_out_figures) == 3
    monkeypatch.setattr(figures, "LAID_OUT_KEPT_CHARS", 1)
    figures._laid_out(go.Figure(go.Bar(x=["a"], y=[9])), "c", False)
    assert not figures._laid_out_figures  # larger than the whole allowance: not kept
