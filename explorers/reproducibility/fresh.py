"""Runs in fresh processes: one new process per run, with a hard time limit and cleanup.

Why fresh. A process carries its RNG state, its seeds and its deterministic flags from one run
to the next; the run engine's workers are long-lived and reset those to fixed values between
runs. Either way a second run in the same process would not start where a new `python train.py`
starts (torch, numpy and `random` seeded from the operating system's entropy), and "unseeded"
runs could look reproducible. So each run is a new process, started one of two ways:
- forked from a template interpreter that imported torch and the job's code and ran none of it (explorers.
  reproducibility.template; Linux): milliseconds instead of seconds, reseeded from the OS;
- a new interpreter (`subprocess`, not fork): elsewhere, or when asked for.

Each run leads its own process group: when a run ends, fails, passes its time limit, or the
caller leaves (an exception from `on_progress`, such as the engine's Cancelled), the whole group
is killed (its DataLoader workers too) before the run is reaped, so the group id cannot have
been reused. A run also ends itself if its parent dies.
"""

from __future__ import annotations

import atexit
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

import explorers.reproducibility.child as child
import explorers.reproducibility.template as template
from explorers.capacity import usable_cores
from explorers.errors import RunFailed
from explorers.reproducibility.child import PREFIX

ROOT = Path(__file__).resolve().parents[2]
CHILD_SCRIPT = Path(child.__file__).resolve()
RUN_TIMEOUT_S = 90.0  # one run's limit, its interpreter start included
POLL_S = 0.1
STDERR_TAIL_CHARS = 1500
# How each run's process started, for the lesson
INTERPRETER = "a new interpreter"
TEMPLATE_WARM = "forked from the running template"
TEMPLATE_COLD = "forked from a template started for this run"
LAUNCHERS = ("template", "interpreter")

_template = template.Template()  # one per process, shared by its threads; it ends when this process does


@dataclass(frozen=True)
class Outcome:
    result: dict  # what job.run returned, loaded with weights_only=True
    start_s: float  # launch (of the template too, if it was started for this run) until the run said "ready"
    total_s: float  # launch until the result file was complete
    launch: str  # INTERPRETER, TEMPLATE_WARM or TEMPLATE_COLD


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"  # the job uses one thread; no idle OpenMP team to fork DataLoader workers from
    env.pop("PYTHONSTARTUP", None)
    return env


class _Child:
    """One run's process, however it started: its progress pipe, its stderr file, its end."""

    def __init__(self, index: int, request: dict, workdir: Path, launch: str, launched: float) -> None:
        self.index, self.launch, self.launched = index, launch, launched
        self.result_path = workdir / f"result-{index}.pt"
        self.stderr = open(workdir / f"stderr-{index}.txt", "w+b")  # noqa: SIM115  (closed by _supervise)
        request = {**request, "result_path": str(self.result_path)}
        self.process: subprocess.Popen | None = None
        if launch == INTERPRETER:
            self.process = subprocess.Popen(
                [sys.executable, str(CHILD_SCRIPT), str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                cwd=ROOT,
                env=_environment(),
                start_new_session=True,  # its own process group: one killpg ends it and its DataLoader workers
            )
            self.process.stdin.write(json.dumps(request).encode())
            self.process.stdin.close()
            self.pid, self.stdout = self.process.pid, self.process.stdout
        else:
            read, write = os.pipe()
            try:
                self.pid = _template.fork(request, write, self.stderr.fileno())
            finally:
                os.close(write)  # the run holds the only write end: its exit is the pipe's end
            self.stdout = os.fdopen(read, "rb")
        os.set_blocking(self.stdout.fileno(), False)
        self.pending = b""
        self.ready_at: float | None = None
        self.steps = 0
        self.done = False
        self.closed = False  # stdout reached its end
        self.returncode: int | None = None

    def read(self) -> None:
        try:
            chunk = os.read(self.stdout.fileno(), 65536)
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
        """Kill the run's process group, then reap it (not before: the reaped pid could be reused)."""
        for kill in (os.killpg, os.kill):  # os.kill too: a fork may not have made its group yet
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(self.pid, signal.SIGKILL)
        self.returncode = self.process.wait() if self.process else _template.reap(self.pid)
        self.stdout.close()

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
    launcher: str = "template",
) -> list[Outcome]:
    """Each request (child.py's JSON) in a new process of its own, `parallel` at a time; results in order.

    `launcher`: "template" forks each run from the template (a new interpreter where fork is not
    offered); "interpreter" starts a new interpreter per run. `on_progress(steps done, over all
    runs)` is called at least every POLL_S, while a template starts too; an exception from it stops
    every run and propagates. A run that exits without a result or passes `timeout_s` (its start
    included) raises RunFailed, naming the run and the last line it wrote to stderr.
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {LAUNCHERS}, not {launcher!r}")
    parallel = max(1, parallel or usable_cores())
    called = time.monotonic()
    launch = INTERPRETER
    if launcher == "template" and template.AVAILABLE:
        cold = _template.ensure_ready(_environment(), lambda: on_progress and on_progress(0), timeout_s)
        launch = TEMPLATE_COLD if cold else TEMPLATE_WARM
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="repro-")))
        return _supervise(list(requests), parallel, on_progress, timeout_s, workdir, launch, called)


def start_template() -> int | None:
    """Start this process's template now, if fork is offered (a notebook may, before its first comparison); its pid."""
    if not template.AVAILABLE:
        return None
    _template.ensure_ready(_environment(), lambda: None, RUN_TIMEOUT_S)
    return _template.pid


def close_template() -> None:
    """End this process's template (the next run starts a new one): for tests, and to free its memory."""
    _template.close()


atexit.register(close_template)


def _supervise(requests, parallel, on_progress, timeout_s, workdir, launch, called) -> list[Outcome]:
    waiting = list(enumerate(requests))
    running: list[_Child] = []
    started: list[_Child] = []
    outcomes: list[Outcome | None] = [None] * len(requests)
    finished_steps = 0
    selector = selectors.DefaultSelector()
    try:
        while waiting or running:
            while waiting and len(running) < parallel:
                # the first runs waited for a template started for them, so their start counts it; later ones did not
                cold = launch == TEMPLATE_COLD and len(started) < parallel
                how = TEMPLATE_WARM if launch == TEMPLATE_COLD and not cold else launch
                child = _Child(*waiting.pop(0), workdir, how, called if cold else time.monotonic())
                started.append(child)
                selector.register(child.stdout, selectors.EVENT_READ, child)
                running.append(child)
            for key, _ in selector.select(POLL_S):
                key.data.read()
            now = time.monotonic()
            for child in list(running):
                if child.done or child.closed:
                    selector.unregister(child.stdout)
                    running.remove(child)
                    child.stop()
                    if not child.done:
                        raise child.failure(f"ended without a result (exit code {child.returncode})")
                    result = torch.load(child.result_path, weights_only=True)
                    start_s = (child.ready_at or now) - child.launched
                    outcomes[child.index] = Outcome(result, start_s, now - child.launched, child.launch)
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
