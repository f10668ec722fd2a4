"""A real Streamlit server on a free loopback port, and a real Chromium driven by Playwright."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
START_TIMEOUT_S = 60


def chromium_executable() -> str | None:
    """Debian's Chromium when present (Playwright cannot download a browser everywhere), else Playwright's own."""
    explicit = os.environ.get("CHROMIUM_PATH")
    if explicit:
        return explicit
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(
    script: str = "app.py",
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    launcher: tuple[str, ...] = ("-m", "streamlit", "run"),
) -> Iterator[tuple[str, subprocess.Popen]]:
    """A real `streamlit run` (or `launcher`: `("-m", "ui.launch")`, as `make run` starts it) on a free loopback port
    (`env` added to ours); stopped (SIGTERM, then SIGKILL). `server_output(process)` reads what it printed."""
    port = _free_port()
    command = [sys.executable, *launcher, script, "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1", "--server.headless", "true"]
    # A file, not a pipe: nobody reads a pipe while the tests run, and a full one would stall the server.
    output = tempfile.TemporaryFile()  # noqa: SIM115
    process = subprocess.Popen(
        command, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    process.output = output
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output.seek(0)
                    pytest.fail(f"streamlit did not start on {url}: {output.read().decode(errors='replace')[-2000:]}")
                time.sleep(0.3)
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        output.close()


def server_output(process: subprocess.Popen) -> str:
    """What the server has printed so far (read without moving the offset the server writes at)."""
    fd = process.output.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")


@pytest.fixture(scope="session")
def server_url():
    with streamlit_server() as (url, _):
        yield url


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture()
def page(browser):
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(45_000)
    yield page
    context.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
