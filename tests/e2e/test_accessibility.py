"""axe-core (shipped by axe-playwright-python) finds no serious or critical violation on any page, laptop or phone."""

from __future__ import annotations

import pytest

from tests.e2e.test_browser import BUILT, wait_for_app

pytestmark = pytest.mark.e2e

VIEWPORTS = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
SETTLED = """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stElementContainer']")]
    .every(e => getComputedStyle(e).opacity === "1")"""
NO_ANIMATION = "*, *::before, *::after { transition: none !important; animation: none !important; }"
PAGES = ["", *(lab.url_path for lab in BUILT), "Study_plan", "Mock_interview"]


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("path", PAGES, ids=[p or "home" for p in PAGES])
def test_no_serious_accessibility_violation(browser, server_url, path, viewport):
    from axe_playwright_python.sync_playwright import Axe

    context = browser.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    try:
        page.goto(f"{server_url}/{path}")
        page.add_style_tag(content=NO_ANIMATION)  # contrast is judged on the settled page, never mid-fade
        wait_for_app(page)
        # Streamlit fades elements from an earlier run while a rerun draws: contrast is judged once they settle
        page.wait_for_function("() => !document.querySelector(\"[data-stale='true']\")", timeout=60_000)
        page.wait_for_function(SETTLED, polling=250, timeout=60_000)  # nothing faded, on a busy machine too
        serious = serious_violations(Axe().run(page))
        if serious:  # a loaded machine can catch a transition (the menu closing, a fade): what persists counts
            page.wait_for_timeout(2_000)
            serious = serious_violations(Axe().run(page))
        assert not serious, "\n".join(serious)
    finally:
        context.close()


def serious_violations(results) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(n["target"][0] for n in v["nodes"][:3])
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
