"""Fifteen browser sessions at once against one server, working different labs with fast, impatient input.

Each session's final page must equal what the same session shows when it runs alone on a
fresh server (so no result crossed between sessions, and none came from a shared cache
the alone run could reuse), no session may show an exception, and no worker or
DataLoader process may outlive the server. The 95th-percentile interaction time is
printed as a ratio to the same interactions done one session at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from explorers import engine
from explorers.drills import DRILLS
from explorers.evidence.questions import BOUND_CAUSES
from explorers.slowstep.catalogue import DRILLS as SLOW_DRILLS
from tests.e2e.conftest import CHROMIUM_FLAGS, chromium_executable, streamlit_server
from tests.e2e.sessions import Session, answer, click, diagnosed, notches, percentile, picked, run_session, typed

pytestmark = pytest.mark.e2e


ANSWER_LABEL, CHECK = "Your answer: one expression", "Check my answer"
FIX_LABEL = "Pass the logits to cross_entropy: remove .softmax(dim=1)"  # the radio's accessible name
SOFTMAX_LINES = tuple(str(n) for n in DRILLS["softmax_before_loss"].bug_lines)


def scripted_sessions() -> list[Session]:
    memory_batch = "Batch size (log scale)"
    return [
        Session(
            "memory: five quick notches", "Memory", [("5 notches on batch", notches(memory_batch, 5, "batch_size"))]
        ),
        Session(
            "memory: CNN, batch then depth",
            "Memory?preset=cnn&width=32&depth=2&seed=7",
            [
                ("3 notches on batch", notches(memory_batch, 3, "batch_size")),
                ("1 notch on depth", notches("Depth (blocks)", 1, "depth")),
            ],
        ),
        Session(
            "memory: transformer",
            "Memory?preset=transformer&width=64&heads=4&seq_len=32&batch_size=4",
            [("5 notches on batch", notches(memory_batch, 5, "batch_size"))],
        ),
        Session(
            "modes: width then dropout",
            "Modes",
            [("3 notches on width", notches("Width", 3, "width")), ("2 notches on p", notches("Dropout p", 2, "p"))],
        ),
        Session(
            "real scale: GPT-2, longer sequences",
            "Real_scale?model=gpt2&precision=fp32&seq=256",
            [("2 notches on sequence", notches("Sequence length", 2, "seq"))],
        ),
        Session(
            "autograd: lifecycle clicks",
            "Autograd",
            [
                ("backward twice", click("backward(retain_graph=True)", "backward(retain_graph=True)")),
                ("2 notches on width", notches("Width", 2, "width")),
            ],
        ),
        Session(
            "autograd: residual",
            "Autograd?preset=residual&seed=3&steps=forward",
            [("backward, step, forward", click("backward()", "optimizer.step()", "forward"))],
        ),
        Session(
            "gradients: vanishing, then scale",
            "Gradients?scenario=vanishing&depth=8&scale=0.5&activation=sigmoid",
            [("2 notches on scale", notches("Initial scale", 2, "scale"))],
        ),
        Session(
            "serving: shift the traffic",
            "Serving?feature_order=1",
            [("2 notches on shift", notches("Live traffic shift (std)", 2, "shift"))],
        ),
        Session(
            "fix the loop: lines, a fix, check",
            f"Fix_the_loop?drill={DRILLS['softmax_before_loss'].link_id}&seed=3",
            [("the bug's line, remove the softmax, check", answer(SOFTMAX_LINES, FIX_LABEL, "Check my answer"))],
        ),
        Session(
            "tensor drills: a wrong answer, then the right one",
            "Tensor_drills?puzzle=merge_heads&seed=4",
            [
                ("view after a transpose, check", typed(ANSWER_LABEL, "y.transpose(1, 2).view(B, T, H * D)", CHECK)),
                ("reshape, check", typed(ANSWER_LABEL, "y.transpose(1, 2).reshape(B, T, H * D)", CHECK)),
            ],
        ),
        Session(
            "gpu evidence: a trace's first question",
            "GPU_evidence?trace=one-step",
            [("the idle bar and the host, check", picked("GPU idle", BOUND_CAUSES["host"], "Check"))],
        ),
        Session(
            "slow step: the link's picks, checked and the fix run",
            f"Slow_step?drill={SLOW_DRILLS['statistics_per_sample'].link_id}&seed=3&evidence=phase:data"
            "&fix=statistics_once",
            [
                (
                    "check the link's picks, measuring again if the run did not show it",
                    diagnosed("Check and run my fix", "Measure again"),
                )
            ],
            deterministic=False,  # its figures are timings: compare the settings they state
        ),
        Session(
            "compile: static shapes, more calls",
            "Compile?preset=shapes&dynamic=false&steps=6",
            [("3 notches on calls", notches("Calls", 3, "steps"))],
        ),
        Session(
            "precision: large inputs, smaller loss",
            "Precision?input_exp=3&steps=8",
            [("2 notches on the loss", notches("Loss × 10^k (underflow)", 2, "loss_exp"))],
        ),
        Session(
            "profiler: DataLoader workers",
            "Profiler?num_workers=1&data_cost_ms=5&warmup=1&active=3",
            [("1 notch on active steps", notches("Active steps", 1, "active"))],
            deterministic=False,  # its figures are timings: compare the settings they state
        ),
    ]


async def run_together(url: str, sessions: list[Session]) -> list[Session]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
        try:
            return await asyncio.gather(*(run_session(browser, url, s) for s in sessions))
        finally:
            await browser.close()


async def run_one_at_a_time(url: str, sessions: list[Session]) -> list[Session]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_FLAGS)
        try:
            return [await run_session(browser, url, s) for s in sessions]
        finally:
            await browser.close()


def run_async(coroutine):
    """asyncio.run on a thread of its own: the sync Playwright fixtures keep an event loop on this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def children_by_parent() -> dict[int, list[int]]:
    """One pass over /proc: every live process, filed under its parent."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    return children


def descendants(root: int) -> set[int]:
    children = children_by_parent()
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class ProcessWatch:
    """Samples the server's descendants (workers, forkservers, DataLoader workers) while the sessions run."""

    def __init__(self, root: int) -> None:
        self.root, self.seen, self.stop = root, set(), threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        while not self.stop.is_set():
            self.seen |= descendants(self.root)
            time.sleep(0.2)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()
        self.seen |= descendants(self.root)


