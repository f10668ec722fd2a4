"""A newcomer's first minute from nothing: `git clone`, `make run`, the home page, then the first lab's figure.

    .venv/bin/python benchmarks/bench_fresh_clone.py

Clones this repository into a temporary folder, runs `make run` there on a free port (a new .venv, the
pinned requirements installed from the machine's package index or cache), and times, from the start of
`make run`: the server's first answer, the home page's title in Chromium, and the first lab's (Autograd's)
graph. Then it stops the server and removes the clone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.e2e.conftest import CHROMIUM_FLAGS, _free_port, chromium_executable  # noqa: E402
from tests.e2e.test_browser import FIGURE_SELECTORS  # noqa: E402


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="fresh-clone-"))
    clone = folder / "explorer"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    port = _free_port()
    env = {**os.environ, "EXPLORER_DATA": str(folder / "data")}
    log = open(folder / "make-run.log", "wb")  # noqa: SIM115 - kept open while the server runs
    started = time.perf_counter()
    server = subprocess.Popen(
        ["make", "run", f"PORT={port}", "HOST=127.0.0.1"], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:  # noqa: S310
                    if answer.status == 200:
                        break
            except OSError:
                assert server.poll() is None, (folder / "make-run.log").read_text()[-2000:]
                time.sleep(0.2)
        answered = time.perf_counter() - started
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url, wait_until="commit")
            page.locator("h1").first.wait_for(timeout=180_000)
            home = time.perf_counter() - started
            page.get_by_role("link", name="Start with Autograd").click()
            page.locator(FIGURE_SELECTORS["graph"]).first.wait_for(state="visible", timeout=180_000)
            lab = time.perf_counter() - started
            browser.close()
        print(f"from `make run` on a fresh clone: the server answers {answered:.1f} s, the home page's title "
              f"{home:.1f} s, Autograd's graph {lab:.1f} s (after clicking 'Start with Autograd' on home)")  # fmt: skip
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
