"""The progress store: what saving an attempt adds to its rerun, and the study plan with a year of records.

    .venv/bin/python benchmarks/bench_progress.py

Targets (issue 46): saving an attempt adds at most 20 ms to the rerun that records it; the study plan
draws within 2x the trivial page, with a year of records (5,000) in the store.

- **Saving**: `Store.add` of one attempt, into a store that already holds 5,000 of this learner's
  records and 50,000 of others': the time the rerun that records it spends on it (one INSERT and its
  commit; SQLite with synchronous=FULL, so an fsync). PostgreSQL too, on a throwaway local cluster,
  when its binaries are installed.
- **The study plan**: AppTest runs of the study plan and of the home page (the trivial page: a title,
  a paragraph and the lab map), for a learner with 5,000 records. A fresh session reads the records
  once; a rerun reads them from the session. Each as a ratio to the home page in the same run.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["EXPLORER_DATA"] = tempfile.mkdtemp(prefix="bench-progress-")
os.environ.pop("DATABASE_URL", None)

from streamlit.testing.v1 import AppTest  # noqa: E402

from explorers.drills import DRILLS  # noqa: E402
from explorers.progress import learner  # noqa: E402
from explorers.progress.records import Record, parse  # noqa: E402
from explorers.progress.store import Store, default_url  # noqa: E402
from ui import progress  # noqa: E402

YEAR_OF_RECORDS = 5_000
OTHERS = 50_000
SAVE_TARGET_MS = 20.0
PLAN_TARGET_RATIO = 2.0
LABS = ("autograd", "gradients", "modes", "memory", "profiler", "ddp", "reproducibility", "serving", "scale")


def a_year(rng: random.Random) -> list[Record]:
    """5,000 records over 365 days, of every kind the app writes, oldest first."""
    start, kept = time.time() - 365 * 86_400, []
    drills = sorted(DRILLS)
    for n in range(YEAR_OF_RECORDS):
        at = start + n * 365 * 86_400 / YEAR_OF_RECORDS
        kind = rng.choice(("visit", "visit", "prediction", "attempt", "mock"))
        if kind == "visit":
            key, data = rng.choice(LABS), {}
        elif kind == "prediction":
            key, data = f"{rng.choice(LABS)}.predict{n}", {"question": f"Question {n}?", "right": rng.random() < 0.6}
        elif kind == "mock":
            key, data = rng.choice(LABS), {"points": rng.randrange(6)}
        else:
            right = rng.random() < 0.5
            key = rng.choice(drills)
            data = {"seed": rng.randrange(100), "lines_found": 1, "lines_total": 1, "extra_lines": 0}
            data |= {"fix_right": right, "right": right, "seconds": 60.0 if right else None}
        kept.append(parse({"kind": kind, "key": key, "at": at, "data": data}))
    return kept


def seeded(url: str, rng: random.Random) -> tuple[Store, str]:
    store, me = Store(url), learner.new_id()
    store.add_many(learner.digest(me), a_year(rng))
    for _ in range(OTHERS // YEAR_OF_RECORDS):
        store.add_many(learner.digest(learner.new_id()), a_year(rng))
    return store, me


def save_ms(store: Store, me: str, repeats: int = 200) -> tuple[float, float]:
    key, times = learner.digest(me), []
    drill = sorted(DRILLS)[0]
    for n in range(repeats):
        data = {"seed": n % 100, "lines_found": 1, "lines_total": 1, "extra_lines": 0, "fix_right": True}
        record = Record.now("attempt", drill, data | {"right": True, "seconds": 12.0})
        started = time.perf_counter()
        store.add(key, record)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * len(times))]


def page_s(page: str | None, me: str, repeats: int, rerun: bool) -> float:
    times = []
    for _ in range(repeats):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
        if page:
            at.switch_page(page)
        at.session_state[progress.LEARNER_KEY] = me
        started = time.perf_counter()
        at.run()
        if rerun:
            started = time.perf_counter()
            at.run()
        times.append(time.perf_counter() - started)
        assert not at.exception, at.exception
    return statistics.median(times)


def main() -> None:
    rng = random.Random(46)
    print(f"progress store: {YEAR_OF_RECORDS} records for the learner, {OTHERS} for others")
    sqlite, me = seeded(default_url(), rng)
    median, p95 = save_ms(sqlite, me)
    print(f"  save one attempt, SQLite (WAL, synchronous=FULL): median {median:.2f} ms, p95 {p95:.2f} ms "
          f"(target <= {SAVE_TARGET_MS:.0f} ms)")  # fmt: skip
    try:
        from tests import postgres
    except ImportError:
        postgres = None
    if postgres is not None and postgres.binaries() is not None:
        with postgres.cluster() as url:
            store, them = seeded(url, rng)
            median, p95 = save_ms(store, them)
            print(f"  save one attempt, PostgreSQL (local cluster): median {median:.2f} ms, p95 {p95:.2f} ms")
            store.dispose()
    else:
        print("  PostgreSQL: not installed here, not measured")

    page_s(None, me, 2, rerun=False)  # imports and the engine's start, paid once by whichever page is first
    for rerun in (False, True):
        home = page_s(None, me, 7, rerun)
        plan = page_s("pages/9_Study_plan.py", me, 7, rerun)
        what = "a rerun" if rerun else "a fresh session (reads the records)"
        print(f"  {what}: home {home * 1000:.0f} ms, study plan {plan * 1000:.0f} ms: "
              f"{plan / home:.2f}x (target <= {PLAN_TARGET_RATIO:.0f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
