"""Runs in fresh processes: one new Python interpreter per run, with a hard time limit and cleanup.

Why fresh. A process carries its RNG state, its seeds and its deterministic flags from one run
to the next; the run engine's workers are long-lived and reset those to fixed values between
runs. Either way a second run in the same process would not start where a new `python train.py`
starts (torch, numpy and `random` seeded from the operating system's entropy), and "unseeded"
runs could look reproducible. So each run is a new interpreter (`subprocess`, not fork), and the
lab compares what really happens when you run a script twice.

Each child leads its own process group: when a run ends, fails, passes its time limit, or the
caller leaves (an exception from `on_progress`, such as the engine's Cancelled), the whole group
is killed (its DataLoader workers too) before the child is reaped, so the group id cannot have
been reused. A child also ends itself if its parent dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from explorers.capacity import usable_cores
from explorers.errors import RunFailed
from explorers.reproducibility import child
from explorers.reproducibility.child import PREFIX

ROOT = Path(__file__).resolve().parents[2]
CHILD_SCRIPT = Path(child.__file__).resolve()
RUN_TIMEOUT_S = 90.0  # one run's limit, its interpreter start included
POLL_S = 0.1
STDERR_TAIL_CHARS = 1500


@dataclass(frozen=True)
class Outcome:
    result: dict  # what job.run returned, loaded with weights_only=True
    start_s: float  # launch until torch was imported and the child said "ready": the price of a fresh process
    total_s: float  # launch until the result file was complete


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"  # the job uses one thread; no idle OpenMP team to fork DataLoader workers from
    env.pop("PYTHONSTARTUP", None)
    return env


class _Child:
    def __init__(self, index: int, request: dict, workdir: Path) -> None:
        self.index = index
        self.result_path = workdir / f"result-{index}.pt"
        self.stderr = open(workdir / f"stderr-{index}.txt", "w+b")  # noqa: SIM115  (closed by _supervise)
        self.launched = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD_SCRIPT), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=ROOT,
            env=_environment(),
            start_new_session=True,  # its own process group: one killpg ends it and its DataLoader workers
        )
        self.process.stdin.write(json.dumps({**request, "result_path": str(self.result_path)}).encode())
        self.process.stdin.close()
        os.set_blocking(self.process.stdout.fileno(), False)
        self.pending = b""
        self.ready_at: float | None = None
        self.steps = 0
        self.done = False
        self.closed = False  # stdout reached its end

    def read(self) -> None:
        try:
            chunk = os.read(self.process.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        if not chunk:
            self.closed = True
            return
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            words = line.decode(errors="replace").split()
            if not words or words[0] != PREFIX:
                continue  # anything else a library printed
            if words[1] == "ready":
                self.ready_at = time.monotonic()
            elif words[1] == "step":
                self.steps = int(words[2])
            elif words[1] == "done":
                self.done = True

    def stop(self) -> None:
        """Kill the child's process group, then reap it (not before: the reaped pid could be reused)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process.stdout.close()

    def failure(self, why: str) -> RunFailed:
        self.stderr.seek(0)
        tail = self.stderr.read().decode(errors="replace")[-STDERR_TAIL_CHARS:].strip()
        return RunFailed(f"run {self.index + 1} {why}" + (f": {tail.splitlines()[-1]}" if tail else ""))


def run_fresh(
    requests: Sequence[dict],
    *,
    parallel: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
    workdir: Path | None = None,
) -> list[Outcome]:
    """Each request (child.py's JSON) in its own new interpreter, `parallel` at a time; results in order.

    `on_progress(steps done, over all runs)` is called at least every POLL_S; an exception from it
    stops every child and propagates. A child that exits without a result or passes `timeout_s`
    raises RunFailed, naming the run and the last line it wrote to stderr.
    """
    parallel = max(1, parallel or usable_cores())
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="repro-")))
        return _supervise(list(requests), parallel, on_progress, timeout_s, workdir)


def _supervise(requests, parallel, on_progress, timeout_s, workdir) -> list[Outcome]:
    waiting = list(enumerate(requests))
    running: list[_Child] = []
    started: list[_Child] = []
    outcomes: list[Outcome | None] = [None] * len(requests)
    finished_steps = 0
    selector = selectors.DefaultSelector()
    try:
        while waiting or running:
            while waiting and len(running) < parallel:
                child = _Child(*waiting.pop(0), workdir)
                started.append(child)
                selector.register(child.process.stdout, selectors.EVENT_READ, child)
                running.append(child)
            for key, _ in selector.select(POLL_S):
                key.data.read()
            now = time.monotonic()
            for child in list(running):
                if child.done or child.closed:
                    selector.unregister(child.process.stdout)
                    running.remove(child)
                    child.stop()
                    if not child.done:
                        raise child.failure(f"ended without a result (exit code {child.process.returncode})")
                    result = torch.load(child.result_path, weights_only=True)
                    outcomes[child.index] = Outcome(
                        result, (child.ready_at or now) - child.launched, now - child.launched
                    )
                    finished_steps += child.steps
                elif now - child.launched > timeout_s:
                    raise child.failure(f"took longer than its {timeout_s:g} s limit and was stopped")
            if on_progress:
                on_progress(finished_steps + sum(child.steps for child in running))
    finally:
        for child in running:
            child.stop()
        for child in started:
            child.stderr.close()
        selector.close()
    return outcomes