def test_ten_sessions_at_once_stay_apart_and_leave_no_process_behind():
    with streamlit_server() as (url, server), ProcessWatch(server.pid) as watch:
        together = run_async(run_together(url, scripted_sessions()))
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in watch.seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = sorted(pid for pid in watch.seen if alive(pid))

    with streamlit_server() as (url, _):  # a fresh server: nothing cached from the run above
        alone = run_async(run_one_at_a_time(url, scripted_sessions()))

    for mixed, single in zip(together, alone, strict=True):
        assert not mixed.errors and not single.errors, (mixed.name, mixed.errors, single.errors)
        for shown in (mixed.fingerprint, single.fingerprint):
            assert not shown["exceptions"] and not shown["errors"], (mixed.name, shown["exceptions"], shown["errors"])
        assert mixed.url == single.url, (mixed.name, mixed.history, single.history)  # the same settings reached
        assert mixed.fingerprint == single.fingerprint, mixed.name  # and the same figures and numbers
    assert len(watch.seen) >= 3, "expected a forkserver and workers under the server"
    assert not left, f"processes outlived the server: {left}"

    def p95(runs: list[Session], loads: bool = False) -> float:
        return percentile([t for s in runs for t in (s.times_s[:1] if loads else s.times_s[1:])], 0.95)

    ratio = p95(together) / p95(alone)
    print(
        f"\n95th-percentile interaction: {p95(together):.2f} s with {len(together)} sessions at once, "
        f"{p95(alone):.2f} s one at a time: ratio {ratio:.2f}; "
        f"page loads {p95(together, True):.2f} s against {p95(alone, True):.2f} s"
    )
    # Sessions share the workers and the cache: at worst a slow interaction waits for every other
    # session's, so it takes no longer than the sessions one after another. Beyond that, someone starves.
    assert ratio <= len(together), f"an interaction took {ratio:.1f}x its time alone with {len(together)} sessions"


