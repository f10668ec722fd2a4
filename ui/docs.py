"""The project's docs (docs/*.md) read inside the app, so each lab can link to its own page.

A page is named by a fixed list built from the files (`?page=labs/autograd`): nothing typed reaches
the file system. Links between docs become links to this page; images and links to files the app
cannot show (code, other folders) become their words, with the path as code.
"""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGE = "pages/15_Docs.py"
INDEX = "index"
PAGES = (INDEX, *sorted(str(p.relative_to(DOCS).with_suffix("")) for p in DOCS.rglob("*.md")))
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)]+)\)")


def title(name: str) -> str:
    """A page's first heading."""
    first = (DOCS / f"{name}.md").read_text().splitlines()[0]
    return first.lstrip("# ").strip()


def lab_page(slug: str) -> str:
    return f"labs/{slug}"


def text(name: str) -> str:
    """The page as markdown the app can show: links between docs go to this page, images are left out."""
    if name == INDEX:
        listed = "\n".join(f"- [{title(page)}](?page={page})" for page in PAGES[1:])
        return f"# Docs\n\nThe project's documentation, as it is in its `docs/` folder:\n\n{listed}\n"
    folder = (DOCS / f"{name}.md").parent
    raw = (DOCS / f"{name}.md").read_text()
    raw = _IMAGE.sub("", raw)  # the labs themselves are a click away

    def link(match: re.Match) -> str:
        words, target = match.group(1), match.group(2)
        if target.startswith(("http://", "https://", "#")):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = (folder / path).resolve()
        if resolved.suffix == ".md" and resolved.is_relative_to(DOCS):
            return f"[{words}](?page={resolved.relative_to(DOCS).with_suffix('')})"
        return f"{words} (`{target}`)"

    return _LINK.sub(link, raw)
