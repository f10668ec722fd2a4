"""Issue 21's checks that need a lab in a given state or a click, each on a phone (390x844), a laptop (1280x800)
and a projector (1920x1080, presenting):
- Autograd's "saved for backward" chart after forward → backward() keeps a readable plot and its backward row;
- Profiler's ▲ marker stands on the bar it measures (a category "1.4" was once read as the position 1.4);
- the notes file holds each figure on the page once, in its final state (not every draft drawn while results came);
- the drill comes before the answer card, which states its answer;
- after a click on a lifecycle button, no tooltip covers another control.
Every lab's layout, text and accessibility checks are in test_layout.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.test_browser import wait_for_app
from tests.e2e.test_layout import WINDOWS, chart_problems, settled_charts

pytestmark = pytest.mark.e2e

VIEWS = ("phone", "laptop-normal", "1080p-presenting")
# Each ▲ marker's centre, and the columns of bars in its chart: their left, right and top, and the plot's top.
MARKERS_AND_BARS = """() => [...document.querySelectorAll("[data-testid='stPlotlyChart']")].map(chart => {
    const markers = [...chart.querySelectorAll("g.annotation")].filter(a => a.textContent.startsWith("▲"))
      .map(a => { const r = a.getBoundingClientRect(); return {text: a.textContent, x: (r.left + r.right) / 2}; });
    const bars = [...chart.querySelectorAll(".trace.bars .point path")].map(p => p.getBoundingClientRect())
      .filter(r => r.height > 0).map(r => [r.left, r.right, r.top]);
    const plot = chart.querySelector(".nsewdrag");
    return {markers, bars, plotTop: plot ? plot.getBoundingClientRect().top : 0};
  }).filter(chart => chart.markers.length)"""
TOOLTIPS_OVER_CONTROLS = """() => {
    const shown = [...document.querySelectorAll("[data-testid='stTooltipContent'], [role='tooltip']")]
      .filter(t => t.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}))
      .map(t => t.getBoundingClientRect()).filter(r => r.width > 0 && r.height > 0);
    const controls = [...document.querySelectorAll("[data-testid='stMain'] button, [data-testid='stMain'] input")]
      .filter(c => c.checkVisibility())
      .map(c => [c.innerText || c.getAttribute("aria-label") || "", c.getBoundingClientRect()]);
    return shown.flatMap(t => controls.filter(([, c]) =>
      t.left < c.right && c.left < t.right && t.top < c.bottom && c.top < t.bottom).map(([name]) => name));
  }"""


@pytest.fixture(params=VIEWS)
def view(browser, request):
    shape = WINDOWS[request.param]
    phone = {"is_mobile": True, "has_touch": True} if shape.phone else {}
    context = browser.new_context(viewport={"width": shape.width, "height": shape.height}, **phone)
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page, f"present={int(shape.present)}"
    context.close()


def test_autograd_saved_chart_after_backward_keeps_its_plot_and_its_backward_row(view, server_url):
    page, present = view
    page.goto(f"{server_url}/Autograd?steps=forward,backward&{present}")
    charts = settled_charts(page)
    (saved,) = [chart for chart in charts if chart["title"].startswith("Saved for backward")]
    assert not chart_problems(saved), chart_problems(saved)
    rows = [part["text"] for part in saved["parts"] if part["kind"] == "y tick"]
    assert any("backward()" in row for row in rows), f"the backward row is missing: {rows}"


def test_profiler_markers_stand_on_the_bars_they_measure(view, server_url):
    page, present = view
    page.goto(f"{server_url}/Profiler?warmup=0&{present}")  # a first step pays one-off costs: likely cut
    settled_charts(page)
    charts = page.evaluate(MARKERS_AND_BARS)
    if not charts:
        pytest.skip("no step in this run was long enough to be cut and marked")
    for chart in charts:
        for marker in chart["markers"]:
            under = [bar for bar in chart["bars"] if bar[0] <= marker["x"] <= bar[1]]
            assert under, f"{marker['text']} stands over no bar"
            assert min(top for *_, top in under) <= chart["plotTop"] + 1, f"{marker['text']} stands over an uncut bar"


def test_the_notes_file_holds_each_figure_on_the_page_once(view, server_url, tmp_path):
    page, present = view
    page.goto(f"{server_url}/Memory?{present}")  # its batch-size chart is redrawn as each batch's result arrives
    settled_charts(page)
    drawn = page.locator("[data-testid='stPlotlyChart'], div.graph").count()
    download = page.get_by_role("button", name="Notes (.html)")
    download.scroll_into_view_if_needed()
    with page.expect_download() as started:
        download.click()
    notes = tmp_path / "notes.html"
    started.value.save_as(notes)
    assert notes.read_text().count("<figure>") == drawn >= 2


def test_the_drill_comes_before_the_answer_card_that_states_its_answer(view, server_url):
    page, present = view
    page.goto(f"{server_url}/Autograd?{present}")
    wait_for_app(page)
    drill = page.get_by_role("heading", name="Predict, then reveal").bounding_box()
    card = page.get_by_role("heading", name="Answer card").bounding_box()
    assert drill["y"] < card["y"]


def test_after_a_click_no_tooltip_covers_a_lifecycle_button(view, server_url):
    page, present = view
    page.goto(f"{server_url}/Autograd?{present}")
    wait_for_app(page)
    for name in ("backward()", "forward"):
        button = page.get_by_role("button", name=name, exact=True)
        button.click()
        wait_for_app(page)
        button.hover()
        page.wait_for_timeout(1_200)  # a tooltip shows after a hover delay
        assert page.evaluate(TOOLTIPS_OVER_CONTROLS) == []
    expect(page.get_by_text("forward → backward() → forward").first).to_be_visible()
