"""`make run` starts the server with ui/launch.py: it answers at once, then warms up in the background."""

from __future__ import annotations

import re
import time
import urllib.request

from tests.e2e.conftest import server_output, streamlit_server


def test_the_server_answers_first_then_every_worker_pays_the_labs_first_costs(browser):
    with streamlit_server(launcher=("-m", "ui.launch")) as (url, server):
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as answer:
            assert answer.status == 200
        assert "warm-up done" not in server_output(server)  # it starts after the server's first answer
        # Visitors at once, while the warm-up imports: once, importing a lab's package from the warm-up raced a
        # page's import of it, and the page got "partially initialized module" (one run in five).
        pages = [browser.new_page() for _ in range(3)]
        for page, path in zip(pages, ("", "Fix_the_loop", "Mock_interview"), strict=True):
            page.goto(f"{url}/{path}", wait_until="commit")
        for page in pages:
            page.locator("h1").first.wait_for(timeout=60_000)
            assert not page.locator("[data-testid='stException']").count()
            page.close()
        deadline = time.monotonic() + 240
        while "warm-up done" not in server_output(server):
            assert server.poll() is None and time.monotonic() < deadline, server_output(server)[-2000:]
            time.sleep(0.5)
        line = next(line for line in server_output(server).splitlines() if line.startswith("warm-up done"))
        workers = re.findall(r"worker \d+: imports [\d.]+ s, forkserver [\d.]+ s, template [\d.]+ s", line)
        assert len(workers) >= 2 and "failed" not in line, line
