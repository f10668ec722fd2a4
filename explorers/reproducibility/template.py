"""A pristine interpreter that has imported torch, and forks one process per run: a fresh process in milliseconds.

Why. A new interpreter per run spends about half its time importing torch (1.7 s of 3.4 s on
this machine, much more under load). The template pays that import once; each run is a fork of
it and starts where a new `python train.py` would be after its imports:
- modules: torch, numpy and the job's own modules, imported but never called (child.preload),
  and torch's compiler stack (COMPILER_STACK), which a run's first optimizer or deterministic
  flag would import: about 1.1 s of every run here, paid once in the template instead (a run
  started as a new interpreter still pays it, and the lab says so from what each run imported);
- the global RNGs: reseeded from the OS in each run (child.reseed_from_the_os), so unseeded
  runs differ as new interpreters do;
- deterministic algorithms and the thread count: never touched here, so torch's defaults;
- Python's hash seed: drawn once when the template started, so shared by its runs (the job
  draws nothing from it).

Each run leads its own process group (its DataLoader workers with it) and ends itself when the
template is gone; the template ends itself when its caller is gone. So a run never outlives the
process that asked for it, whatever is killed.

Protocol on a Unix SEQPACKET socket, one message per order, one answer each:
- {"op": "run", "request": {...}} with two file descriptors (the run's stdout and stderr): the
  template forks, the run writes child.py's progress lines; answer: the run's pid;
- {"op": "reap", "pid": N} once the caller has killed the run's group: answer its exit code.
The template reaps its runs only when asked, so a pid cannot be reused while the caller may
still signal it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # run as a script: the repository root on the path, not this script's folder
    sys.path[0] = str(ROOT)

from explorers.errors import RunFailed  # noqa: E402

SCRIPT = Path(__file__).resolve()
MAX_MESSAGE = 1 << 16  # a request is a config of bounded values, a few hundred bytes
READY = b"ready"
COMPILER_STACK = ("torch._dynamo", "torch._inductor")  # what job.HEAVY_IMPORTS watches for
START_POLL_S = 0.1
AVAILABLE = sys.platform.startswith("linux") and hasattr(socket, "SOCK_SEQPACKET")  # fork after torch: Linux only


# --- The template process ------------------------------------------------------------------------------------


def serve(caller: int, fd: int) -> None:
    from explorers.lifeline import exit_with_parent  # light: the watch starts before torch is imported

    # The watch thread, not the kernel's signal: that fires when the *thread* that started us ends, and a
    # notebook may start the template from a short-lived thread while another keeps using it.
    exit_with_parent(caller, kernel_signal=False)
    import explorers.reproducibility.child as child

    child.preload()
    for name in COMPILER_STACK:  # imported, never called: no state of a run's is touched
        importlib.import_module(name)
    channel = socket.socket(fileno=fd)
    channel.send(READY)
    me = os.getpid()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, 2)
        except OSError:
            os._exit(0)
        if not message:  # the caller closed its end
            os._exit(0)
        order = json.loads(message)
        if order["op"] == "run":
            pid = os.fork()
            if pid == 0:
                _be_the_run(channel, fds, order["request"], me)
            for descriptor in fds:
                os.close(descriptor)
            channel.send(str(pid).encode())
        elif order["op"] == "reap":
            _, status = os.waitpid(order["pid"], 0)
            channel.send(str(os.waitstatus_to_exitcode(status)).encode())


def _be_the_run(channel: socket.socket, fds: list[int], request: dict, template: int) -> None:
    """In the fork: a process group of its own, the caller's pipe as stdout, new seeds, the run; never returns."""
    code = 1
    try:
        channel.close()
        os.setsid()
        for target, descriptor in zip((1, 2), fds, strict=True):
            os.dup2(descriptor, target)
            os.close(descriptor)
        import explorers.reproducibility.child as child
        from explorers.lifeline import exit_with_parent

        exit_with_parent(template, whole_group=True)
        child.reseed_from_the_os()
        child.say("ready")
        child.run_request(request)
        code = 0
    except BaseException:  # noqa: BLE001  (the caller reads the last line of stderr)
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


# --- The caller's side -----------------------------------------------------------------------------------------


class Template:
    """A caller's template: started on first use, restarted if it died. Thread-safe; one per process is enough."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._channel: socket.socket | None = None
        self._ready, self._ready_at = False, 0.0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process and self._process.poll() is None else None

    def ensure_ready(self, env: dict[str, str], on_wait: Callable[[], None], timeout_s: float) -> bool:
        """Start the template unless it is running; True if this call waited for its start (a cold start).

        `on_wait()` runs every START_POLL_S while the template imports torch, and may raise to stop
        waiting (the template keeps starting, for the next caller).
        """
        called = time.monotonic()
        with self._lock:  # another caller may hold it while the template starts: that is a wait for its start too
            if self._ready and self._process.poll() is None:
                return self._ready_at > called
            if self._process is None or self._process.poll() is not None:
                self._start(env)
            deadline = time.monotonic() + timeout_s
            while not self._ready:
                self._channel.settimeout(START_POLL_S)
                with contextlib.suppress(TimeoutError):
                    answer = self._channel.recv(MAX_MESSAGE)
                    if answer != READY:
                        self._stop()
                        raise RunFailed("the template interpreter ended while importing torch")
                    self._ready, self._ready_at = True, time.monotonic()
                    break
                if time.monotonic() > deadline:
                    self._stop()
                    raise RunFailed(f"the template interpreter took longer than {timeout_s:g} s to import torch")
                on_wait()
            self._channel.settimeout(None)
            return True

    def fork(self, request: dict, stdout: int, stderr: int) -> int:
        """Fork a run of `request` writing to these descriptors; its pid."""
        with self._lock:
            try:
                order = json.dumps({"op": "run", "request": request}).encode()
                socket.send_fds(self._channel, [order], [stdout, stderr])
                return int(self._channel.recv(MAX_MESSAGE))
            except (OSError, ValueError, AttributeError) as error:
                self._stop()
                raise RunFailed("the template interpreter is gone; the next run starts a new one") from error

    def reap(self, pid: int) -> int | None:
        """The exit code of a run whose group the caller has killed; None if the template is gone (so is the run)."""
        with self._lock:
            try:
                self._channel.send(json.dumps({"op": "reap", "pid": pid}).encode())
                return int(self._channel.recv(MAX_MESSAGE))
            except (OSError, ValueError, AttributeError):
                self._stop()
                return None

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _start(self, env: dict[str, str]) -> None:
        self._stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, str(SCRIPT), str(os.getpid()), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # a run's output goes to the pipe it is given
                cwd=ROOT,
                env=env,
            )
        self._channel = ours

    def _stop(self) -> None:
        self._ready = False
        if self._channel is not None:
            self._channel.close()  # the template exits when it reads the end, its runs when it is gone
            self._channel = None
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            self._process.wait()
            self._process = None


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
