"""Run a function in a forked child, so that what it does to dynamo never reaches the caller.

`torch._dynamo.explain` and `dynamo.reset()` clear dynamo's caches for the whole process, and a
compile changes dynamo's and inductor's state; a notebook's own compiled models live in the same
caches. A forked child gets a copy of the caller's memory (its model included, nothing pickled),
does the work, sends back plain data and exits; the caller's caches, config, RNG and default
dtype are as they were. A child past its time limit is killed.

The child computes on one thread: OpenMP's thread pool does not survive a fork, and a forked child
that enters a parallel region its parent had used hangs (measured: `explain` after a run in the
parent never returned), which is why DataLoader's forked workers use one thread too.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable

from explorers import lifeline

TIMEOUT_S = 300.0


def _child(conn, fn: Callable, args: tuple, kwargs: dict) -> None:
    lifeline.kill_me_with_my_parent()
    import torch

    torch.set_num_threads(1)
    try:
        conn.send(("ok", fn(*args, **kwargs)))
    except BaseException as error:  # noqa: BLE001  (sent back to be raised in the caller)
        conn.send(("error", (error, traceback.format_exc())))
    finally:
        conn.close()


def in_child(fn: Callable, *args, timeout_s: float = TIMEOUT_S, **kwargs):
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(child, fn, args, kwargs), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} did not finish within {timeout_s:g} s")
        kind, value = parent.recv()
    except EOFError as error:
        raise RuntimeError(f"the child running {getattr(fn, '__name__', fn)} died (exit {process.exitcode})") from error
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        parent.close()
    if kind == "error":
        error, text = value
        raise error from RuntimeError(text)
    return value
