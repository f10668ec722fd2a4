"""On a phone (390x844) the workbench is turned round, figure first, and the settings under it keep their order.
Every other phone check (menu closed, figure on the first screen, nothing sideways or overlapping) is in
test_layout, which reads every lab at 390x844 too."""

from __future__ import annotations

import pytest

from tests.e2e.test_browser import FIGURE_SELECTORS, wait_for_app

pytestmark = pytest.mark.e2e

PHONE = {"width": 390, "height": 844}


def test_on_a_phone_only_the_workbench_row_is_turned_round_not_the_columns_inside_its_settings(browser, server_url):
    """The figure comes before its settings, but the settings keep their order: a stacked pair of columns reads
    left column first. The rule once reversed every first row of columns inside the workbench too, so the
    Reproducibility toggles read "Seed numpy, Seed workers, Run again, Seed torch…"."""
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        page.goto(f"{server_url}/Reproducibility")
        wait_for_app(page)
        figure = page.locator(FIGURE_SELECTORS["chart"]).first
        figure.wait_for(state="visible", timeout=120_000)
        tops = {
            name: page.get_by_text(name, exact=True).first.bounding_box()["y"] for name in ("Seed torch", "Seed numpy")
        }
        assert figure.bounding_box()["y"] < tops["Seed torch"] < tops["Seed numpy"], tops
    finally:
        context.close()
