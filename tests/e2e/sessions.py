"""Scripted browser sessions for the concurrency test and the browser benchmark (Playwright's async API).

A session opens one lab from a link, then works its controls the way an impatient user
does: key presses on a slider with no pause between them, buttons clicked in a row.
After each interaction it waits until the page has settled, and records how long that
took. At the end it reads the page's fingerprint: every metric, caption and figure
text, which must equal what the same link shows when it is opened alone.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

# Ten sessions share two cores: a page may wait for every other session's runs (the concurrency test allows
# an interaction up to ten times its time alone), so settling may take minutes; the test judges time separately.
SETTLE_TIMEOUT_MS = 300_000
QUIET_MS = 400
HAND_PAUSE_MS = 80  # no script running for this long, after the last input, counts as settled

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
    history: list[str] = field(default_factory=list)  # each link the page showed, "seconds: query", for a failure


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
    # An element whose code is still loading shows Streamlit's placeholder (stSkeleton): under load a chart's
    # took seconds, and a page read then had no chart at all (seen: Autograd's saved-tensor chart missing).
    await page.wait_for_function(
        """() => !document.querySelector("[data-testid='stSkeleton']")
                 && [...document.querySelectorAll("[data-testid='stPlotlyChart']")]
                    .every(chart => chart.querySelector('.main-svg'))""",
        timeout=SETTLE_TIMEOUT_MS,
    )


async def fingerprint(page, deterministic: bool) -> dict[str, list[str]]:
    """What the page shows: metrics, captions, alerts, slider values and, where the lab is deterministic,
    every chart's text."""

    async def texts(selector: str) -> list[str]:
        return [t.strip() for t in await page.locator(selector).all_inner_texts()]

    # How long a measurement took here is no setting: a cached result carries the time of whoever ran it
    captions = [re.sub(r"[\d.]+ s here", "… s here", c) for c in await texts("[data-testid='stCaptionContainer']")]
    shown = {
        # Where figures are timings, only the captions that state settings ("what · name value · ...").
        "captions": captions if deterministic else [c for c in captions if " · " in c],
        "exceptions": await texts("[data-testid='stException']"),
        "errors": await texts("[data-testid='stAlertContentError']"),
        "sliders": await page.get_by_role("slider").evaluate_all("nodes => nodes.map(n => n.ariaValueText)"),
    }
    if deterministic:
        shown["metrics"] = await texts("[data-testid='stMetricValue']")
        shown["text"] = await texts("[data-testid='stMain'] [data-testid='stMarkdownContainer']")  # why-panel too
        shown["charts"] = await page.locator("[data-testid='stPlotlyChart'] .main-svg").evaluate_all(
            "nodes => nodes.map(n => n.textContent)"
        )
        # Graphs are left out: the browser lays them out asynchronously (d3-graphviz), and after fast
        # successive updates it can finish an older layout last, in one session as in eight. The
        # graph's numbers are in the tensor table and metrics, which are compared.
    return shown


async def stable_fingerprint(page, deterministic: bool, tries: int = 20) -> dict[str, list[str]]:
    """The fingerprint once two reads a second apart agree: on a loaded machine the browser can still be
    drawing the last figures after the script has finished."""
    shown = await fingerprint(page, deterministic)
    for _ in range(tries):
        await asyncio.sleep(1.0)
        again = await fingerprint(page, deterministic)
        if again == shown:
            return shown
        shown = again
    return shown


async def run_session(browser, base_url: str, session: Session) -> Session:
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(SETTLE_TIMEOUT_MS)  # ten browsers on two cores: any read of the page can wait
    opened = time.monotonic()

    async def watch_link() -> None:
        while True:
            query = page.url.split("?", 1)[-1]
            if not session.history or not session.history[-1].endswith(query):
                session.history.append(f"{time.monotonic() - opened:.1f}: {query}")
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch_link())
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
        session.fingerprint = await stable_fingerprint(page, session.deterministic)
        session.url = page.url.split("/", 3)[-1]  # path and query: the settings, whatever the server's port
    except Exception as error:  # reported by the test with the session's name
        session.errors.append(f"{type(error).__name__}: {error}")
    finally:
        watcher.cancel()
        await context.close()
    return session


