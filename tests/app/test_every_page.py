"""Every page in pages/ (and the home page) runs without an exception: a new page is covered by existing."""

import pytest

from tests.app.conftest import PAGES, open_page
from ui.catalogue import LABS


@pytest.mark.parametrize("page", [None, *PAGES], ids=["home", *PAGES])
def test_page_runs_without_exception(page):
    at = open_page(page)
    assert not at.exception, at.exception
    assert at.title, "every page has a title"


def test_every_page_file_is_on_the_lab_map():
    assert sorted(lab.page for lab in LABS if lab.page) == PAGES


def test_home_lists_every_lab_and_the_environment():
    at = open_page(None)
    text = " ".join(m.value for m in at.markdown)
    for lab in LABS:
        assert lab.question in text
    facts = at.table[0].value
    assert "torch" in facts["fact"].tolist() and "graph layout engine" in facts["fact"].tolist()
