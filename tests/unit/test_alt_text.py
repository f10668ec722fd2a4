"""A chart's text alternative says what the chart shows, from the figure's own data."""

from __future__ import annotations

import plotly.graph_objects as go

from ui import alt_text


def test_it_names_the_title_axes_each_traces_points_and_the_caption():
    figure = go.Figure(
        [go.Bar(name="activations", x=["4", "8"], y=[1.5, 2.25]), go.Bar(name="gradients", x=["4", "8"], y=[3.0, 3.0])],
        layout={"title": "Memory<br>by batch size", "xaxis": {"title": "batch size"}, "yaxis": {"title": "MiB"}},
    )
    text = alt_text.describe(figure, "Memory · model mlp · cpu")
    assert text.startswith("Memory by batch size. x: batch size; y: MiB.")
    assert "activations: (4, 1.5), (8, 2.25)" in text and "gradients: (4, 3), (8, 3)" in text
    assert text.endswith("Memory · model mlp · cpu.")


def test_horizontal_bars_pair_each_category_with_its_value_and_a_long_series_says_how_many_more():
    steps = list(range(alt_text.MAX_POINTS + 5))
    psi = go.Bar(name="PSI", x=[0.01], y=["age"], orientation="h")
    figure = go.Figure([psi, go.Scatter(name="loss", x=steps, y=steps)])
    text = alt_text.describe(figure, "caption")
    assert "PSI: (age, 0.01)" in text
    assert text.count("(", text.index("loss:")) == alt_text.MAX_POINTS and "and 5 more" in text
