"""Open every page in a real Chromium: no exception box, and the main figure is drawn."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ui.catalogue import LABS

pytestmark = pytest.mark.e2e

FIGURE_SELECTORS = {
    "graph": "div.graph img",  # laid out on the server (ui.figures.graph)
    "chart": "[data-testid='stPlotlyChart'] .main-svg",
    "task": ".st-key-lab-task",  # a drill's task and its inputs (ui/catalogue.py)
}
BUILT = [lab for lab in LABS if lab.page]


def wait_for_app(page) -> None:
    """Until the script has run and drawn: a title, no running indicator, every plotly chart rendered."""
    expect(page.locator("h1").first).to_be_visible(timeout=60_000)
    # The status widget is hidden with toolbarMode "minimal"; the app root carries the script state.
    expect(page.locator("[data-testid='stApp'][data-test-script-state='notRunning']")).to_have_count(1, timeout=60_000)
    page.wait_for_function(
        """() => [...document.querySelectorAll("[data-testid='stPlotlyChart']")]
                 .every(chart => chart.querySelector('.main-svg'))""",
        timeout=60_000,
    )


def save_screenshots(page, folder, name: str) -> None:
    """What a projector shows first (one screen), then the whole lab on a tall window, for review."""
    page.screenshot(path=folder / f"{name}-screen.png")
    page.set_viewport_size({"width": 1600, "height": 3400})
    wait_for_app(page)
    page.wait_for_timeout(500)  # let charts settle into the new width
    page.get_by_test_id("stMainBlockContainer").screenshot(path=folder / f"{name}-full.png")


def test_home_lists_every_lab_and_the_machine(page, server_url, screenshots):
    page.goto(server_url)
    wait_for_app(page)
    for lab in LABS:
        expect(page.get_by_text(lab.question).first).to_be_visible()
    expect(page.get_by_text("graph layout engine")).to_be_visible()
    assert page.locator("[data-testid='stException']").count() == 0
    save_screenshots(page, screenshots, "home")


@pytest.mark.parametrize("lab", BUILT, ids=[lab.slug for lab in BUILT])
def test_lab_draws_its_main_figure_without_errors(page, server_url, screenshots, lab):
    page.goto(f"{server_url}/{lab.url_path}")
    wait_for_app(page)
    figure = page.locator(FIGURE_SELECTORS[lab.figure]).first
    figure.wait_for(state="visible")
    assert page.locator("[data-testid='stException']").count() == 0
    save_screenshots(page, screenshots, lab.slug)


def test_autograd_link_and_graph_export_work_in_the_browser(page, server_url, browser):
    page.goto(f"{server_url}/Autograd")
    wait_for_app(page)
    page.get_by_role("button", name="backward()", exact=True).click()
    expect(page).to_have_url(re.compile(r"steps=forward%2Cbackward|steps=forward,backward"), timeout=30_000)
    expect(page.get_by_test_id("stMetricValue").first).to_have_text("0 B")
    with page.expect_download() as download:
        page.get_by_role("button", name="Graph as SVG").click()
    svg = Path(download.value.path()).read_text()
    assert "<svg" in svg and "AccumulateGrad" in svg

    # The copied link, opened in a fresh browser context, shows the same state.
    shared = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
    shared.goto(page.url)
    wait_for_app(shared)
    expect(shared.get_by_text("forward → backward()").first).to_be_visible()
    expect(shared.get_by_test_id("stMetricValue").first).to_have_text("0 B")
    shared.context.close()


def test_notes_file_reads_offline_with_its_figures_as_images(page, server_url, browser, tmp_path):
    page.goto(f"{server_url}/Modes")
    wait_for_app(page)
    with page.expect_download() as download:
        page.get_by_role("button", name="Notes (.html)").click()
    notes = tmp_path / "notes.html"
    download.value.save_as(notes)
    text = notes.read_text()
    assert "Answer card" in text and "seed 0" in text and "<table>" in text

    offline = browser.new_context(offline=True).new_page()  # nothing may come from the network
    offline.goto(notes.as_uri())
    offline.wait_for_function("() => document.querySelectorAll('div[data-figure]').length === 0", timeout=30_000)
    charts = offline.locator("figure img")
    assert charts.count() == text.count("<figure>") and charts.count() >= 1
    assert all(src.startswith("data:image/svg+xml") for src in charts.evaluate_all("imgs => imgs.map(i => i.src)"))
    offline.context.close()


@pytest.mark.parametrize("viewport", [(1280, 800), (1920, 1080)], ids=["laptop", "projector"])
def test_llama_3_8b_in_bf16_answers_with_verdict_limits_remedies_and_card_and_its_link_reopens_it(
    page, server_url, browser, screenshots, viewport
):
    page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
    page.goto(f"{server_url}/Real_scale" + ("?present=1" if viewport[0] == 1920 else ""))
    wait_for_app(page)
    page.get_by_text("bf16 (weights, gradients, optimizer state)").click()  # the radio's label
    expect(page).to_have_url(re.compile(r"precision=bf16(&|$)"), timeout=60_000)
    wait_for_app(page)
    verdict = page.get_by_text(re.compile(r"in 80 GiB per GPU: the step peaks at")).first
    expect(verdict).to_be_visible(timeout=120_000)
    chart_box = page.locator("[data-testid='stPlotlyChart']").first.bounding_box()
    assert chart_box["y"] + chart_box["height"] / 2 < viewport[1], "the breakdown is on the first screen"
    expect(page.get_by_text(re.compile(r"(Largest|No) micro-batch")).first).to_be_visible(timeout=120_000)
    expect(page.get_by_role("heading", name="Remedies", exact=True)).to_be_visible()
    evidence = page.get_by_text("Evidence (this run).").locator("xpath=..")
    expect(evidence).to_contain_text("Llama-3-8B, bf16, AdamW, micro-batch 1, sequence 2048")
    expect(evidence).to_contain_text("micro-batch that fits in 80 GiB")
    page.screenshot(path=screenshots / f"scale-llama-bf16-{viewport[0]}.png")

    shared = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}).new_page()
    shared.goto(page.url)
    wait_for_app(shared)
    expect(shared.get_by_text(verdict.inner_text()).first).to_be_visible(timeout=60_000)
    shared.context.close()
