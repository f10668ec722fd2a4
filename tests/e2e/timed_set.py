"""A learner's first minutes of practice in Chromium: start a timed set in Fix the loop and solve its first drill."""

from __future__ import annotations

import urllib.parse

from explorers.drills.catalogue import BY_LINK_ID
from explorers.drills.fixes import FIXES
from tests.e2e.test_browser import FIGURE_SELECTORS

CHART = FIGURE_SELECTORS["chart"]
ONE_SOLVED = "Timed set: 1 of 5 solved"


def solve_the_first_drill_of_a_new_set(page, url: str) -> None:
    page.goto(f"{url}/Fix_the_loop")
    page.locator(CHART).first.wait_for()
    page.get_by_role("button", name="Start a timed set of 5").click()
    page.get_by_text("Timed set: 0 of 5 solved").wait_for()
    page.wait_for_url(lambda link: "drill=" in link)
    drill = BY_LINK_ID[urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["drill"][0]]
    page.locator(CHART).first.wait_for()
    pills = page.get_by_test_id("stButtonGroup")  # the line pills (the set's drill buttons are numbered too)
    for line in drill.bug_lines:
        pills.get_by_role("button", name=str(line), exact=True).click()
        pills.locator(f"button[aria-pressed='true']:has-text('{line}')").first.wait_for()
    fix = FIXES[drill.fix].label.replace("`", "")  # as the radio names it: markdown's code marks are not text
    page.get_by_role("radio", name=fix, exact=True).click(force=True)  # its input sits under its label
    page.get_by_role("button", name="Check my answer", exact=True).click()
    page.get_by_text("Right, in 1 attempt.").first.wait_for()
    page.get_by_text(ONE_SOLVED).wait_for()