def notches(slider_name: str, count: int, url_name: str) -> Action:
    """Drag the slider's thumb `count` notches right, one notch per drag, without waiting for the page.

    Pointer moves, not arrow keys: Streamlit 1.67's slider commits a value when the pointer
    is released and ignores keyboard moves until then. A drag, not a click on the track: on
    a narrow slider the next notch lies under the thumb, where a click does nothing. Each
    drag takes about as long as a quick hand (a quarter of a second): at machine speed, with
    eight browsers drawing on two cores, the slider can commit the value it had before the
    move while showing the new one. The action ends once the server has the final value
    (`url_name` in the link), so a session compares the settings it asked for.
    """

    async def act(page) -> None:
        value_input = page.get_by_role("slider", name=slider_name)
        await value_input.wait_for(timeout=SETTLE_TIMEOUT_MS)  # ten sessions on two cores: a rerun draws slowly
        low, high, step, value = [float(await value_input.get_attribute(a)) for a in ("min", "max", "step", "value")]
        track = page.get_by_test_id("stSlider").filter(has=value_input).locator("[role=group] > div").first
        thumb = value_input.locator("xpath=../..")  # the thumb holds the visually hidden range input
        target = min(value + count * step, high)

        async def drag_to(position: float) -> None:
            # The page may still move under the pointer (a graph finishing its layout): press only once the thumb
            # is what the pointer is over, or the press lands on a neighbouring slider (seen in CI: Depth moved).
            for _ in range(100):
                track_box, thumb_box = await track.bounding_box(), await thumb.bounding_box()
                x, y = thumb_box["x"] + thumb_box["width"] / 2, thumb_box["y"] + thumb_box["height"] / 2
                await page.mouse.move(x, y)
                if await thumb.evaluate("(t, [x, y]) => t.contains(document.elementFromPoint(x, y))", [x, y]):
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"the {slider_name!r} thumb never stood still under the pointer")
            await page.mouse.down()
            await page.wait_for_timeout(HAND_PAUSE_MS)
            x = track_box["x"] + (position - low) / (high - low) * track_box["width"]
            await page.mouse.move(x, y, steps=5)
            await page.wait_for_timeout(2 * HAND_PAUSE_MS)
            await page.mouse.up()

        async def server_has_target() -> bool:
            """The slider shows the target and the link holds what it shows (a select_slider's
            input counts options, its text is the option)."""
            if abs(float(await value_input.get_attribute("value")) - target) >= step / 2:
                return False
            shown = float((await value_input.get_attribute("aria-valuetext")).replace(",", ""))
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)
            return abs(float(query.get(url_name, ["nan"])[0]) - shown) < 1e-9

        for notch in range(1, count + 1):
            await drag_to(min(value + notch * step, high))
        for _ in range(3):  # a drag the slider did not commit is made again, to the final value
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if await server_has_target():
                    return
                await asyncio.sleep(0.1)
            await drag_to(target)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)
        raise AssertionError(
            f"the {slider_name!r} slider did not reach {target} on the server: it shows "
            f"{await value_input.get_attribute('aria-valuetext')}, the link has {url_name}={query.get(url_name)}"
        )

    return act


def click(*names: str) -> Action:
    """Click buttons one after another, each as soon as the server has taken the one before.

    Not faster: when reruns queue up (eight sessions on two cores), Streamlit merges the
    queued button triggers and one click can be lost (seen for the Autograd lifecycle).
    """

    async def act(page) -> None:
        for name in names:
            before = page.url
            await page.get_by_role("button", name=name, exact=True).click()
            deadline = time.monotonic() + 15
            while page.url == before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)

    return act


VERDICT = re.compile(r"^(Right, in \d+ attempts?\.|Not yet: |The lines are right;)")  # lesson.check_verdict


def answer(lines: tuple[str, ...], fix: str, check: str) -> Action:
    """Fix the loop: click line pills and a fix (each as soon as the link has it), then the check button."""

    async def act(page) -> None:
        targets = [page.get_by_role("button", name=line, exact=True) for line in lines]
        targets.append(page.get_by_role("radio", name=fix, exact=True))
        for target in targets:
            before = page.url
            await target.click(force=True)  # a radio's input sits under its label
            deadline = time.monotonic() + 15
            while page.url == before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        await page.get_by_role("button", name=check, exact=True).click()
        # Until the verdict shows: on a loaded server the click's rerun can start after the page has looked
        # quiet for longer than settle() waits (seen: ten sessions, a fingerprint read before the rerun began).
        await page.get_by_text(VERDICT).first.wait_for(timeout=SETTLE_TIMEOUT_MS)

    return act


TENSOR_VERDICT = re.compile(r"^(Right on all \d+ inputs|On the .* input|Not run: )")  # tensors.lesson.verdict


def typed(label: str, text: str, check: str) -> Action:
    """Tensor drills: type an expression into the box labelled `label`, press Enter, then the check button."""

    async def act(page) -> None:
        box = page.get_by_role("textbox", name=label)
        await box.fill(text)
        before = page.url
        await box.press("Enter")
        deadline = time.monotonic() + 15
        while page.url == before and time.monotonic() < deadline:  # the link holds the answer once taken
            await asyncio.sleep(0.05)
        await page.get_by_role("button", name=check, exact=True).click()
        await page.get_by_text(TENSOR_VERDICT).first.wait_for(timeout=SETTLE_TIMEOUT_MS)

    return act


GRADED = re.compile(r"^Evidence: ")  # evidence.lesson.graded_line


def picked(evidence: str, answer: str, check: str) -> Action:
    """GPU evidence: click the evidence and the answer of the first question (each radio by its name), then its
    check button, and wait for the grade."""

    async def act(page) -> None:
        for name in (evidence, answer):
            await page.get_by_role("radio", name=name, exact=True).first.click(force=True)  # its input sits under
            await settle(page)
        await page.get_by_role("button", name=check, exact=True).first.click()
        await page.get_by_text(GRADED).first.wait_for(timeout=SETTLE_TIMEOUT_MS)

    return act


def diagnosed(check: str, again: str, tries: int = 3) -> Action:
    """Slow step, opened with its picks in the link: a run that does not show its bottleneck (a machine this busy can
    blur one) offers no questions, so measure again, as a learner would, until it does (the picks stay); then check
    and wait for the grade."""

    async def act(page) -> None:
        for _ in range(tries):
            if await page.get_by_role("button", name=check, exact=True).count():
                break
            await page.get_by_role("button", name=again, exact=True).last.click()
            await settle(page)
        await page.get_by_role("button", name=check, exact=True).first.click()
        await page.get_by_text(GRADED).first.wait_for(timeout=SETTLE_TIMEOUT_MS)

    return act


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]
