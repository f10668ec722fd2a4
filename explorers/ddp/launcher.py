"""Start the ranks, watch them, and leave nothing behind: the lab's stand-in for torchrun's agent.

"processes" does what torchrun's agent does on one machine. It hosts the rendezvous store
itself (a TCPStore on 127.0.0.1 bound to port 0: the operating system picks a free port, so
two runs at once never collide), then starts one process per rank (`processes`) with the
variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_USE_AGENT_STORE) and runs the worker script's `main` in it. "torchrun" runs the
same worker script under `python -m torch.distributed.run --standalone`, which picks its own
free port and starts fresh interpreters: the cold path, as on a cluster.

Every run ends the same way, whether it finished, failed, hit its hard time limit or was
cancelled (an exception out of `report`): every process it started, and their children,
is killed and reaped, the store (and with it the port) is closed, and the scratch
directory removed. The ranks also end themselves if their parent disappears.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import explorers.ddp.options as lab_options
import explorers.ddp.results as results
from explorers import forkserver
from explorers.ddp.processes import (
    Command,
    Rank,
    do_nothing,
    forkserver_method,
    forkserver_running,
    rank_main,
    signal_name,
)
from explorers.ddp.settings import INIT_TIMEOUT_S, LAUNCHED_AT_ENV, RUN_TIMEOUT_S
from explorers.engine import WORKER_NAME
from explorers.lifeline import SUPERVISOR_ENV, kill_me_with_my_parent

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"  # not "localhost": it may resolve to IPv6, where gloo may not listen
POLL_S = 0.05
LOG_TAIL_CHARS = 600
# What a launcher sets for its ranks: never inherited from the environment this process runs in.
DISTRIBUTED_VARIABLES = ("TORCHELASTIC_", "MASTER_", "RANK", "LOCAL_", "WORLD_SIZE", "GROUP_", "ROLE_")


@dataclass
class Launch:
    directory: Path
    results_path: Path
    started_at: float
    method: str  # how the ranks started, for the lesson: a warm forkserver, a new one, or torchrun
    processes: list = field(default_factory=list)
    store: object | None = None  # the rendezvous store this process hosts ("processes")
    port: int | None = None
    killed: set = field(default_factory=set)  # indices of the processes this launcher had to kill


def planned_micro_steps(options: lab_options.DDPOptions, rank: int) -> int:
    """How many micro-batches `rank` will train on (for the progress bar; the run records the truth)."""
    n, world = options.dataset_size, options.world_size
    if options.uses_sampler:
        samples = n // world if options.drop_last else math.ceil(n / world)
    else:
        samples = len(range(rank, n, world))
    batches = math.ceil(samples / options.per_rank_batch)
    total, steps = 0, 0
    for _ in range(options.epochs):
        for group in range(math.ceil(batches / options.accumulation)):
            if steps >= options.steps:
                return total
            total += min(options.accumulation, batches - group * options.accumulation)
            steps += 1
    return total


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(DISTRIBUTED_VARIABLES)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"  # one thread per rank
    env[SUPERVISOR_ENV] = str(os.getpid())  # ranks end themselves when this process (the engine's worker) is gone
    return env


def start(options: lab_options.DDPOptions, report: Callable | None = None) -> Launch:
    """The run's processes, started; `report(0, total)` is called while a cold forkserver imports, and may raise."""
    import torch.distributed as dist

    directory = Path(tempfile.mkdtemp(prefix="ddp-lab-"))
    results_path = directory / "results.json"
    argv = [*lab_options.worker_flags(options), "--out", str(results_path), "--rank-dir", str(directory)]
    started_at = time.time()
    env = environment() | {LAUNCHED_AT_ENV: repr(started_at)}
    method = results.TORCHRUN if options.launcher == "torchrun" else forkserver_method()
    launch = Launch(directory, results_path, started_at, method)
    try:
        if options.launcher == "torchrun":
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            command += ["--nproc-per-node", str(options.world_size), "-m", "explorers.ddp.worker", *argv]
            with open(directory / "log-torchrun", "wb") as log:
                popen = subprocess.Popen(
                    command,
                    env=env,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=kill_me_with_my_parent,  # torchrun's agent dies with this process, its ranks with it
                )
            launch.processes.append(Command(popen))
            return launch
        launch.store = dist.TCPStore(
            HOST,
            0,
            options.world_size,
            is_master=True,
            timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S),
            wait_for_workers=False,
        )
        launch.port = launch.store.port
        env |= {
            "MASTER_ADDR": HOST,
            "MASTER_PORT": str(launch.port),
            "WORLD_SIZE": str(options.world_size),
            "LOCAL_WORLD_SIZE": str(options.world_size),
            "GROUP_RANK": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "True",  # ranks join this store as clients, as under torchrun
        }
        context = multiprocessing.get_context("forkserver")
        if not forkserver_running():  # keep what others asked the shared forkserver to preload, add DDP's
            earlier = getattr(multiprocessing.forkserver._forkserver, "_preload_modules", None) or []
            context.set_forkserver_preload(list(dict.fromkeys([*earlier, *forkserver.PRELOAD])))
            if report is not None:
                _start_forkserver_reporting(context, lambda: report(0, progress(launch, options)[1]))
        for rank in range(options.world_size):
            rank_env = env | {"RANK": str(rank), "LOCAL_RANK": str(rank)}
            process = context.Process(
                target=rank_main,
                args=(rank_env, argv, str(directory / f"log-{rank}")),
                # Named like the run engine's workers: explorers.engine then keeps multiprocessing from
                # re-importing the launching script (a notebook, a Streamlit page, pytest) in every rank.
                name=f"{WORKER_NAME}-ddp-rank-{rank}",
                daemon=False,
            )
            process.start()
            launch.processes.append(Rank(process))
        return launch
    except BaseException:
        stop(launch)
        raise


