"""The processes of a run: ranks forked from multiprocessing's forkserver, or torchrun's agent, and their ends.

A rank forks from the forkserver with torch (and the `torch._dynamo` that DDP's constructor
imports) already loaded: a fresh interpreter per rank spends seconds importing them (measured
here: about 3.5 s of CPU per rank), so only the first run of a process pays that, once. The
forkserver is multiprocessing's one per process (DataLoader workers use it too); it lives as
long as the process that launched the run, and no rank outlives its run.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
from pathlib import Path

import explorers.ddp.results as results
from explorers.lifeline import exit_with_parent

REAP_S = 5.0


class Rank:
    """One rank forked from the forkserver (a multiprocessing.Process)."""

    def __init__(self, process) -> None:
        self.process = process

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def sentinel(self) -> int:
        return self.process.sentinel

    def alive(self) -> bool:
        return self.process.exitcode is None

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, AttributeError):
            self.process.kill()

    def reap(self) -> None:
        self.process.join(REAP_S)


class Command:
    """torchrun's agent (a subprocess), whose workers are its children, not ours."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def sentinel(self) -> None:
        return None

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.popen.returncode

    def kill(self) -> None:
        for pid in [*descendants(self.popen.pid), self.popen.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def reap(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=REAP_S)


def forkserver_running() -> bool:
    server = multiprocessing.forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    return pid is not None and getattr(server, "_forkserver_alive_fd", None) is not None


def forkserver_method() -> str:
    """How this run's ranks will start: from a forkserver with DDP's modules loaded, one started now, or another's.

    multiprocessing has one forkserver per process. If something else (the run engine, a DataLoader)
    started it first, its preload list lacks torch._dynamo and the worker, and each rank imports them.
    """
    if not forkserver_running():
        return results.FORKSERVER_COLD
    preloaded = getattr(multiprocessing.forkserver._forkserver, "_preload_modules", None) or []
    return results.FORKSERVER_WARM if "explorers.ddp.worker" in preloaded else results.FORKSERVER_SHARED


def do_nothing() -> None:
    """A process's whole work when it is started only to get the forkserver going (see launcher)."""


def rank_main(env: dict[str, str], argv: list[str], log: str) -> None:
    """A rank, forked from the forkserver: the worker script's `main` with torchrun's variables set."""
    output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.environ.clear()
    os.environ.update(env)
    exit_with_parent()  # the forkserver is this rank's parent: the launcher's worker watches it in turn
    import explorers.ddp.worker as worker

    code = worker.main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc): torchrun's workers are its children, not ours."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"
