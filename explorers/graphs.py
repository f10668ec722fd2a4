"""Turn DOT source into SVG or PNG bytes, with or without a system Graphviz.

The browser lays graphs out by itself (st.graphviz_chart), but a download needs a
layout engine on the server: Debian's `dot` when installed, else the `graphviz-pure`
binary from PyPI (svg and png only; it installs no `dot` command, so it is called by
name, also from the virtual environment's bin folder which may not be on PATH).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import graphviz

# Courier: with torchviz's default `monospace` the engines fall back to Times metrics
# and labels overflow their boxes.
FONT = "Courier"
FONT_SIZE = "13"  # torchviz's 10 is too small once the graph is scaled to a projector
RENDER_TIMEOUT_S = 20
PNG_DPI = 144  # sharp enough to read when a screenshot is projected


def _engine_path() -> str | None:
    for name in ("dot", "graphviz-pure"):
        found = shutil.which(name) or _venv_binary(name)
        if found:
            return found
    return None


def _venv_binary(name: str) -> str | None:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.is_file() else None


def layout_engine_name() -> str | None:
    path = _engine_path()
    return Path(path).name if path else None


def stable_ids(dot_source: str) -> str:
    """Rename torchviz's node ids (Python object ids, new every run) to n0, n1, ... in order of appearance.

    The same model then gives the same DOT text, so a shared link redraws an identical graph.
    """
    names: dict[str, str] = {}
    return re.sub(
        r"(?m)(?<![\w\"])(\d{6,})(?![\w\"])", lambda m: names.setdefault(m.group(1), f"n{len(names)}"), dot_source
    )


def with_font(dot: graphviz.Digraph) -> graphviz.Digraph:
    """Readable text at natural size: torchviz's size="12,12" would shrink a large graph (and its text) to fit."""
    dot.graph_attr.pop("size", None)
    dot.node_attr.update(fontname=FONT, fontsize=FONT_SIZE)
    dot.edge_attr.update(fontname=FONT)
    dot.graph_attr.update(fontname=FONT)
    return dot


def captioned(dot_source: str, caption: str) -> str:
    """The graph with `caption` (its settings and provenance) printed under it, as every exported chart carries its
    own: a graph attribute set last in the root graph's body, so it labels the whole graph and nothing inside it."""
    text = caption.replace("\\", "\\\\").replace('"', '\\"')
    body, brace, _ = dot_source.rstrip().rpartition("}")
    if not brace:
        raise ValueError("not a DOT graph: no closing brace")
    return f'{body}\tgraph [label="{text}" labelloc=b labeljust=l fontsize=11 fontname="{FONT}"]\n}}\n'


def render(dot_source: str, fmt: str) -> bytes:
    """Lay out `dot_source` and return the image bytes; fmt is "svg" or "png"."""
    if fmt not in ("svg", "png"):
        raise ValueError(f"unsupported format {fmt!r}; use 'svg' or 'png'")
    engine = _engine_path()
    if engine is None:
        raise RuntimeError("no Graphviz layout engine found: pip install graphviz-pure, or apt-get install graphviz")
    args = [engine, f"-T{fmt}", f"-Nfontname={FONT}"]
    if fmt == "png":
        args.append(f"-Gdpi={PNG_DPI}")
    done = subprocess.run(args, input=dot_source.encode(), capture_output=True, timeout=RENDER_TIMEOUT_S, check=False)
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(f"{Path(engine).name} failed: {done.stderr.decode(errors='replace')[:300]}")
    return done.stdout
