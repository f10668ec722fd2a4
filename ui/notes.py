"""One self-contained HTML file of notes per lab: settings, answer card, lesson, figures and tables.

A page's figures register here as they are drawn (`ui.figures` does it), so the export
holds exactly what the page showed in this run. The file needs nothing online: graphs
are inline SVG, and charts are drawn by the plotly.js bundled in the file, then turned
into plain images so they can be copied into a notes app.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import plotly.graph_objects as go
import plotly.offline
import streamlit as st

from explorers.cards import AnswerCard

STATE_KEY = "_notes"


@dataclass
class Notes:
    """Each figure once, by name, in its last state: a chart redrawn as its data arrives replaces its drafts."""

    # name -> (caption, figure), serialised on export
    charts: dict[str, tuple[str, go.Figure]] = field(default_factory=dict)
    graphs: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (caption, SVG text)
    card: AnswerCard | None = None


def begin() -> None:
    """A fresh collection for this script run (a rerun redraws every figure)."""
    st.session_state[STATE_KEY] = Notes()


def _current() -> Notes:
    return st.session_state.setdefault(STATE_KEY, Notes())


def add_chart(name: str, caption: str, figure: go.Figure) -> None:
    """Record a chart under `name`; drawn again under the same name, the new one replaces it (in its place)."""
    _current().charts[name] = (caption, figure)


def add_graph(name: str, caption: str, svg: str) -> None:
    _current().graphs[name] = (caption, svg)


def add_card(card: AnswerCard) -> None:
    _current().card = card


def collected() -> Notes:
    return _current()


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { margin-bottom: 0.2rem; } .caption { color: #666; font-size: 0.9rem; }
figure { margin: 1.5rem 0; } figure img, figure svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 0.9rem; } td, th { border: 1px solid #ddd; padding: 0.25rem 0.5rem; }
.card dt { font-weight: bold; margin-top: 0.6rem; } code { background: #f4f4f4; padding: 0 0.2rem; }
pre { background: #f4f4f4; padding: 0.6rem; overflow-x: auto; } pre code { padding: 0; white-space: pre; }
"""
# Draw each chart with the bundled plotly.js, then swap it for a static image a notes app can paste.
DRAW_CHARTS = """
for (const holder of document.querySelectorAll('div[data-figure]')) {
  const figure = JSON.parse(holder.dataset.figure);
  Plotly.newPlot(holder, figure.data, figure.layout, {staticPlot: true})
    .then(plot => Plotly.toImage(plot, {format: 'svg', width: 900, height: figure.layout.height || 450}))
    .then(url => { holder.outerHTML = '<img alt="chart" src="' + url + '">'; });
}
"""


def document(title: str, caption: str, sections: Mapping[str, str], notes: Notes) -> str:
    """The whole notes file as HTML text."""
    body = [f"<h1>{html.escape(title)}</h1>", f"<p class='caption'>{html.escape(caption)}</p>"]
    if notes.card is not None:
        body.append("<h2>Answer card</h2>" + card_html(notes.card))
    for heading, text in sections.items():
        body.append(f"<h2>{html.escape(heading)}</h2>{markdown_to_html(text)}")
    if notes.graphs or notes.charts:
        body.append("<h2>Figures</h2>")
    for graph_caption, svg in notes.graphs.values():
        body.append(f"<figure>{svg}<figcaption class='caption'>{html.escape(graph_caption)}</figcaption></figure>")
    for _, figure in notes.charts.values():  # a chart carries its caption inside (ui.figures.plotly)
        body.append(f"<figure><div data-figure='{html.escape(figure.to_json(), quote=True)}'></div></figure>")
    scripts = ""
    if notes.charts:
        scripts = f"<script>{plotly.offline.get_plotlyjs()}</script><script>{DRAW_CHARTS}</script>"
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}{scripts}</body></html>"
    )


def card_html(card: AnswerCard) -> str:
    parts = "".join(f"<dt>{name}</dt><dd>{inline(text)}</dd>" for name, text in card.parts().items())
    return f"<dl class='card'>{parts}</dl>"


def inline(text: str) -> str:
    """The markdown the labs use inside a sentence: **bold**, *italic*, `code` (code first: it may hold a *)."""
    parts = re.split(r"(`[^`]+`)", html.escape(text))
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(f"<code>{part[1:-1]}</code>")
        else:
            part = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", part)
            out.append(re.sub(r"\*(.+?)\*", r"<i>\1</i>", part))
    return "".join(out)


def _row(line: str, tag: str) -> str:
    return "<tr>" + "".join(f"<{tag}>{inline(c.strip())}</{tag}>" for c in line.strip().strip("|").split("|")) + "</tr>"


def markdown_to_html(text: str) -> str:
    """Bullet lists, pipe tables, fenced code and paragraphs: the shapes the labs' note sections take. Code keeps
    its lines and their indentation, and scrolls sideways on a narrow screen rather than wrap."""
    out, rows, items, code = [], [], [], None

    def flush() -> None:
        if items:
            out.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
            items.clear()
        if rows:
            header, *data = [r for r in rows if not re.fullmatch(r"\|(-+\|)+", r.replace(" ", ""))]
            lines = [_row(header, "th"), *(_row(r, "td") for r in data)]
            out.append("<table>" + "".join(lines) + "</table>")
            rows.clear()

    for line in text.splitlines():
        if code is not None:  # inside a fence: every line as it is, until the closing fence
            if line.strip() == "```":
                out.append(f"<pre><code>{html.escape(chr(10).join(code))}</code></pre>")
                code = None
            else:
                code.append(line)
        elif line.startswith("```"):
            flush()
            code = []
        elif line.startswith("|"):
            rows.append(line)
        elif line.startswith("- "):
            items.append(line[2:])
        else:
            flush()
            if line.strip():
                out.append(f"<p>{inline(line)}</p>")
    flush()
    if code is not None:  # an unclosed fence: still code
        out.append(f"<pre><code>{html.escape(chr(10).join(code))}</code></pre>")
    return "".join(out)
