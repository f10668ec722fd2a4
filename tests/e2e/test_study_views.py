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
from tests.e2e.test_layout import WINDOWS, chart_problems, open_window, settled_charts

pytestmark = pytest.mark.e2e

VIEWS = ("phone", "laptop-normal", "1080p-presenting")
# Each ▲ marker's centre, in the order of the figure's annotations; and each step's bar column (left, right).
MARKERS_AND_COLUMNS = """() => {
    const chart = document.querySelector("[data-testid='stPlotlyChart']");
    const markers = [...chart.querySelectorAll("g.annotation")].filter(a => a.textContent.startsWith("▲"))
      .map(a => { const r = a.getBoundingClientRect(); return (r.left + r.right) / 2; });
    const columns = [];
    for (const trace of chart.querySelectorAll(".trace.bars")) {
      [...trace.querySelectorAll(".point path")].forEach((bar, step) => {
        const r = bar.getBoundingClientRect();
        if (r.width > 0) columns[step] = [r.left, r.right];
      });
    }
    return {markers, columns};
  }"""
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
    page = open_window(browser, shape, timeout_ms=60_000)
    yield page, f"present={int(shape.present)}"
    page.context.close()


def test_autograd_saved_chart_after_backward_keeps_its_plot_and_its_backward_row(view, server_url):
    page, present = view
    page.goto(f"{server_url}/Autograd?steps=forward,backward&{present}")
    charts = settled_charts(page)
    (saved,) = [chart for chart in charts if chart["title"].startswith("Saved for backward")]
    assert not chart_problems(saved), chart_problems(saved)
    rows = [part["text"] for part in saved["parts"] if part["kind"] == "y tick"]
    assert any("backward()" in row for row in rows), f"the backward row is missing: {rows}"


@pytest.fixture(scope="module")
def profiled():
    """A real profile of the lab's job, small: its steps' lengths are this machine's."""
    from explorers.profiler.experiment import ProfileOptions, profile

    return profile(ProfileOptions(width=64, warmup=1, active=3))


def test_profiler_markers_stand_on_the_bars_they_measure(view, profiled):
    """The axis is cut at the median step, so about half the bars are cut and marked; plotly.js draws the chart
    as the page would (the lab's own figure and layout), at this window's width."""
    from explorers.profiler import figures as profiler_figures
    from ui import figures

    page, present = view
    heights = [sum(s.phases.values()) + s.other_ms for s in (*profiled.warmup_steps, *profiled.steps)]
    top = sorted(heights)[len(heights) // 2]
    chart = profiler_figures.phases_figure(profiled, top=top)
    figures.lay_out(chart, "Milliseconds per step", present.endswith("1"))
    steps = [step for step, height in enumerate(heights) if height > top]  # in order, as the markers are added
    page.set_content(f"<div data-testid='stPlotlyChart'>{chart.to_html(include_plotlyjs=True, full_html=False)}</div>")
    page.wait_for_selector("g.annotation")
    drawn = page.evaluate(MARKERS_AND_COLUMNS)
    assert len(drawn["markers"]) == len(steps) >= 1
    for x, step in zip(drawn["markers"], steps, strict=True):
        left, right = drawn["columns"][step]
        assert left <= x <= right, f"step {step}'s marker stands at {x:.0f} px, its bar at {left:.0f}-{right:.0f}"


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
