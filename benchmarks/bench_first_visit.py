"""A newcomer's first minute: a freshly started server's first answer, its home page, and each lab's first visit.

    .venv/bin/python benchmarks/bench_first_visit.py [--wait 60] [--labs Autograd,DDP] [--launcher streamlit]

Targets (issue 47): every lab's first figure within 3 s on a server that has been up 60 s; a lab that
must start processes shows progress within 1 s. Measured in Debian's Chromium at 390x844 (a phone,
where first visits were slowest), as one newcomer: one browser (its cache holds Streamlit's and plotly's
scripts after the home page, as a real browser's does), each lab opened by its link (a new page load, so
a new session on the server), against a trivial Streamlit page's first visit on the same machine.

1. the server starts as `make run` starts it (`python -m ui.launch app.py`, which warms up in the background;
   `--launcher streamlit`: a bare `streamlit run app.py`, as before the warm-up): the time to its health
   endpoint answering (the server's first answer);
2. the home page's first visit, at once: the time to its title, and to its lab map;
3. the server is left alone until it has been up `--wait` seconds;
4. each lab in a new context: the time to its first progress bar or figure, and to its main figure.

The time from `make run` on a fresh clone (a venv to create and packages to install) is measured by hand:
see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("EXPLORER_DATA", tempfile.mkdtemp(prefix="bench-first-visit-"))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.e2e.conftest import CHROMIUM_FLAGS, chromium_executable, server_output, streamlit_server  # noqa: E402
from tests.e2e.test_browser import FIGURE_SELECTORS  # noqa: E402
from ui.catalogue import LABS  # noqa: E402

PHONE = {"width": 390, "height": 844}
FIRST_SIGN = "[data-testid='stProgress'], " + ", ".join(FIGURE_SELECTORS.values())
TRIVIAL = "import streamlit as st\nst.title('Trivial')\nst.write('A page with nothing to compute.')\n"


def visit(page, url: str, figure: str) -> tuple[float, float]:
    """Seconds from navigation to the first progress bar or figure, and to the main figure."""
    started = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.locator(FIRST_SIGN).first.wait_for(state="attached", timeout=120_000)
    first = time.perf_counter() - started
    page.locator(figure).first.wait_for(state="visible", timeout=120_000)
    return first, time.perf_counter() - started


def title_s(browser, url: str) -> tuple[float, object]:
    """Seconds from navigation to a fresh visitor's page title; the page, still open."""
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    page = context.new_page()
    started = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.locator("h1").first.wait_for(timeout=120_000)
    return time.perf_counter() - started, page


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wait", type=float, default=60.0, help="seconds the server is up before the lab visits")
    parser.add_argument("--labs", default="", help="comma-separated lab titles (default: every lab)")
    parser.add_argument("--launcher", choices=("app", "streamlit"), default="app", help="python -m ui.launch, or not")
    args = parser.parse_args()
    chosen = [lab for lab in LABS if lab.page and (not args.labs or lab.title in args.labs.split(","))]
    trivial = Path(tempfile.mkdtemp()) / "trivial.py"
    trivial.write_text(TRIVIAL)

    launcher = ("-m", "ui.launch") if args.launcher == "app" else ("-m", "streamlit", "run")
    started = time.perf_counter()
    with streamlit_server(launcher=launcher) as (url, server), sync_playwright() as playwright:
        answered = time.perf_counter() - started
        browser = playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
        visit_started = time.perf_counter()
        title, page = title_s(browser, url)
        page.get_by_text(chosen[0].question).first.wait_for(timeout=120_000)
        lab_map = time.perf_counter() - visit_started
        print(f"server: health endpoint answers {answered:.1f} s after `streamlit run`")
        print(f"home, first visit at once: title {title:.2f} s, lab map {lab_map:.2f} s")
        time.sleep(max(0.0, args.wait - (time.perf_counter() - started)))
        print(f"each lab's first visit, the server up {time.perf_counter() - started:.0f} s (phone, by its link):")
        for lab in chosen:
            first, figure = visit(page, f"{url}/{lab.url_path}", FIGURE_SELECTORS[lab.figure])
            print(f"  {lab.title:16s} first sign {first:5.2f} s, main figure {figure:5.2f} s")
        browser.close()
        print(*[line for line in server_output(server).splitlines() if line.startswith("warm-up")] or ["no warm-up"])
    with streamlit_server(str(trivial)) as (url, _), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
        print(f"a trivial page's first visit (baseline): {title_s(browser, url)[0]:.2f} s")
        browser.close()


if __name__ == "__main__":
    main()
