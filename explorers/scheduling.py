"""Which queued run a free worker takes next: fair between browser sessions, urgent first within one.

A study group shares one server, so one session's heavy settings must not starve another's
light lab. Sessions take turns (the one served longest ago goes first); within a session the
lowest priority number runs first (a page's main figure before its supporting runs), then the
oldest. Long runs (those given a longer time limit than the engine's usual one: profiles,
sweeps, searches, fresh-process labs) may hold only part of the pool at once, so a worker stays
free for short ones. Pure functions over plain fields, so the policy is tested on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

MAX_QUEUED_PER_SESSION = 24  # a page submits up to about a dozen runs at once (the Memory sweep and remedies)


class Queued(Protocol):
    id: int
    session: str
    priority: int
    long: bool


def long_run_cap(pool_size: int) -> int:
    """How many workers long runs may hold at once: all but one, so short runs find a free worker. The app's pool
    never has fewer than two (explorers.engine.pool_size); a pool of one, which only a caller of its own asks for
    (a test, a benchmark), lets a long run hold it."""
    return max(1, pool_size - 1)


def pick(queue: Sequence[Queued], last_served: Mapping[str, int], long_running: int, pool_size: int) -> Queued | None:
    """The run a free worker should take now, or None when only long runs wait and their share is taken."""
    allowed = [job for job in queue if not job.long or long_running < long_run_cap(pool_size)]
    if not allowed:
        return None
    oldest = _oldest(allowed)
    return min(allowed, key=lambda job: _order(job, oldest, last_served))


def service_order(queue: Sequence[Queued], last_served: Mapping[str, int]) -> list[Queued]:
    """The order the queue would be served in, with every worker free (for "2 runs ahead of yours")."""
    served = dict(last_served)
    waiting, order = list(queue), []
    tick = max(served.values(), default=0)
    while waiting:
        oldest = _oldest(waiting)
        job = min(waiting, key=lambda j: _order(j, oldest, served))
        waiting.remove(job)
        order.append(job)
        tick += 1
        served[job.session] = tick
    return order


def _oldest(queue: Iterable[Queued]) -> dict[str, int]:
    oldest: dict[str, int] = {}
    for job in queue:
        oldest[job.session] = min(oldest.get(job.session, job.id), job.id)
    return oldest


def _order(job: Queued, oldest: Mapping[str, int], last_served: Mapping[str, int]) -> tuple:
    """Sessions by their last turn (never served first, then by their oldest waiting run); then priority, age."""
    return (last_served.get(job.session, -1), oldest[job.session], job.priority, job.id)
