"""Capacity of a class server: N users at once through nginx, for 1, 2 and 4 replicas (deploy/serve.py).

    python benchmarks/bench_class.py                 # 8 users, 1, 2 and 4 replicas
    python benchmarks/bench_class.py --users 12 --replicas 2

Each user is a Chromium context of its own (its own cookie, so the proxy may place it on any
replica) that opens a lab on a seed no other user asks for, so no cache answers, and waits for
the lab's main figure. Loopback only, bounded in users (at most 32) and in time (a user that has
no figure after USER_TIMEOUT_S counts as an error). Reported per replica count: sessions that
got their figure with no error shown, the median and worst time to the first figure, the
resident memory of each replica's whole process group (server, engine workers, forkservers)
after the round, and how the proxy spread the users.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.async_api import async_playwright  # noqa: E402

from tests.e2e.conftest import CHROMIUM_FLAGS, chromium_executable  # noqa: E402

LABS = ("Modes", "Gradients", "Autograd", "Memory", "Serving", "Precision")  # answered by the engine's workers
FIGURE = "[data-testid='stPlotlyChart'] .main-svg, [data-testid='stGraphVizChart'] svg"
USER_TIMEOUT_S = 240
MAX_USERS = 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_rss_mb(pgid: int) -> float:
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            status = (stat.parent / "status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total / 1024


async def one_user(browser, url: str, n: int) -> dict:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()
    lab = LABS[n % len(LABS)]
    start = time.perf_counter()
    try:
        answer = await page.goto(f"{url}/{lab}?seed={1000 + n}", timeout=USER_TIMEOUT_S * 1000)
        await page.locator(FIGURE).first.wait_for(timeout=USER_TIMEOUT_S * 1000)
        seconds = time.perf_counter() - start
        text = await page.locator("[data-testid='stMain']").inner_text()
        error = "Traceback" in text or await page.locator("[data-testid='stException']").count() > 0
        return {"lab": lab, "seconds": seconds, "error": error, "replica": answer.headers.get("x-explorer-replica")}
    except Exception as failure:  # a timeout or a refused page: an error of the round
        return {"lab": lab, "seconds": None, "error": True, "replica": None, "why": str(failure)[:120]}
    finally:
        await context.close()


async def round_of(url: str, users: int) -> list[dict]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
        try:
            return await asyncio.gather(*(one_user(browser, url, n) for n in range(users)))
        finally:
            await browser.close()


def measure(replicas: int, users: int) -> str:
    run = Path(tempfile.mkdtemp(dir="/tmp", prefix="bench-class-")) / "run"
    port, first = free_port(), 18600 + 10 * replicas
    command = [sys.executable, "deploy/serve.py", "--replicas", str(replicas), "--port", str(port)]
    command += ["--run-dir", str(run), "--first-replica-port", str(first)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/proxy-health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    return f"| {replicas} | the class server did not start | | | | |"
                time.sleep(0.5)
        results = asyncio.run(round_of(url, users))
        pgids = [int((run / f"replica-{first + i}.pid").read_text()) for i in range(replicas)]
        rss = [group_rss_mb(pgid) for pgid in pgids]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(90)
        shutil.rmtree(run.parent, ignore_errors=True)
    good = [r for r in results if not r["error"]]
    times = sorted(r["seconds"] for r in good)
    spread = collections.Counter(r["replica"] for r in results if r["replica"])
    placed = ", ".join(str(spread.get(f"127.0.0.1:{first + i}", 0)) for i in range(replicas))
    timing = f"{statistics.median(times):.1f} s / {times[-1]:.1f} s" if times else "-"
    return (
        f"| {replicas} | {len(good)} of {users} ({users - len(good)} errors) | {timing} | "
        f"{', '.join(f'{m:.0f}' for m in rss)} MB | {placed} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--replicas", type=int, nargs="*", default=[1, 2, 4])
    args = parser.parse_args()
    users = max(1, min(args.users, MAX_USERS))
    print(f"{users} users at once, each a Chromium context opening a lab on a seed of its own")
    print("| replicas | sessions with their figure | median / worst to first figure | RSS per replica | users each |")
    print("|---|---|---|---|---|")
    for replicas in args.replicas:
        print(measure(replicas, users), flush=True)


if __name__ == "__main__":
    main()
