"""Study-mode layout in a real Chromium, at a projector's and a laptop's size.

Each lab's main figure is on screen without scrolling, with presentation mode on and
off; no button, toggle or control label is cut off; presentation mode survives a lab
switch; inside every chart, no legend, title, caption, axis title or tick label prints over
another or runs off the chart, and the plot keeps room. Screenshots of every lab in
presentation mode land in artifacts/screenshots/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from explorers import graphs
from tests.e2e.test_browser import BUILT, FIGURE_SELECTORS, wait_for_app

pytestmark = pytest.mark.e2e

VIEWPORTS = {"1080p": (1920, 1080), "laptop": (1280, 800)}
# The figure's top must leave most of it on screen: a figure starting below this share
# of the window shows little more than its title.
FIGURE_TOP_WITHIN = 0.55
MIN_TEXT_PX = 15.9
TRUNCATED_LABELS = """() => [...document.querySelectorAll(
    "[data-testid='stMain'] button p, [data-testid='stWidgetLabel'] p, [data-testid='stMain'] h3")]
  .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
  .map(e => e.innerText)"""
# A plotly title does not wrap: one wider than its chart runs off the edge and is clipped.
CLIPPED_CHART_TITLES = """() => [...document.querySelectorAll(".js-plotly-plot")].flatMap(chart => {
    const box = chart.getBoundingClientRect();
    return [...chart.querySelectorAll(".gtitle")]
      .filter(t => { const r = t.getBoundingClientRect(); return r.right > box.right + 1 || r.left < box.left - 1; })
      .map(t => t.textContent); })"""


# Every part of every plotly chart that holds text, with its box; and each plot area's height.
CHART_PARTS = """() => [...document.querySelectorAll("[data-testid='stPlotlyChart']")].map(chart => {
    const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const parts = [];
    const kinds = [["g.legend", "legend"], [".gtitle", "title"], ["g.annotation", "annotation"],
                   [".xtitle", "x axis title"], [".ytitle", "y axis title"], [".xtick text", "x tick"],
                   [".ytick text", "y tick"]];
    for (const [selector, kind] of kinds) {
      for (const e of chart.querySelectorAll(selector)) {
        const r = e.getBoundingClientRect();
        if (r.width > 0 && r.height > 0 && e.textContent.trim())
          parts.push({kind, text: e.textContent.trim().slice(0, 60), box: box(e)});
      }
    }
    const title = chart.querySelector(".gtitle");
    return {title: title ? title.textContent : "(untitled)", chart: box(chart.querySelector(".main-svg")), parts,
            plots: [...chart.querySelectorAll(".nsewdrag")].map(e => e.getBoundingClientRect().height)};
  })"""
MIN_PLOT_PX = 120
OVERLAP_PX = 1  # boxes may touch


def _overlap(a, b) -> bool:
    return (
        a[0] < b[2] - OVERLAP_PX and b[0] < a[2] - OVERLAP_PX and a[1] < b[3] - OVERLAP_PX and b[1] < a[3] - OVERLAP_PX
    )


def chart_problems(chart: dict) -> list[str]:
    """What prints over what, what runs off the chart, and a plot too flat to read."""
    name, parts, edge = chart["title"][:40], chart["parts"], chart["chart"]
    problems = [f"{name}: plot area {h:.0f} px tall" for h in chart["plots"] if h < MIN_PLOT_PX]
    for i, a in enumerate(parts):
        outside = a["box"][0] < edge[0] - 1 or a["box"][2] > edge[2] + 1 or a["box"][1] < edge[1] - 1
        if outside or a["box"][3] > edge[3] + 1:
            problems.append(f"{name}: {a['kind']} {a['text']!r} runs off the chart")
        problems += [
            f"{name}: {a['kind']} {a['text']!r} prints over {b['kind']} {b['text']!r}"
            for b in parts[i + 1 :]
            if _overlap(a["box"], b["box"])
        ]
    return problems


def settled_charts(window, tries: int = 30) -> list[dict]:
    """The charts once the page has finished drawing: a lab's later charts wait for its runs."""
    wait_for_app(window)
    count = -1
    for _ in range(tries):
        again = window.locator("[data-testid='stPlotlyChart'] .main-svg").count()
        if again == count:
            break
        count = again
        window.wait_for_timeout(1_500)
        wait_for_app(window)
    return window.evaluate(CHART_PARTS)


