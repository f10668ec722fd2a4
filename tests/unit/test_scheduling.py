"""The engine's turn-taking between sessions, on its own and in a real engine with worker processes."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from explorers import scheduling
from explorers.engine import Engine, RunFailed
from tests.unit.test_engine import count_to, pid, sleep_without_reporting, wait_until


@dataclass
class Job:
    id: int
    session: str
    priority: int = 0
    long: bool = False


def test_sessions_take_turns_whatever_their_priorities_and_ages():
    queue = [Job(1, "heavy"), Job(2, "heavy"), Job(3, "heavy", priority=1), Job(4, "light"), Job(5, "heavy")]
    order = [job.id for job in scheduling.service_order(queue, {"heavy": 7})]
    assert order == [4, 1, 2, 5, 3]  # the light session was never served; then heavy's, urgent first


def test_the_session_served_longest_ago_goes_first():
    queue = [Job(1, "a"), Job(2, "b"), Job(3, "c")]
    assert scheduling.pick(queue, {"a": 5, "b": 2, "c": 9}, 0, 2).session == "b"


def test_long_runs_leave_a_worker_for_short_ones():
    queue = [Job(1, "a", long=True), Job(2, "b", long=True)]
    assert scheduling.pick(queue, {}, long_running=1, pool_size=2) is None
    assert scheduling.pick([*queue, Job(3, "c")], {}, long_running=1, pool_size=2).id == 3
    assert scheduling.pick(queue, {}, long_running=0, pool_size=2).id == 1
    assert scheduling.pick(queue, {}, long_running=0, pool_size=1).id == 1  # one worker: long runs still run


@pytest.fixture()
def two_workers():
    pool = Engine(workers=2, timeout_s=30)
    assert pool.submit(pid, 1).result() and pool.submit(pid, 2).result()
    yield pool
    pool.close()


def test_a_light_run_starts_at_once_while_six_sessions_queue_long_runs(two_workers):
    long_runs = [
        two_workers.submit(sleep_without_reporting, 3.0 + i / 100, timeout_s=60, session=f"heavy-{i % 6}")
        for i in range(12)
    ]
    wait_until(lambda: len(two_workers.busy_pids()) == 1)
    started = time.monotonic()
    assert two_workers.submit(count_to, 3, session="light").result()["n"] == 3
    assert time.monotonic() - started < 2.0  # 12 long runs of 3 s wait; the light one did not
    for run in long_runs:
        run.cancel()


def test_a_waiting_run_is_told_how_many_runs_are_ahead_of_it_in_turn_order(two_workers):
    busy = [two_workers.submit(sleep_without_reporting, 5.0 + i / 100, session="x") for i in range(2)]
    wait_until(lambda: len(two_workers.busy_pids()) == 2)
    mine = [two_workers.submit(count_to, 2 + i, session="a") for i in range(3)]
    theirs = two_workers.submit(count_to, 9, session="b")
    time.sleep(0.3)
    seen = []

    def look(progress):
        seen.append(progress.queued_behind)
        raise StopIteration  # one look is enough

    with pytest.raises(StopIteration):
        theirs.result(on_poll=look)
    assert seen == [1]  # b never served: behind a's first run only, not all three
    for run in [*busy, *mine, theirs]:
        run.cancel()


def test_a_session_may_not_queue_more_than_its_share(two_workers):
    runs = []
    with pytest.raises(RunFailed, match="runs waiting"):
        for i in range(100):
            runs.append(two_workers.submit(sleep_without_reporting, 10 + i / 1000, session="greedy"))
    assert scheduling.MAX_QUEUED_PER_SESSION <= len(runs) <= scheduling.MAX_QUEUED_PER_SESSION + 2  # 2 may run
    assert two_workers.submit(count_to, 1, session="other").result()["n"] == 1
    for run in runs:
        run.cancel()
