"""Pages run their experiments on the shared run engine through here.

`run` answers from the engine's cache at once when it can; otherwise it shows a progress
bar while a worker process runs the experiment. Streamlit stops a script by raising out
of its next `st` call (a changed control, another page, Streamlit's Stop, a closed tab),
and the progress bar makes such a call at every redraw (`REDRAW_S`), so the run is left within
a quarter of a second: the engine cancels it unless another session is waiting for the same
result. A failed run (an error, its time limit, a killed worker) shows a plain message, never
a traceback.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorers.engine import Cancelled, Progress, Run, RunFailed, default_engine, experiment_key

POLL_S = 0.1
# The bar is redrawn at most this often. Each redraw is a delta the browser answers by re-rendering the
# page: on the 2-core machine a Profiler run's ten redraws a second took about 0.8 s of a core from the
# 2.9 s run itself (2.3 s at this pace). A redraw is also when a rerun or a closed tab is noticed.
REDRAW_S = 0.25


def start_engine() -> None:
    """Start the workers early (the home page does), so the first lab a user opens finds them warm."""
    default_engine()


SHOW_CLOCK_AFTER_S = 2.0  # a run this old shows its seconds: a step that takes a minute (a compile) still moves


def _show(bar, label: str, progress: Progress, elapsed_s: float = 0.0) -> None:
    clock = f" · {elapsed_s:.0f} s" if elapsed_s >= SHOW_CLOCK_AFTER_S else ""
    if progress.queued_behind:
        ahead = progress.queued_behind
        bar.progress(0.0, text=f"{label}: waiting for a free worker, {ahead} run{'s' * (ahead > 1)} ahead of yours")
    elif progress.total:
        bar.progress(progress.fraction, text=f"{label}: {progress.done} of {progress.total}{clock}")
    else:
        bar.progress(0.0, text=f"{label}: starting…{clock}")


def _failed(label: str, error: Exception) -> None:
    reason = "it was cancelled" if isinstance(error, Cancelled) else str(error)
    st.error(f"**{label} did not finish:** {reason}", icon=":material/error:")
    st.button("Run again", key=f"again-{label}", icon=":material/refresh:")
    st.stop()


def _session() -> str:
    """This browser session's id: the engine takes turns between sessions."""
    context = get_script_run_ctx()
    return context.session_id if context else ""


def longer_limit(factor: float) -> float:
    """A time limit `factor` times the engine's usual one, for a lab whose largest runs are known to be long."""
    return factor * default_engine().timeout_s


def run(
    fn: Callable,
    options: Any,
    *,
    label: str,
    timeout_s: float | None = None,
    priority: int = 0,
    long: bool = False,
    keep: bool = False,
) -> Any:
    """`fn(options)` on the engine, with progress; a failure shows its message and stops the page.

    `keep`: a run that takes minutes goes on when the page is left, and its result is cached for the return
    (`kept` finds it still running); only `cancel_kept` stops it."""
    started = Started([(fn, options)], timeout_s=timeout_s, priority=priority, long=long, keep=keep)
    return started.results(label=label)[0]


KEPT_KEY = "_kept_runs"  # this session's runs that go on when the page is left: experiment key -> (Run, started at)


def kept(fn: Callable, options: Any) -> bool:
    """Whether this session started a kept run of `fn(options)` that is still running."""
    held = st.session_state.get(KEPT_KEY, {}).get(experiment_key(fn, options))
    return held is not None and not held[0].done


def cancel_kept(fn: Callable, options: Any) -> bool:
    """Stop this session's kept run of `fn(options)` (it goes on if another session waits for it too)."""
    held = st.session_state.get(KEPT_KEY, {}).pop(experiment_key(fn, options), None)
    if held is None or held[0].done:
        return False
    held[0].cancel()
    return True


def run_all(
    requests: Sequence[tuple[Callable, Any]],
    *,
    label: str,
    timeout_s: float | None = None,
    priority: int = 0,
    long: bool = False,
    on_result: Callable[[int, Any, bool], None] | None = None,
) -> list[Any]:
    """Several runs at once (the workers share them out); `on_result(i, value, settled)` as each arrives, in order.

    `settled` is True when no further result is ready yet (or this is the last): the moment to
    redraw a figure that grows with the results, rather than once per cached result.

    `requests` are (experiment, options) pairs. The first is submitted at `priority`, the
    rest after it, so a page's main figure is computed before its supporting ones, in
    every session. With `on_result` (a page that draws each result as it arrives) the rest
    are submitted only once the first is in and drawn: on a 2-core machine its siblings would
    share the cores with it, with the script drawing it and with the browser (a Memory notch's
    first point took 300 ms beside its sweep, 190 ms alone). `long` marks runs that take
    seconds (sweeps, fresh processes): they hold only part of the pool, so another session's
    quick run finds a free worker.
    """
    started = Started(requests, timeout_s=timeout_s, priority=priority, long=long, first_alone=on_result is not None)
    return started.results(label=label, on_result=on_result)