def processes_at_depth(root: int, depth: int) -> set[int]:
    children = children_by_parent()
    level = {root}
    for _ in range(depth):
        level = {child for pid in level for child in children.get(pid, [])}
    return {pid for pid in level if alive(pid)}


def test_leaving_a_page_mid_run_stops_its_run_within_a_second(browser):
    """A long profile with DataLoader workers; the user opens another page; the workers are gone within ~1 s.

    Processes under the server: forkserver (1) -> engine worker (2) -> its forkserver (3) -> DataLoader workers (4).
    """
    with streamlit_server() as (url, server):
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        page.goto(f"{url}/Profiler?num_workers=2&data_cost_ms=50&warmup=5&active=10")
        deadline = time.monotonic() + 90
        while not processes_at_depth(server.pid, 4):
            assert time.monotonic() < deadline, "the profiling run never started its DataLoader workers"
            time.sleep(0.1)
        page.get_by_role("link", name="PyTorch Explorer").first.click()
        left = time.monotonic()
        while processes_at_depth(server.pid, 4) and time.monotonic() - left < 5:
            time.sleep(0.05)
        stopped_after = time.monotonic() - left
        page.context.close()
    assert stopped_after < 1.5, f"the run's DataLoader workers were still alive {stopped_after:.1f} s after leaving"


@pytest.fixture
def short_tmp():
    """A temp directory with a short path: the forkserver's socket path must fit 108 bytes (pytest's is long)."""
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="t-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_killed_server_leaves_no_process_and_no_temp_folder(browser, short_tmp, monkeypatch):
    """SIGKILL the server while Reproducibility's runs train: its forkserver, workers, the workers' templates, the
    runs (forks in sessions of their own) and their DataLoader workers all end, and the workers' folders go; the
    server's forkserver listener folder goes at the next engine start.

    Processes under the server: forkserver (1) -> engine worker (2) -> template (3) -> run (4) -> DataLoader (5).
    """
    tmp_path = short_tmp
    with streamlit_server(env={"TMPDIR": str(tmp_path)}) as (url, server):
        page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
        try:
            page.goto(f"{url}/Reproducibility?steps=100&runs=3")
            deadline = time.monotonic() + 120
            while not processes_at_depth(server.pid, 5):
                assert time.monotonic() < deadline, "the runs never started their DataLoader workers"
                time.sleep(0.1)
            below = descendants(server.pid)
            engine_folder = f"explorer-worker-{server.pid}-engine-"
            assert [p for p in tmp_path.glob("explorer-worker-*") if not p.name.startswith(engine_folder)]
            server.kill()
            server.wait()
            deadline = time.monotonic() + 10
            while (
                {pid for pid in below if alive(pid)}
                or [p for p in tmp_path.glob("explorer-worker-*") if not p.name.startswith(engine_folder)]
            ) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            page.context.close()
    assert not {pid for pid in below if alive(pid)}, "processes outlived the killed server"
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    # Only the engine's own folder (multiprocessing's pymp-* folder with the forkserver's listener inside it, no
    # pymp-* of its own in the temp directory) may wait for the next start, and torch's per-user compiler cache,
    # which is meant to outlive a process (a run's optimizer imports torch._inductor, which makes the folder).
    assert not list(tmp_path.glob("pymp-*")), left
    assert all(name.startswith((engine_folder, "torchinductor_")) for name in left), left
    assert not list(tmp_path.glob("torchinductor_*/*")), "torch's cache holds files: the runs compiled something"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    engine.sweep_stale_folders()
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert all(name.startswith("torchinductor_") for name in left), left  # torch's cache is not the engine's to sweep
