"""Every page in pages/ (and the home page) runs without an exception: a new page is covered by existing."""

import functools

import pytest

from tests.app.conftest import PAGES, open_page
from ui import docs, mock, plan
from ui.catalogue import LABS


@pytest.mark.parametrize("page", [None, *PAGES], ids=["home", *PAGES])
def test_page_runs_without_exception(page):
    at = open_page(page)
    assert not at.exception, at.exception
    assert at.title, "every page has a title"


def test_every_page_file_is_on_the_lab_map_or_is_the_study_plan_the_mock_interview_or_the_docs():
    assert sorted([*(lab.page for lab in LABS if lab.page), plan.PAGE, mock.PAGE, docs.PAGE]) == PAGES


def test_home_lists_every_lab_and_the_environment():
    at = open_page(None)
    text = " ".join(m.value for m in at.markdown)
    for lab in LABS:
        assert lab.question in text
    facts = at.table[0].value
    assert "torch" in facts["fact"].tolist() and "graph layout engine" in facts["fact"].tolist()


def settings_folded(at) -> bool:
    return any(expander.label == "Settings" for expander in at.expander)


LAB_PAGES = sorted(lab.page for lab in LABS if lab.page)


@pytest.mark.parametrize("page", LAB_PAGES)
def test_presentation_mode_folds_the_settings_away_and_stays_in_the_link(page):
    at = open_page(page)
    assert not settings_folded(at)  # drawn in a bordered box
    tables = len(at.dataframe) + len(at.table)
    at.toggle(key="presenting-toggle").set_value(True).run()
    assert not at.exception and settings_folded(at)
    assert at.query_params["present"] == "1"
    # a data grid draws on a canvas at a fixed size: presenting shows plain tables, whose text grows
    assert len(at.dataframe) == 0 and len(at.table) == tables
    reopened = open_page(page, {"present": "1"})
    assert settings_folded(reopened) and not reopened.warning
    assert reopened.toggle(key="presenting-toggle").value


def test_presentation_mode_stays_on_across_labs_and_off_when_turned_off():
    at = open_page(LAB_PAGES[0])
    at.toggle(key="presenting-toggle").set_value(True).run()
    for page in LAB_PAGES[1:]:
        at.switch_page(page).run()
        assert not at.exception and settings_folded(at), page
        assert at.toggle(key="presenting-toggle").value and at.query_params["present"] == "1"
    at.toggle(key="presenting-toggle").set_value(False).run()
    at.switch_page(LAB_PAGES[0]).run()
    assert not settings_folded(at) and at.query_params["present"] == "0"


def test_a_bad_presentation_value_in_the_link_gets_a_notice_and_the_default():
    at = open_page(LAB_PAGES[0], {"present": "maybe"})
    assert not at.exception and not settings_folded(at)
    assert any("present" in w.value for w in at.warning)


# One value of each kind that no field type accepts: an int, a float, a choice, a flag and a list of
# steps each refuse it. Which field types a value reaches is the lab's own table, read from its link.
HOSTILE_VALUES = {
    "markup": "<img src=x onerror=alert(1)>`**bold**`\n# heading",
    "number out of every range": "1e309",
    "over-long": "9" * 5_000,
}


def slug_of(page: str) -> str:
    return next(lab.slug for lab in LABS if lab.page == page)


@functools.cache
def clean_lab(page: str) -> tuple[dict[str, str], dict[str, object]]:
    """A lab opened without a link: the link it writes (every field), and each field's state."""
    at = open_page(page)
    query = {name: value for name, value in at.query_params.items() if name != "present"}
    return query, {name: at.session_state[f"{slug_of(page)}.{name}"] for name in query}


@pytest.mark.parametrize("hostile", HOSTILE_VALUES)
@pytest.mark.parametrize("page", LAB_PAGES)
def test_a_hostile_value_in_every_field_gets_a_notice_each_and_the_page_runs_on_its_defaults(page, hostile):
    query, defaults = clean_lab(page)
    at = open_page(page, dict.fromkeys(query, HOSTILE_VALUES[hostile]))
    assert not at.exception, at.exception
    notices = [w.value for w in at.warning if "using the default" in w.value or "too long" in w.value]
    assert len(notices) == len(query), notices
    assert {name: at.session_state[f"{slug_of(page)}.{name}"] for name in query} == defaults
    assert {name: at.query_params[name] for name in query} == query  # the link is written back repaired