def start(
    requests: Sequence[tuple[Callable, Any]], *, timeout_s: float | None = None, priority: int = 0, long: bool = False
) -> Started:
    """Submit runs now and wait for them later with `.results(label=...)`: they compute while the page draws
    what it already has (run_all's rules otherwise). A page that stops before it asks leaves them."""
    return Started(requests, timeout_s=timeout_s, priority=priority, long=long)


class Started:
    """Runs on the engine, submitted in order; `results` waits for them with a progress bar."""

    def __init__(
        self,
        requests: Sequence[tuple[Callable, Any]],
        *,
        timeout_s: float | None,
        priority: int,
        long: bool,
        first_alone: bool = False,
        keep: bool = False,
    ) -> None:
        self._requests, self._handles, self._keep = list(requests), [], keep
        held = st.session_state.get(KEPT_KEY, {}).get(experiment_key(*self._requests[0])) if keep else None
        self._started_at = held[1] if held and not held[0].done else time.monotonic()  # a return: the first start
        self._submit = dict(timeout_s=timeout_s, session=_session(), long=long)
        self._priority = priority
        # A script stopped between `start` and `results` (a control changed meanwhile) drops this object with
        # its module: its runs are left then, and cancelled unless another session waits for them.
        self._left = weakref.finalize(self, _leave, self._handles)
        for _ in range(1 if first_alone else len(self._requests)):
            self._submit_next()

    def _submit_next(self) -> None:
        fn, options = self._requests[len(self._handles)]
        rank = self._priority + (len(self._handles) > 0)
        self._handles.append(default_engine().submit(fn, options, priority=rank, **self._submit))

    def results(self, *, label: str, on_result: Callable[[int, Any, bool], None] | None = None) -> list[Any]:
        """Each result in order (see run_all for `on_result`); a failure shows its message and stops the page."""
        handles, count = self._handles, len(self._requests)
        bar = None
        results = []
        redrawn_at = 0.0
        try:
            for index in range(count):
                handle = handles[index]
                if bar is None and not handle.done:
                    bar = st.empty()
                part = f"{label} ({index + 1} of {count})" if count > 1 else label

                def show(progress: Progress, bar=bar, part=part) -> None:
                    nonlocal redrawn_at
                    if time.monotonic() - redrawn_at >= REDRAW_S:
                        redrawn_at = time.monotonic()
                        _show(bar, part, progress, redrawn_at - self._started_at)

                value = handle.result(on_poll=show, poll_s=POLL_S)
                results.append(value)
                if on_result:
                    on_result(index, value, index + 1 == len(handles) or not handles[index + 1].done)
                while len(handles) < count:  # the first is in and drawn: now the others (see run_all)
                    self._submit_next()
        except (RunFailed, Cancelled) as error:
            if bar is not None:
                bar.empty()
            _failed(label, error)
        finally:
            if self._keep and not all(h.done for h in handles):  # left while running: it goes on, for the return
                self._left.detach()
                _hold(handles, self._requests, self._started_at)
            else:
                _leave(handles)
        if bar is not None:
            bar.empty()
        return results


def _hold(handles: list[Run], requests: list[tuple[Callable, Any]], started_at: float) -> None:
    held = st.session_state.setdefault(KEPT_KEY, {})
    for handle, (fn, options) in zip(handles, requests, strict=False):
        key = experiment_key(fn, options)
        earlier = held.get(key)
        if earlier is not None and earlier[0] is not handle:
            earlier[0].cancel()  # the same run, held twice: one hold is enough
        held[key] = (handle, earlier[1] if earlier else started_at)


def _leave(handles: list[Run]) -> None:
    for handle in handles:
        handle.cancel()


def remember(fn: Callable, options: Any, value: Any) -> None:
    """Keep a result another run computed along the way, so asking for it later is answered at once."""
    default_engine().remember(fn, options, value)


def cached(fn: Callable, options: Any) -> Any | None:
    """A result someone already computed, without starting a run."""
    return default_engine().cached(fn, options)
