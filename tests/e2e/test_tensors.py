"""Tensor drills in Chromium: an answer built by tapping on a phone, checked, its trace drawn; and a checked answer
read whole at the three windows (no sideways scroll, the verdict and trace on screen, axe-core clean)."""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_accessibility import serious_violations, settle_for_axe
from tests.e2e.test_browser import FIGURE_SELECTORS, wait_for_app
from tests.e2e.test_layout import SIDEWAYS, WINDOWS, chart_problems, open_window, settled_charts

pytestmark = pytest.mark.e2e

CHART = FIGURE_SELECTORS["chart"]


def test_on_a_phone_the_palette_builds_an_answer_by_tapping_alone_and_check_draws_its_trace(browser, server_url):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        page.goto(f"{server_url}/Tensor_drills?puzzle=residuals&seed=2")
        wait_for_app(page)
        page.get_by_text("Palette: build the expression by tapping").click()
        page.locator("[data-testid='stButtonGroup'] button", has_text=re.compile(r"^p$")).click()
        page.wait_for_function("() => new URLSearchParams(location.search).get('answer') === 'p'")
        op = page.get_by_role("combobox", name="Op", exact=True)
        op.click()
        op.press_sequentially("index", delay=50)  # typed to filter the list, as a phone's keyboard would
        page.get_by_role("option", name=re.compile(r"\] index$")).click(timeout=60_000)
        page.wait_for_function("() => !document.querySelector('[role=listbox]')")  # the choice is taken
        page.locator("[data-testid='stButtonGroup'] button", has_text=re.compile(r"^:, 0$")).click()
        page.wait_for_function("() => [...document.querySelectorAll('input')].some(i => i.value === ':, 0')")
        page.get_by_role("button", name="Add", exact=True).click()
        page.wait_for_function("() => new URLSearchParams(location.search).get('answer') === 'p[:, 0]'")
        page.get_by_role("button", name="Check my answer").click()
        page.locator(CHART).first.wait_for(state="visible", timeout=60_000)
        assert page.get_by_text("On the drawn input").count() == 1  # p[:, 0] is not y - p[:, 0]: values differ
        assert page.evaluate(SIDEWAYS) <= 1
    finally:
        context.close()


@pytest.mark.parametrize("name", list(WINDOWS))
def test_a_checked_answer_reads_whole_with_its_trace_at_every_window(browser, server_url, screenshots, name):
    shape = WINDOWS[name]
    page = open_window(browser, shape, timeout_ms=45_000)
    try:
        page.goto(f"{server_url}/Tensor_drills?puzzle=merge_heads&seed=1&present={int(shape.present)}")
        wait_for_app(page)
        box = page.get_by_role("textbox", name="Your answer: one expression")
        box.fill("y.transpose(1, 2).view(B, T, H * D)")
        box.press("Enter")
        page.wait_for_function("() => new URLSearchParams(location.search).has('answer')")
        page.get_by_role("button", name="Check my answer").click()
        page.locator(CHART).first.wait_for(state="visible", timeout=60_000)
        assert page.get_by_text("PyTorch raised an error").count() == 1
        settle_for_axe(page)
        page.locator(CHART).first.scroll_into_view_if_needed()
        page.screenshot(path=screenshots / f"tensors-checked-{name}.png")
        assert page.evaluate(SIDEWAYS) <= 1
        assert not serious_violations(page)
        assert not [problem for chart in settled_charts(page) for problem in chart_problems(chart)]
        # a trace of new tensors alone: its legend has one entry, which once printed over the caption
        box.fill("y.reshape(B, T, H * D) + 0")
        box.press("Enter")
        page.wait_for_function("() => new URLSearchParams(location.search).get('answer').endsWith('+ 0')")
        page.get_by_role("button", name="Check my answer").click()
        page.get_by_text("Checked: y.reshape(B, T, H * D) + 0").wait_for(timeout=60_000)
        settle_for_axe(page)
        assert not [problem for chart in settled_charts(page) for problem in chart_problems(chart)]
    finally:
        page.context.close()
