"""Figures with what a note taker needs: a caption stating the settings, and an export."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from explorers import environment, graphs

FONT_SIZE = 16  # plotly's 12 is unreadable on a projector


def caption(what: str, settings: Mapping[str, Any], device: str) -> str:
    described = " · ".join(f"{name} {value}" for name, value in settings.items())
    return f"{what} · {described} · {environment.provenance(device)}"


def graph(dot_source: str, caption_text: str, file_stem: str) -> None:
    """Draw a DOT graph in the browser and offer it as SVG and PNG, laid out on the server."""
    st.graphviz_chart(dot_source, width="content")
    st.caption(caption_text)
    if graphs.layout_engine_name() is None:
        st.caption("No Graphviz layout engine here, so no image export: `pip install graphviz-pure`.")
        return
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
    """A plotly chart whose toolbar camera saves a 2x PNG named after the lab.

    `key` is for a chart redrawn within one run as its data arrives: each draft needs its own.
    """
    figure.update_layout(font={"size": FONT_SIZE, "color": "#222"}, template="plotly_white")
    if figure.layout.margin.t is None:  # a figure that sets its own margins keeps them
        figure.update_layout(margin={"t": 50, "b": 40, "l": 60, "r": 20})
    config = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": file_stem, "scale": 2}}
    st.plotly_chart(figure, config=config, key=key or f"{file_stem}-chart", theme=None)  # keep our projector-size fonts
    st.caption(caption_text)


def why_panel(lines: Sequence[str]) -> None:
    st.subheader("Why")
    st.markdown("\n".join(f"- {line}" for line in lines))


def predict_then_reveal(key: str, question: str, choices: Sequence[str], answer: str, evidence: str) -> None:
    """Ask first; the live evidence appears only once the reader has committed to an answer."""
    st.subheader("Predict, then reveal")
    choice = st.radio(question, choices, index=None, key=key)
    if choice is None:
        st.caption("Pick an answer to see what PyTorch does.")
    elif choice == answer:
        st.success(f"Right. {evidence}")
    else:
        st.error(f"Not quite: **{answer}**. {evidence}")


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "_(empty)_"
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(row[h]) for h in header) + " |" for row in rows]
    return "\n".join(lines)


def notes_download(title: str, caption_text: str, sections: Mapping[str, str], file_stem: str) -> None:
    """One click: the settings, the lesson and the tables of this run, as markdown."""
    body = [f"# {title}", "", caption_text, ""]
    for heading, text in sections.items():
        body += [f"## {heading}", "", text, ""]
    st.download_button(
        "⬇ Notes (.md)",
        "\n".join(body),
        f"{file_stem}-notes.md",
        mime="text/markdown",
        on_click="ignore",
        key=f"{file_stem}-notes",
    )
