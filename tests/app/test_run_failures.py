"""What a page shows when its run fails: a killed worker, a run past its time limit. Never a traceback."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from explorers.engine import default_engine
from tests.app.conftest import open_page

PAGE = "pages/3_Profiler.py"
LONG_RUN = {"data_cost_ms": "50", "warmup": "5", "active": "10"}  # about 1.5 s of data work


def kill_the_busy_worker_once_it_runs(timeout_s: float = 60) -> threading.Thread:
    def kill() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            busy = default_engine().busy_pids()
            if busy:
                time.sleep(0.3)  # mid-run, not at its start
                os.kill(busy[0], signal.SIGKILL)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    return killer


def test_a_worker_killed_mid_run_gives_a_message_and_the_next_run_works():
    killer = kill_the_busy_worker_once_it_runs()
    at = open_page(PAGE, {**LONG_RUN, "seed": "11"})
    killer.join()
    assert not at.exception
    assert any("stopped unexpectedly" in e.value and "killed by signal 9" in e.value for e in at.error)
    at.button(key="again-Profiling").click().run()
    assert not at.exception and not at.error
    assert any(m.value.startswith("### Verdict") for m in at.markdown)


@pytest.fixture()
def one_second_limit():
    engine = default_engine()
    before, engine.timeout_s = engine.timeout_s, 1.0
    yield
    engine.timeout_s = before


def test_a_run_past_its_time_limit_reports_the_limit(one_second_limit):
    at = open_page(PAGE, {**LONG_RUN, "seed": "12"})
    assert not at.exception
    assert any("longer than its 2.5 s limit" in e.value for e in at.error)  # the Profiler allows 2.5x the usual
