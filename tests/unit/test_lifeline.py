"""Nothing outlives a run: a watched process ends with its parent, even one that died before the watch began."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorers.ddp.experiment import run_ddp
from explorers.ddp.options import DDPOptions
from explorers.ddp.processes import descendants
from explorers.engine import Engine, RunFailed
from explorers.lifeline import SUPERVISOR_ENV, alive
from explorers.reproducibility.experiment import ResumeOptions, resume_study
from tests.unit.test_layout import ROOT

PARENT = """
import os, subprocess, sys, time
extra = {k: v.format(parent=os.getpid()) for k, v in eval(sys.argv[2]).items()}
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={**os.environ, **extra})
print(child.pid, flush=True)
time.sleep(120)
"""
WATCHED_CHILD = """
import time
time.sleep({delay})  # a heavy import, e.g. torch on a loaded machine
from explorers.lifeline import exit_with_parent
exit_with_parent()
time.sleep(120)
"""

GROUP_LEADER = """
import os, subprocess, sys, time
os.setsid()  # a group of its own, as a Reproducibility run has
from explorers.lifeline import exit_with_parent
exit_with_parent(whole_group=True)
member = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # never looks at its parent
print("member", member.pid, flush=True)
time.sleep(120)
"""


def start_parent(
    delay: float, env: dict[str, str] | None = None, child: str = WATCHED_CHILD
) -> tuple[subprocess.Popen, int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, child.format(delay=delay), repr(env or {})],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
    )
    return parent, int(parent.stdout.readline())


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_watched_process_ends_within_a_moment_of_its_parents_sigkill():
    parent, child = start_parent(delay=0)
    time.sleep(1.0)  # the child is watching
    parent.kill()
    parent.wait()
    assert gone_within(child, 1.0)


def test_a_group_leader_whose_parent_is_killed_takes_its_whole_group_with_it():
    """Like a Reproducibility run and its DataLoader workers, which look for their parent only every 5 s. CI: the
    kernel's death signal killed the run alone, before its watch could end the group, and the workers lived on."""
    parent, leader = start_parent(delay=0, child=GROUP_LEADER)
    word, member = parent.stdout.readline().split()
    assert word == "member"
    parent.kill()
    parent.wait()
    assert gone_within(leader, 1.0)
    assert gone_within(int(member), 1.0)


def test_a_process_whose_launcher_died_during_its_imports_ends_at_once_through_its_supervisor():
    """Like a torchrun rank: its agent is killed while it imports torch, so its parent is already init."""
    parent, child = start_parent(delay=1.5, env={SUPERVISOR_ENV: "{parent}"})
    parent.kill()
    parent.wait()
    assert alive(child)  # still importing
    assert gone_within(child, 3.0)


@pytest.mark.slow
def test_killing_the_engine_worker_mid_torchrun_leaves_no_rank_and_no_temp_folder():
    pool = Engine(workers=1, timeout_s=120)
    try:
        pool.submit(pid_of_worker, 0).result()
        (folder,) = [Path(f) for f in pool.worker_folders()]
        run = pool.submit(run_ddp, DDPOptions(launcher="torchrun", world_size=2, steps=12, dataset_size=64))
        deadline = time.monotonic() + 90
        while not list(folder.rglob("progress-1")):  # rank 1 has started: it is importing torch
            assert time.monotonic() < deadline, "torchrun never started its ranks"
            time.sleep(0.2)
        ranks = [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/cmdline") if _is_rank(p, folder)]
        assert len(ranks) == 2
        os.kill(pool.busy_pids()[0], signal.SIGKILL)
        with pytest.raises(RunFailed):
            run.result()
        assert all(gone_within(pid, 3.0) for pid in ranks)
        # ddp-lab-*, torchelastic_* and pymp-* folders were all inside it; the engine removes it once its
        # replaced worker is reaped, outside the lock, a moment after the run failed
        deadline = time.monotonic() + 10
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not folder.exists(), sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    finally:
        pool.close()


@pytest.mark.slow
def test_killing_the_engine_worker_mid_resume_leaves_no_process_and_no_temp_folder():
    """A Reproducibility resume: the worker, its template and the resumed run (a fork of the template in a session
    of its own) are all below the worker; after the worker's SIGKILL none is left, nor the checkpoint's folder."""
    pool = Engine(workers=1, timeout_s=120)
    try:
        worker = pool.submit(pid_of_worker, 0).result()
        (folder,) = [Path(f) for f in pool.worker_folders()]
        run = pool.submit(resume_study, ResumeOptions(total_steps=100, checkpoint_at=1))
        deadline = time.monotonic() + 90
        # the straight run is done and the resumed one forked: the template and the resumed run are below
        while not list(folder.rglob("result-0.pt")) or len(descendants(worker)) < 2:
            assert time.monotonic() < deadline, "the resumed run never started"
            time.sleep(0.05)
        below = descendants(worker)
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(RunFailed):
            run.result()
        assert all(gone_within(pid, 3.0) for pid in below)
        deadline = time.monotonic() + 10
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not folder.exists(), sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    finally:
        pool.close()


def pid_of_worker(_: int, report=None) -> int:
    return os.getpid()


def _is_rank(cmdline: Path, folder: Path) -> bool:
    try:
        text = cmdline.read_bytes()
        return b"explorers.ddp.worker" in text and b"torch.distributed.run" not in text and bytes(folder) in text
    except OSError:
        return False
