"""The mock interview end to end in Chromium, on a phone, a laptop and a projector: three questions, a timer
that counts, the challenge, a saved self-score, and that score among the weakest on the study plan's Day 7."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.test_browser import wait_for_app
from tests.e2e.test_layout import SIDEWAYS

pytestmark = pytest.mark.e2e

VIEWPORTS = {
    "phone": {"width": 390, "height": 844},
    "laptop": {"width": 1280, "height": 800},
    "projector": {"width": 1920, "height": 1080},
}


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_three_questions_a_timer_a_challenge_and_a_score_that_reaches_day_7(browser, server_url, screenshots, viewport):
    context = browser.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    try:
        page.goto(f"{server_url}/Mock_interview" + ("?present=1" if viewport == "projector" else ""))
        wait_for_app(page)
        expect(page.get_by_text(re.compile(r"^Question \d\. "))).to_have_count(3)
        expect(page.get_by_text("The interviewer:")).to_have_count(3)
        timer = page.frame_locator("iframe").first
        timer.get_by_role("button", name="30 s").click()
        expect(timer.locator("#left")).to_have_text(re.compile(r"^0:(30|29|28)$"))
        first = page.locator(".st-key-mock-question-1")
        for box in first.get_by_role("checkbox").all()[:2]:
            # as a person does, on the drawn box and its label (Streamlit hides the native input under them): a
            # forced click on the hidden input skips Playwright's checks that the spot is visible and uncovered,
            # and one CI run on the phone failed there ("Clicking the checkbox did not change its state")
            box.locator("xpath=ancestor::label[1]").click()
            expect(box).to_be_checked()
            wait_for_app(page)
        first.get_by_role("button", name="Save my score").click()
        expect(first.get_by_text("Saved: 2 of 5")).to_be_visible()
        page.screenshot(path=screenshots / f"mock-interview-{viewport}.png")
        assert page.evaluate(SIDEWAYS) <= 1
        page.get_by_role("link", name=re.compile("Day 7 of the study plan")).click()
        expect(page.get_by_text("Your five weakest answers", exact=True)).to_be_visible(timeout=30_000)
        expect(page.get_by_text(re.compile(r"^Mock interview, 2 of 5: "))).to_be_visible()
    finally:
        context.close()
