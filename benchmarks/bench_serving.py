"""Toggling a mismatch on the Serving page, against the bare `compare` call, as ratios measured in one run.

    .venv/bin/python benchmarks/bench_serving.py

The page asks the run engine for `compare_run`; the bare side calls `compare_run` with the same
options on this process's main thread. The trained artefact is cached on both sides first (every
worker and this process train seed 0 before timing), so both sides measure one comparison: the
golden replay, 5,000 live requests through two pipelines, and the drift statistic.

A Gray-code walk over the 128 sets of mismatches toggles exactly one checkbox per step, and each
block of 16 steps runs at its own shift, so no cache can answer a page rerun. Each block times its
16 page reruns, then the same 16 options bare (on as many threads as a worker uses), and takes the
ratio of the medians, per group: the drift of this shared, noisy machine hits both sides of a
ratio alike. Sets that include batch_of_one (5,000 single-request forwards that each raise) cost
several times the others and are reported apart. The walk runs twice (16 blocks).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from explorers import engine  # noqa: E402
from explorers.serving import experiment, training  # noqa: E402
from explorers.serving.pipeline import MISMATCHES  # noqa: E402

PAGE = "pages/8_Serving.py"
NAMES = tuple(MISMATCHES)
BLOCK = 16  # steps per block; 8 blocks walk all 128 sets once
SHIFTS = tuple(0.125 * i for i in range(1, 17))  # one per block, none the page opened with or warmed
TARGET = 1.3
TRIVIAL_PAGE = "import streamlit as st\nst.checkbox('x', key='x')\n"


def gray_sets() -> list[tuple[str, ...]]:
    """The 128 sets of mismatches in an order where neighbours differ by one mismatch."""
    sets = []
    for i in range(1, 2 ** len(NAMES) + 1):
        code = (i % 2 ** len(NAMES)) ^ ((i % 2 ** len(NAMES)) >> 1)
        sets.append(tuple(name for bit, name in enumerate(NAMES) if code >> bit & 1))
    return sets


def warm_workers() -> None:
    """Every worker trains seed 0 once (a per-process cache), with options no timed step uses."""
    pool = engine.default_engine()
    runs = [
        pool.submit(experiment.compare_run, experiment.ServingOptions(shift=3.0 - 0.125 * i))
        for i in range(2 * pool.size)
    ]
    for run in runs:
        run.result()
    training.trained(0)


def time_page(at: AppTest, before: tuple[str, ...], after: tuple[str, ...]) -> float:
    (toggled,) = set(before) ^ set(after)
    box = at.checkbox(key=f"serving.{toggled}").set_value(toggled in after)
    start = time.perf_counter()
    box.run()
    elapsed = time.perf_counter() - start
    assert not at.exception, at.exception
    return elapsed


def time_bare(options: experiment.ServingOptions) -> float:
    start = time.perf_counter()
    experiment.compare_run(options)
    return time.perf_counter() - start


def median_ms(samples) -> float:
    return 1000 * statistics.median(samples)


def main() -> None:
    pool = engine.default_engine()
    print(f"workers: {pool.size}, {pool.threads_per_worker} thread(s) each; bare calls: the same thread count")
    trivial = AppTest.from_string(TRIVIAL_PAGE).run()
    trivial_samples = []
    for i in range(9):
        box = trivial.checkbox(key="x").set_value(i % 2 == 0)
        start = time.perf_counter()
        box.run()
        trivial_samples.append(time.perf_counter() - start)
    warm_workers()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    sets = gray_sets() * 2
    torch.set_num_threads(pool.threads_per_worker)  # the bare side gets the threads a worker has
    current: tuple[str, ...] = ()
    blocks = []  # per block: {group: (page medians, bare medians)}
    for block, shift in enumerate(SHIFTS):
        at.slider(key="serving.shift").set_value(shift).run()  # not timed: moves the block to fresh options
        steps = sets[block * BLOCK : (block + 1) * BLOCK]
        page = []
        for chosen in steps:
            page.append(time_page(at, current, chosen))
            current = chosen
        bare = [time_bare(experiment.ServingOptions(chosen, shift)) for chosen in steps]
        rows = list(zip(steps, page, bare, strict=True))
        blocks.append({name: [(p, b) for chosen, p, b in rows if keep(chosen)] for name, keep in GROUPS.items()})
    cached = []  # back to a set the engine already holds: the page's own work alone
    for _ in range(9):
        previous = current
        current = sets[0] if current != sets[0] else sets[1]
        cached.append(time_page(at, previous, current))

    print(f"trivial one-checkbox page rerun: {median_ms(trivial_samples):.1f} ms (median of 9)")
    print(f"page rerun answered from the engine's cache: {median_ms(cached):.1f} ms (median of 9)\n")
    print(f"toggle one mismatch (a fresh comparison) against compare_run on the main thread, {len(SHIFTS)} blocks")
    print(f"{'sets':24} {'steps':>5} {'page ms':>8} {'bare ms':>8} {'ratio (median)':>15} {'block range':>12}")
    for name in GROUPS:
        pairs = [pair for block in blocks for pair in block[name]]
        ratios = sorted(
            statistics.median(p for p, _ in block[name]) / statistics.median(b for _, b in block[name])
            for block in blocks
            if block[name]
        )
        ratio = statistics.median(ratios)
        if ratios[-1] <= TARGET:
            verdict = "within"
        elif ratios[0] > TARGET:
            verdict = "over"
        else:
            verdict = "too close to call against"
        page_ms, bare_ms = median_ms([p for p, _ in pairs]), median_ms([b for _, b in pairs])
        print(
            f"{name:24} {len(pairs):5d} {page_ms:8.1f} {bare_ms:8.1f} "
            f"{ratio:15.2f} {f'{ratios[0]:.2f}-{ratios[-1]:.2f}':>12}  {verdict} the {TARGET}x target"
        )


GROUPS = {
    "without batch_of_one": lambda chosen: "batch_of_one" not in chosen,
    "with batch_of_one": lambda chosen: "batch_of_one" in chosen,
    "all": lambda chosen: True,
}


if __name__ == "__main__":
    main()
