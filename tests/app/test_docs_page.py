"""The docs in the app: every lab links to its doc page, every doc page shows, and a lab's page names every control
the lab draws and every general statement it relies on."""

from __future__ import annotations

import importlib

import pytest

from tests.app.conftest import open_page
from ui import docs
from ui.catalogue import LABS

LAB_PAGES = [lab for lab in LABS if lab.page]
PACKAGE = {"compile": "compiled"}
ANSWERS = ("predict", "fix", "lines")  # a drill's or a prediction's choices: answers, not controls


def doc_text(slug: str) -> str:
    return (docs.DOCS / "labs" / f"{slug}.md").read_text()


@pytest.mark.parametrize("lab", LAB_PAGES, ids=lambda lab: lab.slug)
def test_a_lab_links_to_its_doc_page_which_names_its_controls_and_its_statements(lab):
    at = open_page(lab.page)
    links = [link.proto for link in at.get("page_link") if link.proto.page == "Docs"]
    assert [link.query_string for link in links if lab.title in link.label] == [f"page=labs%2F{lab.slug}"]
    text = doc_text(lab.slug)
    labels = {
        widget.proto.label
        for kind in ("slider", "select_slider", "selectbox", "toggle", "number_input", "segmented_control", "radio")
        for widget in at.get(kind)
        if (widget.key or "").startswith(f"{lab.slug}.") and widget.key.split(".", 1)[1] not in ANSWERS
    }
    missing = sorted(label for label in labels if f"| {label}" not in text)
    assert labels and not missing, missing
    lesson = importlib.import_module(f"explorers.{PACKAGE.get(lab.slug, lab.slug)}.lesson")
    for statement in lesson.STATEMENTS.values():
        assert statement.text.replace("|", "\\|") in text, statement.text


def test_every_doc_page_shows_with_its_links_kept_in_the_app():
    for name in docs.PAGES:
        at = open_page(docs.PAGE, {"page": name})
        assert not at.exception and not at.warning, name
        shown = " ".join(m.value for m in at.markdown)
        assert "](../" not in shown and ".md)" not in shown, name  # no link the app cannot follow
    index = open_page(docs.PAGE)
    assert all(f"(?page={name})" in index.markdown[-1].value for name in docs.PAGES[1:])


@pytest.mark.parametrize("asked", ["../README", "labs/../../Makefile", "/etc/passwd", "x" * 5000, "LABS/AUTOGRAD"])
def test_a_page_outside_the_docs_gets_a_notice_and_the_index(asked):
    at = open_page(docs.PAGE, {"page": asked})
    assert not at.exception and len(at.warning) == 1 and "`page`" in at.warning[0].value
    assert at.title[0].value.endswith(" Docs") and "page" not in at.query_params
