"""Figures with what a note taker needs: a caption stating the settings, and an export."""

from __future__ import annotations

import base64
import functools
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from explorers import environment, graphs, units
from explorers.cards import AnswerCard
from ui import drill, notes
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


def _graph_image(dot_source: str, scale: float) -> str:
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
        f'<img alt="autograd graph" width="{width}" height="{height}" '
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
    image = _graph_image(dot_source, PRESENTING_GRAPH_SCALE if presenting() else 1.0)
    # focusable: a graph larger than its box scrolls, and a keyboard must reach it too (axe-core)
    st.html(f"<div class='graph' tabindex='0' role='region' aria-label='graph, scrollable'>{image}</div>")
    notes.add_graph(caption_text, _svg(dot_source))
    st.caption(caption_text)
    svg, png = st.columns(2)
    svg.download_button(
        "⬇ Graph as SVG",
        lambda: graphs.render(dot_source, "svg"),
        f"{file_stem}.svg",
        mime="image/svg+xml",
        on_click="ignore",
        key=f"{file_stem}-svg",
    )
    png.download_button(
        "⬇ Graph as PNG",
        lambda: graphs.render(dot_source, "png"),
        f"{file_stem}.png",
        mime="image/png",
        on_click="ignore",
        key=f"{file_stem}-png",
    )


def plotly(figure: go.Figure, caption_text: str, file_stem: str, key: str | None = None) -> None:
    """A plotly chart that carries its caption (settings, device, torch) inside the figure.

    The caption is drawn in the figure's bottom margin, so a PNG saved with the toolbar's
    camera (2x, named after the lab) still says what produced it. Presenting grows the
    fonts and the height. `key` is for a chart redrawn within one run as its data
    arrives: each draft needs its own.
    """
    present = presenting()
    size = PRESENTING_FONT_SIZE if present else FONT_SIZE
    # plotly draws titles at 1.4x the font, which pushes long ones off a half-width chart; 1.15x still stands out
    figure.update_layout(font={"size": size, "color": "#222"}, title_font_size=round(1.15 * size))
    if figure.layout.margin.t is None:  # a figure that sets its own margins keeps them
        figure.update_layout(margin={"t": 60, "l": 70, "r": 20})
    if present and figure.layout.height:
        figure.update_layout(height=round(figure.layout.height * PRESENTING_HEIGHT_SCALE))
    _add_caption(figure, caption_text)
    notes.add_chart(caption_text, figure)
    config = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": file_stem, "scale": 2}}
    st.plotly_chart(figure, config=config, key=key or f"{file_stem}-chart", theme=None)  # keep our projector-size fonts


CAPTION_FONT_SIZE = 13
CAPTION_LINE_CHARS = 56  # wrapped by hand (annotations do not wrap): fits a half-width chart at 1280 px


def _add_caption(figure: go.Figure, text: str) -> None:
    """The caption as an annotation below the x axis, with the bottom margin grown to hold it."""
    lines = textwrap.wrap(text, CAPTION_LINE_CHARS) or [""]
    # Room below the plot for tick labels and the axis title: what the figure planned, else a default.
    axis_room = figure.layout.margin.b or (80 if figure.layout.xaxis.title.text else 50)
    caption_room = 8 + round(CAPTION_FONT_SIZE * 1.35 * len(lines))
    figure.update_layout(margin={"b": axis_room + caption_room})
    figure.update_xaxes(automargin=False)  # the margin is planned here; plotly growing it would move the caption
    figure.add_annotation(
        text="<br>".join(lines),
        xref="paper",
        yref="paper",
        x=0,
        y=0,
        xanchor="left",
        yanchor="top",
        yshift=-axis_room,
        xshift=8 - (figure.layout.margin.l or 80),  # from the figure's left edge, not the plot's: more room
        align="left",
        showarrow=False,
        font={"size": CAPTION_FONT_SIZE, "color": "#555"},
    )


def why_panel(lines: Sequence[str]) -> None:
    st.subheader("Why")
    st.markdown("\n".join(f"- {line}" for line in lines))


def predict_then_reveal(key: str, question: str, choices: Sequence[str], answer: str, evidence: str) -> None:
    """Ask first; the live evidence appears only once the reader has committed to an answer.

    The first answer to each question counts towards the session's drill score (the study
    plan page shows it); changing it afterwards still reveals, but does not rescore.
    """
    st.subheader("Predict, then reveal")
    choice = st.radio(question, choices, index=None, key=key)
    if choice is None:
        st.caption("Pick an answer to see what PyTorch does.")
    else:
        drill.record(key, question, choice == answer)
        if choice == answer:
            st.success(f"Right. {evidence}")
        else:
            st.error(f"Not quite: **{answer}**. {evidence}")
    right, asked = drill.score()
    if asked:
        st.caption(f"Drill score this session: {right} of {asked} first answers right.")


def answer_card(card: AnswerCard) -> None:
    """The interview answer in four parts, with this run's evidence, and a timer to say it aloud."""
    notes.add_card(card)
    st.subheader("Answer card")
    with st.container(border=True):
        st.markdown(f"**{card.question}**")
        st.markdown(card.as_markdown())
    drill.timer()


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as a markdown table, numbers written for people: 3 significant figures, no 'nan', no 'None'."""
    if not rows:
        return "_(empty)_"
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(row[h]) for h in header) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return units.format_number(value)
    return str(value).replace("|", "/")


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
