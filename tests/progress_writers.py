"""Processes that write progress the way a replica does, for the store's concurrency and crash tests.

python -m tests.progress_writers learners URL PREFIX THREADS RECORDS   each thread a learner PREFIX-n
python -m tests.progress_writers until_killed URL                      prints each record's key once committed
"""

from __future__ import annotations

import sys
import threading

from explorers.progress import learner
from explorers.progress.records import Record
from explorers.progress.store import Store


def learner_id(prefix: str, n: int) -> str:
    """A valid, distinct id per (prefix, n): base32 letters only."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    tail = "".join(alphabet[(n >> (5 * i)) & 31] for i in range(4))
    return (prefix * 32)[: learner.ID_LENGTH - 4] + tail


def learners(url: str, prefix: str, threads: int, records: int) -> None:
    store = Store(url)
    failures = []

    def one(n: int) -> None:
        key = learner.digest(learner_id(prefix, n))
        for i in range(records):
            try:
                store.add(key, Record.now("mock", f"lab-{i}", {"points": i % 6}))
            except Exception as error:  # noqa: BLE001 - counted and reported below
                failures.append(repr(error))

    workers = [threading.Thread(target=one, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(f"failures {len(failures)} {failures[:3]}", flush=True)


def until_killed(url: str) -> None:
    store = Store(url)
    key = learner.digest(learner_id("K", 0))
    n = 0
    while True:
        store.add(key, Record.now("visit", f"lab-{n}", {}))
        print(f"lab-{n}", flush=True)  # after the commit returned
        n += 1


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "learners":
        learners(args[0], args[1], int(args[2]), int(args[3]))
    else:
        until_killed(args[0])
