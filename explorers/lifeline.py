"""No process of a run outlives the one who started it: a parent watch shared by workers, ranks and children.

Call `exit_with_parent` first thing, before any heavy import (torch takes seconds, up to 18 s
on a loaded machine): a process that records its parent after that may record init, when the
parent is already gone, and then live on. On Linux the kernel also sends SIGKILL the moment
the parent dies (PR_SET_PDEATHSIG); the watch thread covers the rest, and the supervisor named
in EXPLORER_SUPERVISOR_PID (the run engine's worker that launched torchrun, two levels up) too.
Imports nothing heavy, so it costs nothing before torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

SUPERVISOR_ENV = "EXPLORER_SUPERVISOR_PID"
CHECK_S = 0.2
PR_SET_PDEATHSIG = 1


def exit_with_parent(
    parent: int | None = None,
    *,
    whole_group: bool = False,
    kernel_signal: bool = True,
    remove: str | None = None,
    also: int | None = None,
) -> None:
    """End this process (or its whole process group) once `parent` (default: the current one) is gone.

    A process that ends its whole group never gets the kernel's signal, only the watch thread: the
    signal would kill it alone, and its group (a run's DataLoader workers, which look for their
    parent only every 5 s) would live on. `kernel_signal=False` leaves the end to the watch thread
    for a process of its own too.
    `remove`: a folder to delete on the way out, once the rest of the group is gone (so nothing
    writes into it any more): the engine worker's temporary folder, when the server was killed.
    `also`: another process whose end ends this one too. An engine worker's parent is the server's
    forkserver, which lives as long as any process it forked does (each holds its "alive" pipe): after a
    SIGKILL of the server, the two kept each other alive, and a compile ran on for a minute.
    """
    parent = parent or os.getppid()
    supervisor = int(os.environ.get(SUPERVISOR_ENV, "0") or 0)
    if kernel_signal and not whole_group:
        kill_me_with_my_parent()

    def gone() -> bool:
        watched = [p for p in (supervisor, also or 0) if p > 0]
        return os.getppid() != parent or not all(alive(p) for p in watched)

    def end() -> None:
        exit_now(whole_group=whole_group, remove=remove)

    if gone():  # the parent died before this process could watch it
        end()

    def watch() -> None:
        while not gone():
            time.sleep(CHECK_S)
        end()

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def exit_now(*, whole_group: bool = False, remove: str | None = None, code: int = 3) -> None:
    """End this process: first the rest of its group (`whole_group`), then delete `remove`, then itself."""
    if whole_group:
        kill_my_group_but_me()
    if remove:
        shutil.rmtree(remove, ignore_errors=True)
    if whole_group:
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGKILL)  # whoever joined since, and this process
    os._exit(code)


def kill_my_group_but_me() -> None:
    """SIGKILL every other member of this process group (Linux, from /proc; elsewhere the caller's killpg does it)."""
    me, group = os.getpid(), os.getpgid(0)
    for stat in _proc_stats():
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            if int(fields[2]) == group and pid != me:
                os.kill(pid, signal.SIGKILL)


def _proc_stats() -> list[Path]:
    try:
        return [Path(entry.path, "stat") for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a killed parent not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not sys.platform.startswith("linux")  # no /proc entry on Linux: gone


def _prctl():
    """libc's prctl, looked up now: a preexec_fn runs between fork and exec, where loading a library may hang."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def kill_me_with_my_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel sends SIGKILL when the parent dies (Linux; elsewhere the watch thread only)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
