"""ui.runs: a page's runs on the engine; the main figure's run first when the page draws results as they arrive."""

from __future__ import annotations

import time

import pytest

from explorers.engine import Engine
from ui import runs


def timed(name: str, report=None) -> tuple[str, float, float]:
    """Its name and when it started and ended (CLOCK_MONOTONIC: one clock for every process of this machine)."""
    start = time.monotonic()
    time.sleep(0.4)
    return name, start, time.monotonic()


@pytest.fixture(scope="module")
def pool():
    pool = Engine(workers=2)
    for _ in range(20):  # until both workers have started (on a loaded machine the second can take seconds)
        one, two = pool.submit(timed, "warm one"), pool.submit(timed, "warm two")
        (_, start, end), (_, other_start, _) = one.result(), two.result()
        pool.forget_results()
        if other_start < end and start < other_start + 0.4:
            break
    yield pool
    pool.close()


@pytest.fixture()
def engine(pool, monkeypatch):
    pool.forget_results()  # every test starts its runs afresh
    monkeypatch.setattr(runs, "default_engine", lambda: pool)
    return pool


def test_a_page_that_draws_each_result_gets_its_first_alone_and_the_rest_once_it_is_in(engine):
    drawn = []
    first, second, third = runs.run_all(
        [(timed, "main"), (timed, "supporting"), (timed, "other")],
        label="test",
        on_result=lambda index, value, settled: drawn.append((index, value[0])),
    )
    assert [name for _, name in drawn] == ["main", "supporting", "other"]
    assert second[1] >= first[2] and third[1] >= first[2]  # nothing else ran beside the main figure's run
    assert second[1] < third[2] and third[1] < second[2]  # the rest share the workers, as before


def test_the_first_result_is_drawn_before_its_siblings_take_the_cores(engine):
    drawn_at = {}

    def draw(index, value, settled):
        if index == 0:
            time.sleep(0.2)  # a figure being laid out and sent, beside a browser drawing it
        drawn_at[index] = time.monotonic()

    _, second, third = runs.run_all([(timed, "main"), (timed, "one"), (timed, "two")], label="test", on_result=draw)
    assert second[1] >= drawn_at[0] and third[1] >= drawn_at[0]


def test_a_page_that_waits_for_every_result_starts_them_all_at_once(engine):
    first, second = runs.run_all([(timed, "one"), (timed, "two")], label="test")
    assert second[1] < first[2]  # two workers: they overlapped


def test_a_cached_first_result_lets_the_rest_start_at_once(engine):
    runs.run_all([(timed, "cached")], label="test")
    started = time.monotonic()
    _, later = runs.run_all([(timed, "cached"), (timed, "later")], label="test", on_result=lambda *_: None)
    assert later[1] - started < 0.3  # no run of 0.4 s stood before it


def reporting(seconds: float, report=None) -> float:
    """Reports progress every 20 ms, as a training loop reports its steps."""
    steps = round(seconds / 0.02)
    for step in range(steps):
        time.sleep(0.02)
        report(step + 1, steps)
    return seconds


def test_a_long_run_redraws_its_progress_bar_a_few_times_a_second_not_at_every_poll(engine, monkeypatch):
    """Each redraw makes the browser re-render the page, on the cores the run needs."""
    redraws = []
    monkeypatch.setattr(runs, "_show", lambda bar, label, progress, elapsed: redraws.append(time.monotonic()))
    started = time.monotonic()
    runs.run(reporting, 1.2, label="test")
    took = time.monotonic() - started
    assert 2 <= len(redraws) <= took / runs.REDRAW_S + 1  # polls come every 0.1 s: 12 of them
    assert redraws[0] - started < 2 * runs.POLL_S  # the bar still shows at once
    assert all(b - a >= runs.REDRAW_S for a, b in zip(redraws, redraws[1:], strict=False))


def test_runs_started_early_compute_while_the_page_draws_and_are_waited_for_later(engine):
    started = runs.start([(timed, "early one"), (timed, "early two")])
    time.sleep(0.3)  # the page draws what it already has
    waited_from = time.monotonic()
    (_, first_start, first_end), (_, second_start, _) = started.results(label="test")
    assert first_start < waited_from and second_start < waited_from
    assert time.monotonic() - waited_from < 0.35  # only what was left of the 0.4 s runs


def test_runs_started_by_a_page_that_stopped_before_waiting_are_left_and_cancelled(engine):
    started = runs.start([(reporting, 30.0)])
    handle = started._handles[0]
    wait = time.monotonic() + 10
    while not handle.progress.total and time.monotonic() < wait:  # running, and reporting
        time.sleep(0.05)
    del started  # the script stopped: its module, and this object, are dropped
    wait = time.monotonic() + 10
    while not handle.done and time.monotonic() < wait:
        time.sleep(0.05)
    assert handle._job.state == "cancelled"  # a 30 s run, ended at its next report


class PageLeft(Exception):  # noqa: N818  (what Streamlit raises from the next st call when the page is left)
    pass


def _leave_at_the_second_redraw(monkeypatch) -> None:
    calls = []

    def show(bar, label, progress, elapsed):
        calls.append(elapsed)
        if len(calls) == 2:
            raise PageLeft

    monkeypatch.setattr(runs, "_show", show)


def test_a_kept_run_goes_on_when_the_page_is_left_and_its_result_is_cached_for_the_return(engine, monkeypatch):
    """The newcomer's finding: leaving the Compile lab threw a minute of compiling away without a word."""
    _leave_at_the_second_redraw(monkeypatch)
    with pytest.raises(PageLeft):
        runs.run(reporting, 1.5, label="test", keep=True)
    assert runs.kept(reporting, 1.5)  # still running, held by this session
    wait = time.monotonic() + 15
    while engine.cached(reporting, 1.5) is None and time.monotonic() < wait:
        time.sleep(0.1)
    assert engine.cached(reporting, 1.5) is not None and not runs.kept(reporting, 1.5)


def test_a_kept_run_stops_when_cancelled_and_a_plain_one_when_left(engine, monkeypatch):
    _leave_at_the_second_redraw(monkeypatch)
    with pytest.raises(PageLeft):
        runs.run(reporting, 20.0, label="test", keep=True)
    handle = runs.st.session_state[runs.KEPT_KEY][runs.experiment_key(reporting, 20.0)][0]
    assert runs.cancel_kept(reporting, 20.0) and not runs.cancel_kept(reporting, 20.0)
    wait = time.monotonic() + 10
    while not handle.done and time.monotonic() < wait:
        time.sleep(0.05)
    assert handle._job.state == "cancelled"
    _leave_at_the_second_redraw(monkeypatch)
    with pytest.raises(PageLeft):
        runs.run(reporting, 21.0, label="test")  # not kept: left, and cancelled
    assert not runs.kept(reporting, 21.0)


def test_a_run_past_two_seconds_shows_its_clock_so_a_long_step_still_moves():
    shown = []

    class Bar:
        def progress(self, value, text):
            shown.append(text)

    runs._show(Bar(), "Compiling", runs.Progress(0, 21), 34.2)
    runs._show(Bar(), "Compiling", runs.Progress(0, 21), 0.5)
    assert shown == ["Compiling: 0 of 21 · 34 s", "Compiling: 0 of 21"]
