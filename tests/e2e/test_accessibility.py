"""axe-core (shipped by axe-playwright-python) finds no serious or critical violation on the pages that are not
labs, on a phone, a laptop and a projector (presenting). Each lab is checked on its every load in test_layout."""

from __future__ import annotations

import pytest

from tests.e2e.test_browser import wait_for_app

pytestmark = pytest.mark.e2e

VIEWPORTS = {
    "phone": ({"width": 390, "height": 844}, False),
    "laptop": ({"width": 1280, "height": 800}, False),
    "1080p-presenting": ({"width": 1920, "height": 1080}, True),
}
SETTLED = """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stElementContainer']")]
    .every(e => getComputedStyle(e).opacity === "1")"""
NO_ANIMATION = "*, *::before, *::after { transition: none !important; animation: none !important; }"
PAGES = ["", "Study_plan", "Mock_interview", "Docs?page=labs/autograd"]


def settle_for_axe(page) -> None:
    """Until the page has drawn and nothing is mid-fade: contrast is judged on the settled page."""
    page.add_style_tag(content=NO_ANIMATION)
    wait_for_app(page)
    # Streamlit fades elements from an earlier run while a rerun draws
    page.wait_for_function("() => !document.querySelector(\"[data-stale='true']\")", timeout=60_000)
    page.wait_for_function(SETTLED, polling=250, timeout=60_000)  # nothing faded, on a busy machine too


def serious_violations(page) -> list[str]:
    """axe-core's serious and critical findings; a second look after 2 s when the first finds any, since a loaded
    machine can catch a transition (the menu closing, a fade): what persists counts."""
    from axe_playwright_python.sync_playwright import Axe

    found = _serious(Axe().run(page))
    if found:
        page.wait_for_timeout(2_000)
        found = _serious(Axe().run(page))
    return found


def _serious(results) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(n["target"][0] for n in v["nodes"][:3])
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("path", PAGES, ids=[p or "home" for p in PAGES])
def test_no_serious_accessibility_violation(browser, server_url, path, viewport):
    size, present = VIEWPORTS[viewport]
    context = browser.new_context(viewport=size)
    page = context.new_page()
    try:
        page.goto(f"{server_url}/{path}{'&' if '?' in path else '?'}present={int(present)}")
        settle_for_axe(page)
        serious = serious_violations(page)
        assert not serious, "\n".join(serious)
        from tests.e2e.test_layout import SIDEWAYS  # here: test_layout imports this module

        assert page.evaluate(SIDEWAYS) <= 1  # no sideways scroll: a doc's wide tables wrap too
    finally:
        context.close()


def test_every_doc_page_fits_a_phone_without_sideways_scroll(browser, server_url):
    """The docs' tables hold long sources and code (`torch/csrc/...`): on a phone they wrap, not widen the page."""
    from tests.e2e.test_layout import SIDEWAYS  # here: test_layout imports this module
    from ui import docs

    context = browser.new_context(viewport=VIEWPORTS["phone"][0])
    page = context.new_page()
    try:
        for name in docs.PAGES:
            for present in ("0", "1"):  # presenting, the text grows
                page.goto(f"{server_url}/Docs?page={name}&present={present}")
                wait_for_app(page)
                assert page.evaluate(SIDEWAYS) <= 1, (name, present)
    finally:
        context.close()