def _start_forkserver_reporting(context, report: Callable[[], None]) -> None:
    """Start the forkserver (its first start imports torch and DDP's modules: seconds) from a thread, with a
    process that does nothing, calling `report()` meanwhile: a cancel during the imports is then an exception
    at the next report (polite: cleanup runs) instead of a kill. The forkserver goes on starting for the next run."""
    starter = threading.Thread(target=_start_nothing, args=(context,), daemon=True, name="forkserver-start")
    starter.start()
    while starter.is_alive():
        report()
        starter.join(POLL_S)


def _start_nothing(context) -> None:
    process = context.Process(target=do_nothing, name=f"{WORKER_NAME}-ddp-forkserver-start", daemon=True)
    process.start()
    process.join()


def progress(launch: Launch, options: lab_options.DDPOptions) -> tuple[int, int]:
    """(done, total): each rank counts ready, initialised, then each micro-batch it trained on."""
    done = 0
    total = sum(2 + planned_micro_steps(options, r) for r in range(options.world_size))
    for rank in range(options.world_size):
        with contextlib.suppress(OSError, ValueError):
            phase, count = (launch.directory / f"progress-{rank}").read_text().split()
            done += {"starting": 0, "init": 1}.get(phase, 2) + int(count)
    return min(done, total), total


def wait(launch: Launch, options: lab_options.DDPOptions, report: Callable | None, timeout_s: float) -> bool:
    """Poll until every process exited (True) or the hard limit passed (False); `report` may raise to cancel."""
    deadline = time.monotonic() + timeout_s
    sentinels = [p.sentinel for p in launch.processes if p.sentinel is not None]
    while time.monotonic() < deadline:
        if not any(p.alive() for p in launch.processes):
            return True
        if report is not None:
            report(*progress(launch, options))
        if sentinels:
            multiprocessing.connection.wait(sentinels, timeout=POLL_S)
        else:
            time.sleep(POLL_S)
    return not any(p.alive() for p in launch.processes)


def kill(launch: Launch) -> None:
    """SIGKILL every process of the run still alive (with its children), then reap them."""
    for index, process in enumerate(launch.processes):
        if process.alive():
            launch.killed.add(index)
            process.kill()
    for process in launch.processes:
        process.reap()


def stop(launch: Launch) -> None:
    """Kill and reap every process of the run, close the store (freeing the port), remove the scratch files."""
    kill(launch)
    launch.store = None  # the TCPStore's server closes its socket when the last reference goes
    shutil.rmtree(launch.directory, ignore_errors=True)


def collect(launch: Launch, options: lab_options.DDPOptions, finished_in_time: bool) -> dict:
    """The results file rank 0 wrote; else the ranks' own records, put together in the same format."""
    launch_info = {"started_at": launch.started_at, "ended_at": time.time(), "port": launch.port}
    launch_info["method"] = launch.method
    if launch.results_path.exists() and finished_in_time:
        raw = json.loads(launch.results_path.read_text())
        raw["launch"] = launch_info
        return raw
    records = []
    for rank in range(options.world_size):
        try:
            records.append(json.loads((launch.directory / f"rank-{rank}.json").read_text()))
        except (OSError, ValueError):
            records.append(_silent_rank(launch, rank, options))
    for rank, record in enumerate(records):
        if record["outcome"] == "running":  # a partial record: it was killed, or died without writing its ending
            ending = _silent_rank(launch, rank, options)
            record |= {key: ending[key] for key in ("outcome", "error", "phase", "recorded")}
    outcome, note = ("finished" if all(r["outcome"] == "finished" for r in records) else "failed"), None
    if not finished_in_time:
        outcome, note = "timed_out", f"stopped at its {RUN_TIMEOUT_S:g} s limit: every rank process was killed"
    return results.assemble(options, records, None, outcome, launch_info, note)


def _silent_rank(launch: Launch, rank: int, options: lab_options.DDPOptions) -> dict:
    """A rank that left no record: killed by the launcher, or it died by itself (gloo aborts on a bad message)."""
    own = options.launcher == "processes" and rank < len(launch.processes)
    log = launch.directory / (f"log-{rank}" if own else "log-torchrun")
    tail, phase = "", "starting"
    with contextlib.suppress(OSError):
        tail = " ".join(log.read_text(errors="replace")[-LOG_TAIL_CHARS:].split())
    with contextlib.suppress(OSError, ValueError):
        phase = (launch.directory / f"progress-{rank}").read_text().split()[0]  # where it was when it stopped
    outcome, how = "killed", "killed by the launcher"
    if own and rank not in launch.killed:
        code = launch.processes[rank].exitcode
        outcome = "failed"
        how = f"died by signal {-code} ({signal_name(-code)})" if code and code < 0 else f"exited with code {code}"
    error = f"left no complete record: {how}" + (f"; its output ended: {tail}" if tail else "")
    return results.rank_record(
        rank,
        local_rank=rank,
        node=0,
        pid=launch.processes[rank].pid if own else 0,
        launched_at=launch.started_at,
        outcome=outcome,
        phase=phase if phase in results.PHASES else "starting",
        error=error[: results.MAX_ERROR_CHARS],
        recorded=False,  # what it trained on and which collectives it made are unknown
    )


def run(options: lab_options.DDPOptions, report: Callable | None = None, timeout_s: float = RUN_TIMEOUT_S) -> dict:
    """Launch, wait, collect, and clean up whatever happens; the raw results (the file's format)."""
    launch = start(options, report)
    try:
        finished_in_time = wait(launch, options, report, timeout_s)
        kill(launch)  # nothing is left running, and no rank is still writing, when the records are read
        return collect(launch, options, finished_in_time)
    finally:
        stop(launch)
