"""The run engine: every lab experiment runs in a small pool of long-lived worker processes.

Why processes. Streamlit serves every browser session from threads of one process, and
much of what the labs teach installs process-wide state: MemTracker's module hooks, the
profiler, `torch.set_num_threads`, deterministic-algorithm flags, CUDA peak statistics,
the global RNG. Run in the server, one user's experiment would reach into another's
(measured: three sessions on the Memory lab crashed each other every time). Torch work
on Streamlit's script threads is also ~3x slower than on a process's main thread, since
each new thread builds its own OpenMP team. So an experiment runs on a worker's main
thread, alone in its process, and returns plain picklable data.

What the engine does:
- workers start from a forkserver that has already imported torch, so a new worker is a
  fork away (not a 1.5 s import); the pool is sized from the cores and free memory;
- `submit` returns a `Run`; `Run.result(on_poll)` streams `Progress` (with optional
  partial data) while it waits; the experiment reports through the `report` callback it
  is given, and each report is also where a cancel request takes effect;
- results are cached by (experiment, options, code version: a hash of every file under
  explorers/), so an edited explorer is never answered with an old result, and a worker
  that imported the old code is replaced before it runs anything; the cache is bounded
  in entries and bytes, shared by
  every caller and handed out as copies (unpickled afresh); identical requests in flight
  share one job, and a job is cancelled only when its last waiter leaves;
- a run past its time limit, or whose worker does not honour a cancel within
  `CANCEL_GRACE_S`, has its worker killed with the worker's whole process group
  (DataLoader workers included); a worker that dies (SIGKILL, out of memory) fails its
  run with `WorkerCrashed`; either way a fresh worker takes its place;
- every worker resets process-wide state (seeds, thread count, determinism flags)
  before and after each run, so a result depends on its options only.

Why not `concurrent.futures.ProcessPoolExecutor`: it cannot stop one running task, and
a worker killed from outside breaks the whole pool (`BrokenProcessPool`). This module
uses the same parts (multiprocessing's forkserver, Process, Pipe, a management thread)
with per-worker control.

An experiment is a module-level function `fn(options, report=None)`: `options` is a
frozen dataclass, `report(done, total, partial=None)` may be None (a notebook calls the
function directly). From a notebook, for isolation::

    from explorers import engine
    engine.default_engine().submit(memory.experiment.point, options).result()
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import hashlib
import itertools
import multiprocessing
import multiprocessing.connection
import multiprocessing.spawn
import multiprocessing.util
import os
import pickle
import random
import shutil
import signal
import socket
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorers import forkserver, lifeline, scheduling
from explorers.capacity import available_memory_bytes, usable_cores
from explorers.errors import RunFailed, RunTimedOut, WorkerCrashed

DEFAULT_TIMEOUT_S = 120.0
CANCEL_GRACE_S = 0.5  # a worker that has not stopped by then is killed: a left page stops its run within ~1 s
WORKER_MEMORY_BYTES = 2 * 2**30  # what one worker may need at most (the Memory lab allocates up to 256 MiB)
MAX_WORKERS = 4
CACHE_MAX_ENTRIES = 512
CACHE_MAX_BYTES = 256 * 2**20
START_BACKOFF_S, START_BACKOFF_MAX_S = 0.25, 30.0  # before restarting after the n-th worker that died at start
START_FAILURES_ALLOWED = 3  # workers that die before they are ready, in a row, before queued runs fail
# What the forkserver imports once, before any worker forks from it (figures need pandas and plotly).
# torch._dynamo is imported by torch's own code on first use (an optimizer's first step, DDP): 1.1 s
# here, which a worker's first run of most labs paid (Autograd's replay: 1.2 s cold, 12 ms with it).
# It is torch's code, not ours, so a preloaded copy never goes stale when a lab is edited. The first
# compile's imports and caches come with `explorers.dynamo_warmup` (a worker's first recompile schedule:
# 580 ms without, 210 ms with).
PRELOAD = ["torch", "torch._dynamo", "explorers.dynamo_warmup", "pandas", "plotly.graph_objects", "explorers.engine"]


class Cancelled(Exception):  # noqa: N818  (a signal, not an error)
    """Raised inside an experiment at its next `report` after the run was cancelled."""


@dataclass(frozen=True)
class Progress:
    done: int = 0
    total: int = 0
    partial: Any = None  # data the experiment chose to show before it finished
    queued_behind: int = 0  # runs ahead of this one while it waits for a worker

    @property
    def fraction(self) -> float:
        return min(self.done / self.total, 1.0) if self.total else 0.0


MIN_WORKERS = 2  # long runs hold all workers but one (scheduling.long_run_cap): with one, a compile held it all


def pool_size(cores: int | None = None, available_bytes: int | None = None) -> int:
    """One worker per core, plus one: long runs may hold all workers but one (`scheduling.long_run_cap`), so
    long runs use every core while a worker stays free for short ones. Fewer when free memory is short;
    EXPLORER_WORKERS overrides. Never fewer than MIN_WORKERS, whatever is asked: a class server's replica once
    had one worker, and a compile of up to 240 s kept every other session's short run waiting behind it."""
    explicit = os.environ.get("EXPLORER_WORKERS", "")
    if explicit.isdigit() and int(explicit) > 0:
        return max(MIN_WORKERS, min(int(explicit), MAX_WORKERS))
    cores = cores or usable_cores()
    available = available_bytes if available_bytes is not None else available_memory_bytes()
    return max(MIN_WORKERS, min(cores + 1, available // WORKER_MEMORY_BYTES, MAX_WORKERS))


# --- The worker process ----------------------------------------------------------------------

WORKER_NAME = "explorer-worker"
_standard_preparation_data = multiprocessing.spawn.get_preparation_data


def _preparation_data(name: str) -> dict:
    """What a new process imports before it runs: for our workers, never the parent's `__main__`.

    multiprocessing re-imports the parent's main module in every child it starts. Streamlit
    installs the page it is running as `__main__`, so a worker started during a page run
    would run that page while booting (and start an engine of its own from it). Workers
    need nothing from `__main__`: experiments are importable module-level functions.
    """
    data = _standard_preparation_data(name)
    if name.startswith(WORKER_NAME):
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


multiprocessing.spawn.get_preparation_data = _preparation_data


def _reset_process_state(threads: int) -> None:
    """Everything process-wide a previous run may have changed, back to one known state."""
    import torch

    torch.manual_seed(0)
    random.seed(0)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(0)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = False


def _worker_main(conn: multiprocessing.connection.Connection, threads: int, folder: str, server: int) -> None:
    # Every temporary file of its runs (DDP's, torchrun's, fresh interpreters', multiprocessing's) goes in here,
    # children included: the engine removes the folder when it replaces this worker, however the run ended.
    os.environ["TMPDIR"] = tempfile.tempdir = folder
    os.setsid()  # its own process group: killing the group also ends its DataLoader workers
    # with the server (or its forkserver) the group ends, a compile's g++ with it, and the folder goes (a
    # SIGKILLed server cannot remove it)
    lifeline.exit_with_parent(whole_group=True, remove=folder, also=server)
    import torch

    _reset_process_state(threads)
    torch.ones(64, 64) @ torch.ones(64, 64)  # build the thread team now, not in the first run
    gc.freeze()  # what the worker starts with lives as long as it does: later collections skip it
    # DataLoader workers and DDP ranks this process starts fork from a forkserver with their imports done.
    multiprocessing.set_forkserver_preload(forkserver.PRELOAD)
    try:
        conn.send(("ready",))
        while True:
            message = conn.recv()
            if message[0] == "run":  # anything else is a cancel that arrived after its run ended
                conn.send(_execute(conn, *message[1:], threads, folder))
    except (EOFError, OSError):  # the server closed its end (or died): nobody is left to answer
        lifeline.exit_now(whole_group=True, remove=folder, code=0)


def _execute(conn, job_id: int, fn: Callable, options: Any, threads: int, folder: str) -> tuple:
    def report(done: int, total: int, partial: Any = None) -> None:
        while conn.poll():
            if conn.recv() == ("cancel", job_id):
                raise Cancelled
        try:
            conn.send(("progress", job_id, Progress(done, total, partial)))
        except BrokenPipeError:  # the server is gone: nobody waits for this run
            lifeline.exit_now(whole_group=True, remove=folder, code=0)

    _reset_process_state(threads)
    try:
        payload = pickle.dumps(fn(options, report=report), pickle.HIGHEST_PROTOCOL)
        return ("done", job_id, payload)
    except Cancelled:
        return ("cancelled", job_id)

    except Exception as error:  # the experiment's own error is the message the page shows
        return ("failed", job_id, " ".join(f"{type(error).__name__}: {error}".split())[:2000])
    finally:
        _end_leftover_children()
        _reset_process_state(threads)


def _end_leftover_children() -> None:
    """End the child processes a run leaves behind before its result is reported.

    A cancelled or failed run's DataLoader iterator can sit in a reference cycle (the
    exception's frames, the profiler's records) until a later garbage collection, and its
    worker processes live as long as it does: seconds after the page that asked was left.
    """
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(1)
        if child.is_alive():
            child.kill()
            child.join()
    if children:  # a full collection costs ~0.2 s here (torch._dynamo's objects): only when there is one to free
        gc.collect()  # the iterators now find their workers gone and let go of their queues


# --- The server side ---------------------------------------------------------------------------


EXPLORERS_DIR = Path(__file__).resolve().parent
CODE_CHECK_S = 1.0  # how stale the code version may be: an edit is seen within a second
_code_lock = threading.Lock()
_code_seen: dict[str, Any] = {"at": -CODE_CHECK_S, "stat": None, "hash": ""}


def code_version() -> str:
    """A hash of every Python file under explorers/, re-read when a file's size or mtime changes."""
    with _code_lock:
        if time.monotonic() - _code_seen["at"] >= CODE_CHECK_S:
            files = sorted(EXPLORERS_DIR.rglob("*.py"))
            stat = [(str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files]
            if stat != _code_seen["stat"]:
                digest = hashlib.sha256()
                for f in files:
                    digest.update(f.relative_to(EXPLORERS_DIR).as_posix().encode() + b"\0" + f.read_bytes())
                _code_seen.update(stat=stat, hash=digest.hexdigest()[:16])
            _code_seen["at"] = time.monotonic()
        return _code_seen["hash"]


def experiment_key(fn: Callable, options: Hashable) -> tuple:
    return (fn.__module__, fn.__qualname__, options, code_version())


class _Job:
    """One experiment run, shared by every Run that asked for the same (experiment, options)."""

    _ids = itertools.count(1)

    def __init__(self, fn: Callable, options: Any, timeout_s: float, priority: int, session: str, long: bool) -> None:
        self.id = next(self._ids)
        self.fn, self.options, self.timeout_s, self.priority = fn, options, timeout_s, priority
        self.session, self.long = session, long  # whose turn it takes; a long run holds part of the pool only
        self.key = experiment_key(fn, options)
        self.state = "queued"  # -> running -> done | failed | cancelled
        self.progress = Progress()
        self.payload: bytes | None = None
        self.error: RunFailed | None = None
        self.waiters = 0
        self.worker: _Worker | None = None
        self.deadline = float("inf")

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "cancelled")


_worker_ids = itertools.count(1)


FOLDER_PREFIX = "explorer-worker-"


def sweep_stale_folders() -> None:
    """Remove what servers that are gone left behind (a SIGKILLed server cannot remove its own): their workers'
    folders (workers remove their own when they see the server die; this catches the rest) and the folders of
    their forkservers' listening sockets."""
    temp = Path(tempfile.gettempdir())
    for folder in temp.glob(f"{FOLDER_PREFIX}*"):
        owner = folder.name.removeprefix(FOLDER_PREFIX).split("-")[0]
        if owner.isdigit() and not lifeline.alive(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)
    for folder in _dead_listener_folders(temp):
        shutil.rmtree(folder, ignore_errors=True)


def _dead_listener_folders(temp: Path) -> list[Path]:
    """multiprocessing's `pymp-*` folders holding only forkserver listener sockets that no process has bound any
    more (Linux's /proc/net/unix lists every bound one; elsewhere nothing is swept). Never connects to a socket:
    a live forkserver would fork for the connection."""
    try:
        with open("/proc/net/unix") as table:
            bound = {line.split()[-1] for line in table if len(line.split()) >= 8}
    except OSError:
        return []
    stale = []
    for folder in temp.glob("pymp-*"):
        with contextlib.suppress(OSError):
            entries = list(folder.iterdir())
            if entries and all(
                e.name.startswith("listener-") and e.is_socket() and str(e) not in bound for e in entries
            ):
                stale.append(folder)
    return stale


_pinned_folder: list[str] = []  # the engine folder multiprocessing's temp dir lives in, once made
UNIX_SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes on Linux, its terminating NUL included
_pin_lock = threading.Lock()


def _pin_multiprocessing_temp_dir() -> str | None:
    """A folder of the engine's own, named for this process, where multiprocessing keeps its `pymp-*` folder
    (the forkserver's listener socket). multiprocessing removes that folder in an exit handler of this process,
    which a SIGKILL never runs; named like the workers' folders, the next start's sweep removes ours. The standard
    library makes its folder once per process, under `tempfile`'s directory at its first call, so that call is
    made here, with the directory pointed at the engine's folder (a later engine in the process reuses it). Under
    a temp directory so deep that the listener's socket path would not fit, nothing is moved (None)."""
    with _pin_lock:
        if not _pinned_folder:
            folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-engine-")
            if len(folder) + len("/pymp-12345678/listener-12345678") > UNIX_SOCKET_PATH_MAX:
                os.rmdir(folder)  # the listener's path would not fit a socket address: leave it where it was
                return None
            saved, tempfile.tempdir = tempfile.tempdir, folder
            try:
                multiprocessing.util.get_temp_dir()
            finally:
                tempfile.tempdir = saved
            # After multiprocessing's own clean-up of pymp-* (exit priority -100) at a normal exit
            multiprocessing.util.Finalize(
                None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-200
            )
            _pinned_folder.append(folder)
        return _pinned_folder[0]


class _Worker:
    def __init__(self, context, threads: int) -> None:
        self.folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")  # the server's pid: see the sweep
        self.conn, child_conn = context.Pipe()
        # Not a daemon: daemonic processes may not start children, and DataLoader workers are children.
        # Engine.close (registered with atexit) ends it instead.
        self.process = context.Process(
            target=_worker_main,
            args=(child_conn, threads, self.folder, os.getpid()),
            daemon=False,
            name=f"{WORKER_NAME}-{next(_worker_ids)}",
        )
        self.process.start()
        child_conn.close()
        self.ready = False
        self.code_version = code_version()  # forked now, it imports the lab modules as they are now
        self.job: _Job | None = None
        self.last_experiment: tuple[str, str] | None = None  # (module, name) of its last run
        self.cancel_deadline: float | None = None

    def kill(self) -> None:
        """SIGKILL the worker's process group (its DataLoader workers too), then reap it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()  # in case it died before it made its own group
        self.process.join(5)
        self.conn.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class Run:
    """A caller's handle on a job: wait for it with progress, or leave it (which may cancel it)."""

    def __init__(self, engine: Engine, job: _Job) -> None:
        self._engine, self._job = engine, job
        self._attached = True

    @property
    def done(self) -> bool:
        return self._job.finished

    @property
    def progress(self) -> Progress:
        return self._job.progress

    def result(self, on_poll: Callable[[Progress], None] | None = None, poll_s: float = 0.1) -> Any:
        """Block until the job ends; `on_poll(progress)` runs every `poll_s` meanwhile and may raise to leave.

        Returns a fresh copy of the result, or raises RunFailed (or Cancelled if the job was cancelled).
        """
        engine, job = self._engine, self._job
        while True:
            with engine._changed:
                if not job.finished:
                    engine._changed.wait(poll_s)
                finished = job.finished
                progress = job.progress
                if job.state == "queued":
                    progress = dataclasses.replace(progress, queued_behind=engine._queued_ahead(job))
            if finished:
                break
            if on_poll:
                on_poll(progress)
        if job.state == "done":
            return pickle.loads(job.payload)
        if job.state == "cancelled":
            raise Cancelled
        raise job.error

    def cancel(self) -> None:
        """Leave the job; it stops once no other caller waits for it. Safe to call twice."""
        if self._attached:
            self._attached = False
            self._engine._leave(self._job)


class Engine:
    def __init__(self, workers: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.size = workers or pool_size()
        self.threads_per_worker = max(1, usable_cores() // self.size)
        self.timeout_s = timeout_s
        sweep_stale_folders()
        self.folder = _pin_multiprocessing_temp_dir()
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)
        self._changed = threading.Condition()  # guards every field below; notified on any job change
        self._workers: list[_Worker] = []
        self._queue: list[_Job] = []
        self._last_served: dict[str, int] = {}  # session -> the turn it was last served at
        self._turns = 0
        self._in_flight: dict[tuple, _Job] = {}
        self._cache: OrderedDict[tuple, bytes] = OrderedDict()
        self._cache_bytes = 0
        self._closed = False
        self._start_failures = 0
        self._next_start_at = 0.0  # no worker starts before this (the backoff after workers that die at start)
        self._dying: list[_Worker] = []  # replaced workers, to kill outside the lock
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(target=self._dispatch, daemon=True, name="run-engine")
        self._thread.start()
        atexit.register(self.close)  # before multiprocessing's own exit handler would wait for the workers

    # --- for callers ---

    def submit(
        self,
        fn: Callable,
        options: Any,
        *,
        timeout_s: float | None = None,
        priority: int = 0,
        session: str = "",
        long: bool = False,
    ) -> Run:
        """Queue `fn(options)` (or join the same request in flight, or answer from the cache).

        Sessions take turns (`explorers.scheduling`); within one, lower `priority` runs first: a
        page submits its main figure's run at 0. A long run (`long`, or a time limit above the
        engine's usual one) may hold only part of the pool.
        """
        key = experiment_key(fn, options)
        with self._changed:
            if self._closed:
                raise RunFailed("the run engine has been shut down")
            job = self._in_flight.get(key)
            if job is None and sum(j.session == session for j in self._queue) >= scheduling.MAX_QUEUED_PER_SESSION:
                raise RunFailed(
                    f"this session already has {scheduling.MAX_QUEUED_PER_SESSION} runs waiting; "
                    "let them finish (or leave the page) and try again"
                )
            if job is None:
                limit = timeout_s or self.timeout_s
                job = _Job(fn, options, limit, priority, session, long=long or limit > self.timeout_s)
                if key in self._cache:
                    self._cache.move_to_end(key)
                    job.state, job.payload = "done", self._cache[key]
                else:
                    self._in_flight[key] = job
                    self._queue.append(job)
            job.priority = min(job.priority, priority)
            job.waiters += 1
        self._wake()
        return Run(self, job)

    def cached(self, fn: Callable, options: Any) -> Any | None:
        """A copy of the cached result, or None: for views that show a result only once someone asked for it."""
        with self._changed:
            payload = self._cache.get(experiment_key(fn, options))
        return None if payload is None else pickle.loads(payload)

    def remember(self, fn: Callable, options: Any, value: Any) -> None:
        """Cache `value` as `fn(options)`'s result, computed inside another run (a search measures the plans a
        page asks for next). Only for experiments whose result is a function of their options alone."""
        key, payload = experiment_key(fn, options), pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        with self._changed:
            if key not in self._cache:
                self._remember(key, payload)

    def forget_results(self) -> None:
        """Empty the cache (runs in flight go on): for tests whose timing must not depend on what ran before."""
        with self._changed:
            self._cache.clear()
            self._cache_bytes = 0

    def run(self, fn: Callable, options: Any, on_poll: Callable[[Progress], None] | None = None, **kw) -> Any:
        """Submit and wait; leaving early (an exception in on_poll) leaves the run."""
        run = self.submit(fn, options, **kw)
        try:
            return run.result(on_poll)
        finally:
            run.cancel()

    def worker_pids(self) -> list[int]:
        with self._changed:
            return [w.process.pid for w in self._workers]

    def worker_folders(self) -> list[str]:
        with self._changed:
            return [w.folder for w in self._workers]

    def busy_pids(self) -> list[int]:
        with self._changed:
            return [w.process.pid for w in self._workers if w.job]

    def close(self) -> None:
        """Stop every run and worker; the engine refuses new work afterwards."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
        self._wake()
        self._thread.join(10)

    # --- bookkeeping (callers hold self._changed) ---

    def _queued_ahead(self, job: _Job) -> int:
        order = scheduling.service_order(self._queue, self._last_served)
        return order.index(job) if job in order else 0

    def _leave(self, job: _Job) -> None:
        with self._changed:
            job.waiters -= 1
            if job.waiters > 0 or job.finished:
                return
            if job.state == "queued":
                self._queue.remove(job)
                self._finish(job, "cancelled")
            elif job.worker and job.worker.cancel_deadline is None:
                self._in_flight.pop(job.key, None)  # a new request for the same options starts afresh
                job.worker.cancel_deadline = time.monotonic() + CANCEL_GRACE_S
                with contextlib.suppress(OSError):
                    job.worker.conn.send(("cancel", job.id))
        self._wake()

    def _finish(self, job: _Job, state: str, payload: bytes | None = None, error: RunFailed | None = None) -> None:
        job.state, job.payload, job.error = state, payload, error
        self._in_flight.pop(job.key, None)
        if job.worker:
            job.worker.job, job.worker.cancel_deadline, job.worker = None, None, None
        if state == "done":
            self._remember(job.key, payload)
        self._changed.notify_all()

    def _remember(self, key: tuple, payload: bytes) -> None:
        if len(payload) > CACHE_MAX_BYTES // 4:
            return
        self._cache[key] = payload
        self._cache_bytes += len(payload)
        while len(self._cache) > CACHE_MAX_ENTRIES or self._cache_bytes > CACHE_MAX_BYTES:
            _, dropped = self._cache.popitem(last=False)
            self._cache_bytes -= len(dropped)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")

    # --- the management thread ---

    def _dispatch(self) -> None:
        try:
            while not self._closed:
                self._start_missing_workers()
                with self._changed:
                    self._assign_queued_jobs()
                    watched = {w.conn: w for w in self._workers} | {w.process.sentinel: w for w in self._workers}
                    timeout = self._seconds_to_next_deadline()
                ready = multiprocessing.connection.wait([*watched, self._wake_read], timeout)
                with self._changed:
                    if self._wake_read in ready:
                        with contextlib.suppress(BlockingIOError):
                            self._wake_read.recv(4096)
                    for item in ready:
                        worker = watched.get(item)
                        if worker in self._workers:
                            self._service_safely(worker, from_sentinel=item is worker.process.sentinel)
                    self._enforce_deadlines()
                    dying, self._dying = self._dying, []
                for worker in dying:  # outside the lock: a slow reap must not freeze every page's result()
                    worker.kill()
        except Exception:  # a bug here must not leave callers waiting forever: fail them, refuse new work
            traceback.print_exc()
        finally:
            with self._changed:
                self._closed = True
            self._shut_down_workers()

    def _service_safely(self, worker: _Worker, from_sentinel: bool) -> None:
        """`_service`, but one malformed message costs that worker (and its run), not the engine."""
        try:
            self._service(worker, from_sentinel)
        except Exception as error:
            traceback.print_exc()
            if worker in self._workers:
                self._replace(worker, RunFailed(f"the worker sent a message the engine could not read: {error}"))

    def _start_missing_workers(self) -> None:
        while len(self._workers) < self.size and not self._closed:
            if time.monotonic() < self._next_start_at:  # workers keep dying before they are ready: back off
                return
            worker = _Worker(self._context, self.threads_per_worker)  # outside the lock: the first start is slow
            with self._changed:
                self._workers.append(worker)

    def _assign_queued_jobs(self) -> None:
        if not self._queue:  # the idle loop wakes every second: read the files only when there is work to hand out
            self._changed.notify_all()
            return
        current = code_version()
        for worker in [w for w in self._workers if w.ready and w.job is None and w.code_version != current]:
            self._replace(worker, None)  # it may have imported the old code: start a fresh one
        unreachable: list[_Worker] = []  # a send failed: it may have died (its sentinel has it replaced)
        while self._queue:
            idle = [w for w in self._workers if w.ready and w.job is None and w not in unreachable]
            if not idle:
                break
            long_running = sum(1 for w in self._workers if w.job and w.job.long)
            job = scheduling.pick(self._queue, self._last_served, long_running, self.size)
            if job is None:  # only long runs wait, and they hold their share of the pool
                break
            # a worker that last ran this experiment is warm for it: its imports, a Reproducibility template,
            # DDP's forkserver (a cold one costs seconds)
            worker = next((w for w in idle if w.last_experiment == job.key[:2]), idle[0])
            self._queue.remove(job)
            self._turns += 1
            self._last_served[job.session] = self._turns
            try:
                worker.conn.send(("run", job.id, job.fn, job.options))
            except Exception as error:  # unpicklable options, or the worker just died
                self._finish(job, "failed", error=RunFailed(f"could not start the run: {error}"))
                unreachable.append(worker)  # for this round
                continue
            job.state, job.worker, worker.job = "running", worker, job
            worker.last_experiment = job.key[:2]
            job.deadline = time.monotonic() + job.timeout_s
        self._changed.notify_all()

    def _seconds_to_next_deadline(self) -> float:
        deadlines = [w.job.deadline for w in self._workers if w.job]
        deadlines += [w.cancel_deadline for w in self._workers if w.cancel_deadline]
        return max(0.0, min(deadlines, default=time.monotonic() + 1.0) - time.monotonic())

    def _service(self, worker: _Worker, from_sentinel: bool) -> None:
        """Read what a worker sent; a dead worker fails its job and is replaced."""
        try:
            while not from_sentinel and worker.conn.poll():
                self._handle(worker, worker.conn.recv())
            if not from_sentinel:
                return
        except (EOFError, OSError):
            pass
        worker.process.join(1)
        code = worker.process.exitcode
        how = f"killed by signal {-code}" if code and code < 0 else f"exit code {code}"
        if not worker.ready:
            self._start_failures += 1
            self._next_start_at = time.monotonic() + min(START_BACKOFF_S * 2**self._start_failures, START_BACKOFF_MAX_S)
            if self._start_failures >= START_FAILURES_ALLOWED:  # do not crash-loop: tell every waiting caller
                for job in list(self._queue):
                    self._queue.remove(job)
                    self._finish(job, "failed", error=RunFailed(f"worker processes cannot start ({how})"))
        self._replace(
            worker,
            WorkerCrashed(
                f"the worker process running this experiment stopped unexpectedly ({how}); "
                "a fresh worker has been started, so running it again should work"
            ),
        )

    def _handle(self, worker: _Worker, message: tuple) -> None:
        kind, job = message[0], worker.job
        if kind == "ready":
            worker.ready = True
            self._start_failures = 0
        elif job is None or message[1] != job.id:
            return  # a late message from a run that already ended
        elif kind == "progress":
            job.progress = message[2]
            self._changed.notify_all()
        elif kind == "done":
            self._finish(job, "done", payload=message[2])
        elif kind == "cancelled":
            self._finish(job, "cancelled")
        elif kind == "failed":
            self._finish(job, "failed", error=RunFailed(message[2]))

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.job and now >= worker.job.deadline:
                limit = worker.job.timeout_s
                self._replace(worker, RunTimedOut(f"the run took longer than its {limit:g} s limit and was stopped"))
            elif worker.cancel_deadline and now >= worker.cancel_deadline:
                self._replace(worker, None)

    def _replace(self, worker: _Worker, error: RunFailed | None) -> None:
        """Kill a worker (and its process group); its job fails with `error`, or is cancelled when None."""
        job = worker.job
        if job:
            self._finish(job, "cancelled" if error is None else "failed", error=error)
        self._workers.remove(worker)
        self._dying.append(worker)  # killed by the dispatch loop once the lock is released; then a fresh one starts

    def _shut_down_workers(self) -> None:
        with self._changed:
            for job in [*self._queue, *(w.job for w in self._workers if w.job)]:
                self._finish(job, "failed", error=RunFailed("the run engine was shut down"))
            self._queue.clear()
            workers, self._workers, self._dying = [*self._workers, *self._dying], [], []
        for worker in workers:
            worker.kill()
        self._wake_read.close()
        self._wake_write.close()


_default: Engine | None = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    """The process's shared engine, started on first use and stopped when the process exits."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:  # a closed engine (shut down, or its manager failed) is replaced
            _default = Engine()
        return _default
