"""Scripted browser sessions for the concurrency test and the browser benchmark (Playwright's async API).

A session opens one lab from a link, then works its controls the way an impatient user
does: key presses on a slider with no pause between them, buttons clicked in a row.
After each interaction it waits until the page has settled, and records how long that
took. At the end it reads the page's fingerprint: every metric, caption and figure
text, which must equal what the same link shows when it is opened alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

SETTLE_TIMEOUT_MS = 120_000
QUIET_MS = 400  # no script running for this long, after the last input, counts as settled

Action = Callable[[object], Awaitable[None]]


@dataclass
class Session:
    name: str
    path: str  # page path and query string, e.g. "Memory?seed=3"
    actions: list[tuple[str, Action]]
    deterministic: bool = True  # False: timings are part of the figures (Profiler), compare captions only
    times_s: list[float] = field(default_factory=list)
    fingerprint: dict[str, list[str]] = field(default_factory=dict)
    url: str = ""  # where the session ended: page path and query string
    errors: list[str] = field(default_factory=list)


SCRIPT_STATE = "[data-testid='stApp']"


async def settle(page) -> None:
    """Until the script has finished (Streamlit's own script state, for QUIET_MS) and every chart has drawn."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_MS / 1000
    await page.locator("h1").first.wait_for(timeout=SETTLE_TIMEOUT_MS)
    quiet_since = None
    while True:
        state = await page.locator(SCRIPT_STATE).get_attribute("data-test-script-state")
        if state != "notRunning":
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_MS / 1000:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page kept running (script state {state})")
        await asyncio.sleep(0.05)
    await page.wait_for_function(
        """() => [...document.querySelectorAll("[data-testid='stPlotlyChart']")]
                 .every(chart => chart.querySelector('.main-svg'))""",
        timeout=SETTLE_TIMEOUT_MS,
    )


async def fingerprint(page, deterministic: bool) -> dict[str, list[str]]:
    """What the page shows: metrics, captions and, where the lab is deterministic, every figure's text."""

    async def texts(selector: str) -> list[str]:
        return [t.strip() for t in await page.locator(selector).all_inner_texts()]

    shown = {
        "captions": await texts("[data-testid='stCaptionContainer']"),
        "exceptions": await texts("[data-testid='stException']"),
        "errors": await texts("[data-testid='stAlertContentError']"),
    }
    if deterministic:
        shown["metrics"] = await texts("[data-testid='stMetricValue']")
        shown["charts"] = await page.locator("[data-testid='stPlotlyChart'] .main-svg").evaluate_all(
            "nodes => nodes.map(n => n.textContent)"
        )
        shown["graphs"] = await page.locator("[data-testid='stGraphVizChart'] svg").evaluate_all(
            "nodes => nodes.map(n => n.textContent)"
        )
    return shown


async def run_session(browser, base_url: str, session: Session) -> Session:
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    page = await context.new_page()
    try:
        start = time.monotonic()
        await page.goto(f"{base_url}/{session.path}")
        await settle(page)
        session.times_s.append(time.monotonic() - start)
        for _, action in session.actions:
            start = time.monotonic()
            await action(page)
            await settle(page)
            session.times_s.append(time.monotonic() - start)
        session.fingerprint = await fingerprint(page, session.deterministic)
        session.url = page.url.split("/", 3)[-1]  # path and query: the settings, whatever the server's port
    except Exception as error:  # reported by the test with the session's name
        session.errors.append(f"{type(error).__name__}: {error}")
    finally:
        await context.close()
    return session


def notches(slider_name: str, count: int) -> Action:
    """Click the slider's track `count` times, one notch further right each time, with no pause.

    Clicks, not arrow keys: Streamlit 1.67's slider commits a value when a pointer is
    released, and ignores keyboard moves until then.
    """

    async def act(page) -> None:
        value_input = page.get_by_role("slider", name=slider_name)
        low, high, value = [float(await value_input.get_attribute(a)) for a in ("min", "max", "value")]
        track = page.get_by_test_id("stSlider").filter(has=value_input).locator("[role=group] > div").first
        target = min(value + count, high)

        async def click_at(position: float) -> None:
            box = await track.bounding_box()  # read afresh: the page may have moved since the last click
            share = (position - low) / (high - low)
            await page.mouse.click(box["x"] + share * box["width"], box["y"] + box["height"] / 2)

        for step in range(1, count + 1):
            await click_at(min(value + step, high))
        for _ in range(3):  # a click the page dropped (it was redrawing) is made again, at the final value
            await asyncio.sleep(1.0)
            if float(await value_input.get_attribute("value")) == target:
                return
            await click_at(target)
        raise AssertionError(f"the {slider_name!r} slider did not reach {target}")

    return act


def click(*names: str) -> Action:
    """Click buttons one after another without waiting for the page in between."""

    async def act(page) -> None:
        for name in names:
            await page.get_by_role("button", name=name, exact=True).click()

    return act


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]
