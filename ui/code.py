"""A code block that keeps its indentation on a phone: highlighted here, numbered, scrolling sideways.

Streamlit's `st.code` is made to wrap (assets/style.css: a scroll region must take keyboard focus,
which its block cannot), and a wrapped line of a training loop starts at column 0 on a phone: a
line inside the loop reads as if it were outside. This block scrolls instead, and takes focus.
The source is our own (a drill's loop), highlighted by Pygments and escaped by it.
"""

from __future__ import annotations

import html

import streamlit as st
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

STYLE = "vs"  # Visual Studio's light colours: each at least 4.5:1 on the block's background (axe-core)


def numbered_html(source: str) -> str:
    """The source as highlighted HTML lines, each with its number (not copied with the code)."""
    lines = highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, nowrap=True, style=STYLE)).split("\n")
    lines = lines[: len(source.rstrip("\n").split("\n"))]
    width = len(str(len(lines)))
    return "\n".join(f"<span class='ln'>{i:>{width}}</span>{line}" for i, line in enumerate(lines, 1))


def python_block(source: str, label: str) -> None:
    """Draw `source` numbered; `label` names the block for a screen reader."""
    st.html(
        f"<div class='code-block' tabindex='0' role='region' aria-label='{html.escape(label, quote=True)}'>"
        f"<pre>{numbered_html(source)}</pre></div>"
    )
