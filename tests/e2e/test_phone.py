"""On a phone (390x844): the menu starts closed, the main figure is on the first screen, nothing scrolls sideways,
and inside every chart nothing prints over anything else (the same check as the laptop and projector sizes)."""

from __future__ import annotations

import contextlib

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.e2e.test_browser import BUILT, FIGURE_SELECTORS, wait_for_app
from tests.e2e.test_layout import chart_problems, settled_charts

pytestmark = pytest.mark.e2e

PHONE = {"width": 390, "height": 844}
SIDEWAYS = """() => {
    const main = document.querySelector("[data-testid='stMain']");
    return main.scrollWidth - main.clientWidth;
}"""
ABOVE = """top => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stElementContainer']")]
    .filter(e => e.getBoundingClientRect().top < top && e.getBoundingClientRect().height > 100)
    .map(e => `${e.getBoundingClientRect().height.toFixed(0)} px: ${(e.innerText || '').slice(0, 60)}`)"""


FIRST_TOP = """selector => Math.min(
    ...[...document.querySelectorAll(selector)].map(e => e.getBoundingClientRect().top))"""


def first_screen_top(page, selector: str) -> float:
    """The main figure's top, allowing a moment for a chart that plotly is redrawing (for that moment its svg is
    gone and the next chart down would be measured instead: CI saw Serving's drift chart, 2,285 px down)."""
    with contextlib.suppress(PlaywrightTimeout):  # measured below, and the assertion says where it is
        page.wait_for_function(f"s => ({FIRST_TOP})(s) < {PHONE['height']}", arg=selector, timeout=5_000)
    return page.evaluate(FIRST_TOP, selector)


@pytest.mark.parametrize("lab", BUILT, ids=[lab.slug for lab in BUILT])
def test_on_a_phone_the_lab_opens_on_its_figure_with_the_menu_closed(browser, server_url, screenshots, lab):
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2)
    page = context.new_page()
    try:
        page.goto(f"{server_url}/{lab.url_path}")
        wait_for_app(page)
        menu = page.get_by_test_id("stSidebar").bounding_box()
        assert menu is None or menu["x"] + menu["width"] <= 1, f"the menu covers the lab on a phone: {menu}"
        figure = page.locator(FIGURE_SELECTORS[lab.figure]).first
        figure.wait_for(state="visible", timeout=60_000)
        # Streamlit keeps an earlier run's elements (faded) while a rerun draws: measure the settled page
        page.wait_for_function("() => !document.querySelector(\"[data-stale='true']\")", timeout=60_000)
        top = first_screen_top(page, FIGURE_SELECTORS[lab.figure])
        page.screenshot(path=screenshots / f"{lab.slug}-phone.png")
        above = page.evaluate(ABOVE, top)
        assert top < PHONE["height"], f"the main figure starts {top:.0f} px down, below the first screen, under {above}"
        overflow = page.evaluate(SIDEWAYS)
        assert overflow <= 1, f"the page scrolls {overflow} px sideways"
        problems = [problem for chart in settled_charts(page) for problem in chart_problems(chart)]
        if problems:  # keep what the phone showed, to see why
            page.screenshot(path=screenshots / f"{lab.slug}-phone-charts-failed.png", full_page=True)
        assert not problems, "\n".join(problems)
    finally:
        context.close()


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
