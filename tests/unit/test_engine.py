"""The run engine: results, progress, cache, sharing, cancellation, time limits, crashes, process state."""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest
import torch

from explorers import engine, scheduling
from explorers.engine import Cancelled, Engine, RunFailed, RunTimedOut, WorkerCrashed
from explorers.profiler.experiment import ProfileOptions, profile

# --- experiments (module level, so a worker can import them by name) ---


def count_to(n: int, report=None) -> dict:
    """Reports every step with the numbers so far; returns who ran it and a token unique to this run."""
    for i in range(n):
        time.sleep(0.05)
        if report:
            report(i + 1, n, list(range(i + 1)))
    return {"pid": os.getpid(), "token": os.urandom(8).hex(), "n": n}


def sleep_without_reporting(seconds: float, report=None) -> int:
    time.sleep(seconds)  # never reports: a cancel can only take effect by killing the worker
    return os.getpid()


def fail(message: str, report=None) -> None:
    raise ValueError(message)


def change_process_state(seed: int, report=None) -> dict:
    before = {
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "draw": torch.rand(1).item(),
    }
    torch.set_num_threads(torch.get_num_threads() + 1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    return before


def pid(_: int, report=None) -> int:
    return os.getpid()


class _Slow(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        time.sleep(0.02)
        return torch.zeros(1)


def load_in_a_cycle(workers: int, report=None) -> None:
    """Iterates a DataLoader with worker processes, kept alive by a reference cycle, until cancelled."""
    loader = iter(torch.utils.data.DataLoader(_Slow(), num_workers=workers))
    cycle = {"loader": loader}
    cycle["self"] = cycle  # freed only by a garbage collection, as a profiler's records or a traceback can hold one
    for i, _ in enumerate(loader):
        report(i + 1, 10_000)


def load_with_a_worker(_: int, report=None) -> int:
    """A DataLoader with a worker process: it starts this process's forkserver if nothing has yet."""
    data = torch.utils.data.TensorDataset(torch.zeros(4, 1))
    return len(list(torch.utils.data.DataLoader(data, num_workers=1, multiprocessing_context="forkserver")))


def modules_loaded(names: tuple[str, ...], report=None) -> dict[str, bool]:
    return {name: name in sys.modules for name in names}


def ddp_launch_method(_: int, report=None) -> str:
    from explorers.ddp.processes import forkserver_method

    return forkserver_method()


# --- fixtures and helpers ---


@pytest.fixture(scope="module")
def pool():
    pool = Engine(workers=1)
    yield pool
    pool.close()


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def group_members(group_id: int) -> list[int]:
    """Live processes in a process group (the worker leads its own; DataLoader workers join it)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group_id and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def children(parent: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.add(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


# --- tests ---


def test_result_and_progress_with_partial_data_stream_back(pool):
    seen = []
    value = pool.submit(count_to, 6).result(on_poll=lambda p: seen.append((p.done, p.total, p.partial)))
    assert value["n"] == 6 and value["pid"] != os.getpid()
    reported = [s for s in seen if s[1]]
    assert reported, "no progress reached the caller"
    assert all(partial == list(range(done)) for done, total, partial in reported)
    assert [done for done, *_ in reported] == sorted(done for done, *_ in reported)


def test_results_are_cached_by_options_and_handed_out_as_copies(pool):
    first = pool.submit(count_to, 3).result()
    first["n"] = "changed by a caller"
    again = pool.submit(count_to, 3)
    assert again.done  # answered from the cache, no worker involved
    assert again.result()["token"] == first["token"] and again.result()["n"] == 3
    assert pool.cached(count_to, 3)["token"] == first["token"] and pool.cached(count_to, 999) is None


def test_an_edit_under_explorers_is_never_answered_with_an_old_result_or_by_a_worker_with_old_code(pool, monkeypatch):
    first = pool.submit(count_to, 4).result()
    monkeypatch.setattr(engine, "code_version", lambda: "edited")  # as if a file under explorers/ changed
    after = pool.submit(count_to, 4)
    assert not after.done, "answered from the cache of the old code"
    result = after.result()
    assert result["token"] != first["token"]
    assert result["pid"] != first["pid"], "the worker that imported the old code ran it"


def test_the_code_version_follows_the_files(tmp_path, monkeypatch):
    (tmp_path / "lab.py").write_text("A = 1\n")
    monkeypatch.setattr(engine, "EXPLORERS_DIR", tmp_path)
    monkeypatch.setattr(engine, "CODE_CHECK_S", 0.0)
    # its own record of what it saw: the real one must not keep tmp_path's hash, or a later test's worker,
    # started while that stale hash is current, is replaced as soon as the real hash is read again
    monkeypatch.setattr(engine, "_code_seen", {"at": -1.0, "stat": None, "hash": ""})
    before = engine.code_version()
    assert engine.code_version() == before
    (tmp_path / "lab.py").write_text("A = 22\n")
    assert engine.code_version() != before


def test_identical_requests_in_flight_share_one_run(pool):
    a, b = pool.submit(count_to, 7), pool.submit(count_to, 7)
    assert a.result()["token"] == b.result()["token"]


def test_leaving_cancels_a_run_at_its_next_report_and_the_worker_serves_on(pool):
    worker = pool.submit(pid, 1).result()
    handle = pool.submit(count_to, 400)  # about 20 s
    wait_until(lambda: handle.progress.done > 0)
    start = time.monotonic()
    handle.cancel()
    with pytest.raises(Cancelled):
        handle.result()
    assert time.monotonic() - start < 1.0
    assert pool.submit(pid, 2).result() == worker  # cancelled cooperatively: same worker process


def test_a_run_that_never_reports_is_stopped_by_killing_its_worker(pool):
    handle = pool.submit(sleep_without_reporting, 30.0)
    wait_until(lambda: pool.busy_pids())
    stuck = pool.busy_pids()[0]
    start = time.monotonic()
    handle.cancel()
    with pytest.raises(Cancelled):
        handle.result()
    assert time.monotonic() - start < engine.CANCEL_GRACE_S + 1.0
    assert pool.submit(pid, 3).result() != stuck  # a fresh worker answers


def test_a_cancelled_run_leaves_no_dataloader_worker_behind_even_when_a_cycle_holds_its_loader(pool):
    handle = pool.submit(load_in_a_cycle, 2)
    wait_until(lambda: handle.progress.done > 0, timeout_s=60)
    worker = pool.busy_pids()[0]
    loaders = set(group_members(worker)) - {worker} - children(worker)  # the worker's forkserver's children
    assert len(loaders) == 2
    handle.cancel()
    with pytest.raises(Cancelled):
        handle.result()
    wait_until(lambda: not loaders & set(group_members(worker)), timeout_s=1.0)
    assert pool.submit(pid, 4).result() == worker  # cancelled cooperatively: the same worker serves on


def test_one_caller_leaving_does_not_cancel_a_run_another_waits_for(pool):
    staying, leaving = pool.submit(count_to, 8), pool.submit(count_to, 8)
    wait_until(lambda: staying.progress.done > 0)
    leaving.cancel()
    assert staying.result()["n"] == 8


def test_an_experiment_error_is_a_plain_message_and_the_worker_survives(pool):
    worker = pool.submit(pid, 4).result()
    with pytest.raises(RunFailed, match="ValueError: width must be positive"):
        pool.submit(fail, "width must be positive").result()
    assert pool.submit(pid, 5).result() == worker


def test_a_worker_killed_from_outside_fails_its_run_and_is_replaced(pool):
    handle = pool.submit(count_to, 300)
    wait_until(lambda: handle.progress.done > 0)
    victim = pool.busy_pids()[0]
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(WorkerCrashed, match="killed by signal 9"):
        handle.result()
    assert pool.submit(pid, 6).result() != victim


def test_time_limit_stops_the_run_and_ends_the_worker_with_its_dataloader_processes(pool):
    pool.submit(profile, ProfileOptions(num_workers=1, warmup=0, active=1)).result()  # DataLoader start-up paid
    options = ProfileOptions(data_cost_ms=50, num_workers=1, warmup=5, active=10, seed=1)  # ~1.5 s of data work
    handle = pool.submit(profile, options, timeout_s=1.0)
    wait_until(lambda: handle.progress.done > 0, timeout_s=30)
    worker = pool.busy_pids()[0]
    assert len(group_members(worker)) >= 2  # the worker and at least its DataLoader worker
    with pytest.raises(RunTimedOut, match="1 s limit"):
        handle.result()
    wait_until(lambda: group_members(worker) == [], timeout_s=5)
    assert pool.submit(pid, 7).result() != worker


def test_process_wide_state_is_reset_between_runs_and_never_touches_the_caller(pool):
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    first = pool.submit(change_process_state, 1).result()
    second = pool.submit(change_process_state, 2).result()  # same worker: sees none of the first run's changes
    assert second == first
    assert first["threads"] == pool.threads_per_worker and not first["deterministic"]
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (threads, deterministic)


def test_a_more_urgent_run_is_started_first(pool):
    blocker = pool.submit(sleep_without_reporting, 0.5)
    wait_until(lambda: pool.busy_pids())
    later = pool.submit(count_to, 2, priority=1)
    urgent = pool.submit(count_to, 1, priority=0)
    finished = []
    threads = [
        threading.Thread(target=lambda h=h, name=name: (h.result(), finished.append(name)))
        for h, name in ((later, "later"), (urgent, "urgent"))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    blocker.result()
    assert finished == ["urgent", "later"]


def test_runs_marked_long_leave_a_worker_for_a_short_one():
    """Two sessions' long runs on a pool of two: one runs, one waits, and a third session's short run is served."""
    pool = Engine(workers=2)
    try:
        running = pool.submit(sleep_without_reporting, 30.0, session="a", long=True)
        wait_until(lambda: len(pool.busy_pids()) == 1, timeout_s=30)
        waiting = pool.submit(sleep_without_reporting, 30.01, session="b", long=True)
        short = pool.submit(count_to, 3, session="c")
        assert short.result()["n"] == 3  # served by the second worker
        assert not running.done and waiting._job.state == "queued"
        assert len(pool.busy_pids()) == 1  # the second worker is free again: the long run still waits
    finally:
        pool.close()


def test_a_run_goes_to_the_idle_worker_that_last_ran_its_experiment():
    """Warm for it (imports, a Reproducibility template, DDP's forkserver), even when another worker comes first."""
    pool = Engine(workers=2)
    try:
        wait_until(lambda: sum(w.ready for w in pool._workers) == 2, timeout_s=60)  # the blocker takes the first
        blocker = pool.submit(sleep_without_reporting, 1.5, session="a")
        wait_until(lambda: len(pool.busy_pids()) == 1, timeout_s=30)
        first = pool.submit(pid, 1, session="b").result()  # the only idle worker: the second
        blocker.result()
        assert pool.submit(pid, 2, session="b").result() == first
    finally:
        pool.close()


@pytest.mark.skipif(not Path("/proc/net/unix").exists(), reason="needs /proc/net/unix")
def test_the_sweep_removes_what_dead_servers_left_and_nothing_live(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead_server = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (tmp_path / f"{engine.FOLDER_PREFIX}{int(dead_server.stdout)}-abc" / "ddp-lab-1").mkdir(parents=True)
    (tmp_path / f"{engine.FOLDER_PREFIX}{os.getpid()}-live").mkdir()
    sockets = {}
    for name in ("pymp-live", "pymp-dead"):
        (tmp_path / name).mkdir()
        sockets[name] = socket.socket(socket.AF_UNIX)
        sockets[name].bind(str(tmp_path / name / "listener-x"))
    sockets["pymp-live"].listen()
    sockets["pymp-dead"].close()  # its file stays, bound by nobody: a killed server's forkserver
    (tmp_path / "pymp-other").mkdir()
    (tmp_path / "pymp-other" / "notes.txt").write_text("not a listener")
    try:
        engine.sweep_stale_folders()
    finally:
        sockets["pymp-live"].close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{engine.FOLDER_PREFIX}{os.getpid()}-live",
        "pymp-live",
        "pymp-other",
    ]


def test_pool_size_follows_cores_and_free_memory(monkeypatch):
    monkeypatch.delenv("EXPLORER_WORKERS", raising=False)
    assert engine.pool_size(cores=2, available_bytes=64 * 2**30) == 3  # a core each for long runs, a short lane
    assert scheduling.long_run_cap(engine.pool_size(cores=2, available_bytes=64 * 2**30)) == 2
    assert engine.pool_size(cores=16, available_bytes=64 * 2**30) == engine.MAX_WORKERS
    assert engine.pool_size(cores=8, available_bytes=3 * engine.WORKER_MEMORY_BYTES) == 3
    assert engine.pool_size(cores=8, available_bytes=2**20) == 2  # never one: a long run would hold it all
    monkeypatch.setenv("EXPLORER_WORKERS", "1")
    assert engine.pool_size(cores=8, available_bytes=64 * 2**30) == 2
    monkeypatch.setenv("EXPLORER_WORKERS", "3")
    assert engine.pool_size(cores=8, available_bytes=64 * 2**30) == 3


@pytest.mark.parametrize("asked", ["1", "2", "3", "", "0"])
def test_a_worker_stays_free_for_short_runs_at_any_pool_size(monkeypatch, asked):
    """The class-server probe: `make serve` gave each replica one worker, and long_run_cap(1) was 1."""
    monkeypatch.setenv("EXPLORER_WORKERS", asked)
    for cores, memory in ((1, 2**20), (2, 64 * 2**30), (16, 64 * 2**30)):
        size = engine.pool_size(cores=cores, available_bytes=memory)
        assert scheduling.long_run_cap(size) < size


def test_a_workers_first_run_finds_what_dynamos_first_compile_imports_already_loaded():
    """The forkserver compiled once (explorers/dynamo_warmup.py): a worker's first compile is not a cold one."""
    pool = Engine(workers=1)
    try:
        first_compile = ("torch._functorch.aot_autograd", "torch._functorch.partitioners", "torch._inductor.codecache")
        assert pool.submit(modules_loaded, first_compile).result() == dict.fromkeys(first_compile, True)
    finally:
        pool.close()
    # a plain `import torch._dynamo` does not load them: without the warm-up the test above fails
    script = f"import sys, torch, torch._dynamo; print([n in sys.modules for n in {first_compile!r}])"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "True" not in out


def test_closing_the_engine_ends_every_worker():
    pool = Engine(workers=2)
    handle = pool.submit(count_to, 200)
    wait_until(lambda: handle.progress.done > 0)
    workers = pool.worker_pids()
    pool.close()
    with pytest.raises(RunFailed, match="shut down"):
        handle.result()
    wait_until(lambda: all(group_members(w) == [] for w in workers), timeout_s=5)
    with pytest.raises(RunFailed):
        pool.submit(pid, 8)


def test_workers_never_run_the_servers_main_module(tmp_path, monkeypatch):
    """Streamlit installs the running page as __main__; a worker started meanwhile must not run that page."""
    marker = tmp_path / "page-ran"
    page = tmp_path / "page.py"
    page.write_text(f"open({str(marker)!r}, 'w').close()\n")
    fake_main = types.ModuleType("__main__")
    fake_main.__file__ = str(page)
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    pool = Engine(workers=1)
    try:
        assert pool.submit(pid, 9).result() != os.getpid()
    finally:
        pool.close()
    assert not marker.exists()


def test_a_malformed_message_costs_its_worker_not_the_engine(pool):
    handle = pool.submit(count_to, 200)
    wait_until(lambda: handle.progress.done > 0)
    with pool._changed:  # a worker that sends what the engine cannot read (a bug, a corrupted pipe)
        worker = next(w for w in pool._workers if w.job)
        real = worker.conn

        class Garbled:
            def poll(self):
                return True

            def recv(self):
                raise pickle.UnpicklingError("garbled")

            def __getattr__(self, name):
                return getattr(real, name)

        worker.conn = Garbled()
    pool._wake()
    with pytest.raises(RunFailed, match="could not read"):
        handle.result()
    assert pool.submit(pid, 5).result()  # the engine serves on with a fresh worker


def test_a_slow_reap_does_not_hold_the_lock_other_callers_need(pool, monkeypatch):
    handle = pool.submit(count_to, 200)
    wait_until(lambda: handle.progress.done > 0)
    released = threading.Event()
    original = engine._Worker.kill

    def slow_kill(self):
        released.wait(5)
        original(self)

    monkeypatch.setattr(engine._Worker, "kill", slow_kill)
    handle.cancel()
    time.sleep(engine.CANCEL_GRACE_S + 0.3)  # count_to reports often: cancelled cooperatively, no kill
    stuck = pool.submit(sleep_without_reporting, 30.0)
    wait_until(lambda: pool.busy_pids())
    stuck.cancel()  # never reports: its worker is killed (slowly) after the grace
    time.sleep(engine.CANCEL_GRACE_S + 0.3)
    started = time.monotonic()
    assert pool.cached(pid, 12345) is None  # takes the engine's lock
    assert time.monotonic() - started < 0.5
    released.set()


@pytest.fixture
def short_tmp():
    """A temp directory with a short path: a socket's path must fit 108 bytes, and pytest's tmp_path is long."""
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="t-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_killed_servers_multiprocessing_folder_lives_in_the_engines_own_and_the_next_start_removes_it(short_tmp):
    """Third audit: a server SIGKILLed mid-run left multiprocessing's pymp-* folder in the temp directory (its
    clean-up runs in the killed process). Now it lives inside the engine's folder, which the next start sweeps."""
    tmp_path = short_tmp
    script = (
        "import time\n"
        "from explorers import engine\n"
        "from explorers.gradients.experiment import GradientsOptions, scenario_run\n"
        "e = engine.Engine(workers=1)\n"
        "e.submit(scenario_run, GradientsOptions()).result()\n"
        "print('ran', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).parents[2])}
    server = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ran"
        server.kill()
        server.wait(10)
    finally:
        server.kill()
    deadline = time.monotonic() + 10
    while len(list(tmp_path.glob("explorer-worker-*"))) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)  # the worker removes its own folder when it sees the server die
    assert not list(tmp_path.glob("pymp-*"))
    (left,) = tmp_path.glob("explorer-worker-*")
    assert left.name.startswith(f"explorer-worker-{server.pid}-engine-") and list(left.glob("pymp-*"))
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp_path)
    try:
        engine.sweep_stale_folders()
    finally:
        tempfile.tempdir = saved
    assert not list(tmp_path.glob("explorer-worker-*"))


def test_a_forkserver_a_dataloader_started_in_a_worker_serves_ddp_ranks_warm():
    """The Profiler's loader workers started it with torch alone: each DDP notch then took 2.8 s, not 0.9 s."""
    from explorers.ddp import results

    pool = Engine(workers=1)
    try:
        assert pool.run(load_with_a_worker, 1) == 4
        assert pool.run(ddp_launch_method, 1) == results.FORKSERVER_WARM
    finally:
        pool.close()


def test_a_remembered_result_is_handed_out_without_a_run(pool):
    pool.forget_results()  # an earlier test may have run count_to(7)
    pool.remember(count_to, 7, {"pid": 0, "token": "from a search", "n": 7})
    assert pool.run(count_to, 7)["token"] == "from a search"
    assert pool.cached(count_to, 7)["token"] == "from a search"
    pool.remember(count_to, 7, {"token": "later"})  # the first answer stays
    assert pool.run(count_to, 7)["token"] == "from a search"


KILLED_SERVER = """
import time
from explorers import engine
from explorers.compiled import experiment as lab
e = engine.default_engine()
run = e.submit(lab.measure, lab.PayoffOptions(width=48, seed=int(time.time()) % 9000), long=True, timeout_s=600)
while run.progress.total == 0:
    time.sleep(0.05)
print(e.busy_pids()[0], flush=True)
time.sleep(600)
"""


def test_a_sigkilled_server_takes_its_workers_compile_with_it():
    """The class-server probe: 10 s after a SIGKILL of the server, its worker, g++ and cc1plus still compiled: the
    server's forkserver and its workers kept each other alive."""
    temp = Path(tempfile.mkdtemp(prefix="killed-"))
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(__file__).parents[2])}
    server = subprocess.Popen([sys.executable, "-c", KILLED_SERVER], env=env, stdout=subprocess.PIPE, text=True)
    try:
        worker = int(server.stdout.readline())
        deadline = time.monotonic() + 60
        while not any(_name(pid) in ("g++", "cc1plus") for pid in _group(worker)) and time.monotonic() < deadline:
            time.sleep(0.1)  # until the compile runs its C++ compiler
        assert any(_name(pid) in ("g++", "cc1plus") for pid in _group(worker))
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)
        deadline = time.monotonic() + 5
        while _group(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group(worker), "the worker's group (its compiler with it) outlived the server"
    finally:
        if server.poll() is None:
            server.kill()
        shutil.rmtree(temp, ignore_errors=True)


def test_inductors_precompiled_headers_go_in_the_folder_given_for_the_run_and_back_after():
    """The probe: they were written under the server's temp folder, outside the run's fresh cache, and stayed."""
    from torch._inductor import codecache

    from explorers.compiled.timing import headers_in

    before = codecache._HEADER_DIR
    with tempfile.TemporaryDirectory() as folder, headers_in(folder) as headers:
        assert codecache._HEADER_DIR == headers == os.path.join(folder, "precompiled_headers")
        assert codecache._HEADER_LOCK_DIR.startswith(headers)
    assert before == codecache._HEADER_DIR


def _group(pgid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