def _settled_top(window, figure, tries: int = 20) -> float:
    """The figure's top once two reads half a second apart agree: a loaded browser may still be laying out."""
    top = figure.bounding_box()["y"]
    for _ in range(tries):
        window.wait_for_timeout(500)
        again = figure.bounding_box()["y"]
        if again == top:
            return top
        top = again
    return top


@pytest.fixture()
def window(browser, request):
    width, height = VIEWPORTS[request.param]
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(45_000)
    yield page
    context.close()


@pytest.mark.parametrize("window", list(VIEWPORTS), indirect=True)
@pytest.mark.parametrize("present", [False, True], ids=["normal", "presenting"])
@pytest.mark.parametrize("lab", BUILT, ids=[lab.slug for lab in BUILT])
def test_main_figure_is_on_screen_and_no_label_is_cut(window, server_url, screenshots, lab, present):
    """No control label is cut; in every chart, no legend, title, caption, axis title or tick label prints over
    another or runs off the chart, and each plot area keeps MIN_PLOT_PX."""
    window.goto(f"{server_url}/{lab.url_path}?present={int(present)}")
    wait_for_app(window)
    figure = window.locator(FIGURE_SELECTORS[lab.figure]).first
    figure.wait_for(state="visible")
    height = window.viewport_size["height"]
    top = _settled_top(window, figure)
    if not 0 <= top < FIGURE_TOP_WITHIN * height:  # keep what the window showed, to see why
        window.screenshot(path=screenshots / f"{lab.slug}-{'presenting' if present else 'normal'}-failed.png")
    assert 0 <= top < FIGURE_TOP_WITHIN * height, f"main figure starts at {top:.0f} px of {height}"
    assert window.evaluate(TRUNCATED_LABELS) == []
    assert window.evaluate(CLIPPED_CHART_TITLES) == []
    if lab.figure == "graph":  # node text: 13 pt in the SVG, times how much the browser scaled the image
        drawn = figure.evaluate("img => img.getBoundingClientRect().width / img.naturalWidth")
        text_px = float(graphs.FONT_SIZE) * 96 / 72 * drawn
        assert text_px >= MIN_TEXT_PX, f"graph text is {text_px:.1f} px"
    if present and window.viewport_size["width"] == 1920:
        window.screenshot(path=screenshots / f"{lab.slug}-presenting.png")
    # Issue 21: legends over titles and captions, squeezed plots, merged tick labels, captions cut off.
    problems = [problem for chart in settled_charts(window) for problem in chart_problems(chart)]
    if problems:  # keep what the window showed, to see why
        name = f"{lab.slug}-{window.viewport_size['width']}-{'presenting' if present else 'normal'}-charts-failed.png"
        window.screenshot(path=screenshots / name, full_page=True)
    assert not problems, "\n".join(problems)


def test_presentation_mode_survives_a_lab_switch(page, server_url):
    page.goto(f"{server_url}/{BUILT[0].url_path}")
    wait_for_app(page)
    page.get_by_text("Presentation mode").click()
    wait_for_app(page)
    expect(page.get_by_text("Settings", exact=True)).to_be_visible()
    page.get_by_test_id("stExpandSidebarButton").click()
    page.get_by_role("link", name=BUILT[1].title).click()
    wait_for_app(page)
    expect(page.get_by_text("Settings", exact=True)).to_be_visible()
    page.wait_for_url(re.compile(r"present=1"))
