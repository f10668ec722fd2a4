"""Server-side rerun time of every lab page after a control change, as ratios measured in one process.

    make bench

For each page: the median AppTest rerun after moving one control, against (a) a trivial
Streamlit page with one slider, rerun the same way, and (b) the explorer work the page
calls for that change, timed directly. This machine is shared and noisy, so only the
ratios mean anything; each lab adds its scenario to SCENARIOS.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from explorers import autograd, memory_lab, modes, profiling_lab  # noqa: E402

REPEATS = 15
TRIVIAL_PAGE = "import streamlit as st\nst.slider('x', 0, 10, key='x')\n"


@dataclass(frozen=True)
class Scenario:
    page: str
    widget: str  # AppTest accessor: "slider", "selectbox", ...
    key: str
    values: tuple
    explorer_work: Callable[[object], object]  # what the page asks of the explorer for one value


def autograd_work(width: int) -> None:
    options = autograd.AutogradOptions(width=width)
    autograd.explain(autograd.run(options, ["forward"]))
    autograd.run(options, ["forward", "backward_retain", "backward_retain"])  # the predict-then-reveal evidence


def modes_work(seed: int) -> None:
    options = modes.ModesOptions(seed=seed)
    modes.explain(modes.lab_grid(options), modes.misleading_validation(options))


def memory_work(seed: int) -> None:
    memory_lab.measure_point.cache_clear()  # the page just measured this seed: make the explorer do it again
    memory_lab.estimate_point.cache_clear()
    options = memory_lab.MemoryOptions(seed=seed)
    points = memory_lab.sweep(options, memory_lab.sweep_batches(options))
    curves = memory_lab.retention(memory_lab.MemoryOptions(preset="mlp", width=256, depth=2))
    memory_lab.explain(options, points[3].result, points), curves


# Each seed is new to the page, so its cache never answers: every rerun pays the full explorer cost.
FRESH_SEEDS = tuple(range(1, 2 * REPEATS + 1))
SCENARIOS = [
    Scenario("pages/1_Autograd.py", "slider", "autograd.width", (8, 4), autograd_work),
    Scenario("pages/2_Modes.py", "number_input", "modes.seed", FRESH_SEEDS, modes_work),
    Scenario("pages/4_Memory.py", "number_input", "memory.seed", tuple(s + 1000 for s in FRESH_SEEDS), memory_work),
]


def grid_versus_six_forwards(options: modes.ModesOptions) -> None:
    """The mode grid against the six plain forwards it is built on, same model and batch."""
    model = modes.build_model(options)
    batch = torch.randn(options.batch_size, modes.IN_FEATURES)

    def six_forwards() -> None:
        for behaviour in modes.BEHAVIOURS:
            model.train(behaviour == "train")
            for grad_mode in modes.GRAD_MODES:
                with modes._GRAD_CONTEXTS[grad_mode]():
                    model(batch)

    bare = time_calls(lambda _: six_forwards(), (None,), fresh_thread=False)
    grid = time_calls(lambda _: modes.mode_grid(model, batch), (None,), fresh_thread=False)
    print(
        f"mode grid, width {options.width}, batch {options.batch_size}: {grid:.2f} ms; six plain forwards: "
        f"{bare:.2f} ms; ratio {grid / bare:.1f}"
    )


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_reruns(at: AppTest, widget: str, key: str, values: tuple) -> float:
    samples = []
    for _, value in zip(range(REPEATS), cycle(values), strict=False):
        element = getattr(at, widget)(key=key).set_value(value)
        start = time.perf_counter()
        element.run()
        samples.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    return median_ms(samples)


def time_calls(work: Callable[[object], object], values: tuple, fresh_thread: bool = True) -> float:
    """Each call in a fresh thread (as Streamlit runs each rerun) unless told otherwise.

    torch keeps a parallel worker team per calling thread; calling from the main thread
    here made the following page reruns (in their own threads) about 2x slower on this
    2-core machine, so the baseline is measured the way the page runs.
    """
    samples = []
    for _, value in zip(range(REPEATS), cycle(values), strict=False):
        thread = threading.Thread(target=work, args=(value,))
        start = time.perf_counter()
        if fresh_thread:
            thread.start()
            thread.join()
        else:
            work(value)
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


def time_in_rounds(at: AppTest, scenario: Scenario, rounds: int = 2) -> tuple[float, float]:
    """Page reruns and bare explorer calls in alternating blocks, so slow drift on the machine hits both."""
    page, bare = [], []
    for round_index in range(rounds):
        values = scenario.values[round_index * REPEATS :] or scenario.values  # fresh values where there are any
        page.append(time_reruns(at, scenario.widget, scenario.key, values))
        bare.append(time_calls(scenario.explorer_work, values))
    return statistics.median(page), statistics.median(bare)


def profiler_run_times() -> None:
    """A default profiling run end to end (warm-up plus active steps), with a cold and a warm worker process."""
    profiling_lab.stop_worker()
    runs = []
    for _ in range(6):
        start = time.perf_counter()
        result = profiling_lab.run_isolated(profiling_lab.ProfileOptions())
        runs.append((time.perf_counter() - start, result.overhead_ratio))
    cold, warm = runs[0][0], statistics.median(r[0] for r in runs[1:])
    overhead = statistics.median(r[1] for r in runs)
    print(
        f"profiler, default run: {cold:.2f} s with a cold worker (starts torch and the profiler), "
        f"{warm:.2f} s warm (median of 5); cold/warm {cold / warm:.1f}; profiled/unprofiled step time "
        f"{overhead:.2f} (median of 6 runs)"
    )
    profiling_lab.stop_worker()


def memory_sweep_and_estimate() -> None:
    """The default 8-point sweep, and one fake-tensor estimate against one real step at the largest measured size."""
    options = memory_lab.MemoryOptions()
    memory_lab.estimate_point.cache_clear()
    memory_lab.measure_point.cache_clear()
    start = time.perf_counter()
    points = memory_lab.sweep(options, memory_lab.sweep_batches(options))
    sweep_s = time.perf_counter() - start
    largest = max(p.batch for p in points if p.measured)
    real, fake = [], []
    for _ in range(5):
        memory_lab.measure_point.cache_clear()
        memory_lab.estimate_point.cache_clear()
        start = time.perf_counter()
        memory_lab.measure_point(options, largest)
        real.append(time.perf_counter() - start)
        start = time.perf_counter()
        memory_lab.estimate_point(options, memory_lab.BATCHES[-1])
        fake.append(time.perf_counter() - start)
    real_ms, fake_ms = statistics.median(real) * 1000, statistics.median(fake) * 1000
    model, batch = memory_lab.build(options, largest)
    optimizer = torch.optim.Adam(model.parameters())

    def plain_step(_) -> None:
        model(batch).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    plain_ms = time_calls(plain_step, (None,), fresh_thread=False)
    print(
        f"memory sweep, 8 batch sizes, defaults: {sweep_s:.2f} s (target 2 s: {sweep_s / 2:.2f} of it); "
        f"estimate at batch {memory_lab.BATCHES[-1]:,}: {fake_ms:.0f} ms vs one tracked real step at batch "
        f"{largest}: {real_ms:.0f} ms (ratio {fake_ms / real_ms:.2f}) and one plain step: {plain_ms:.0f} ms "
        f"(ratio {fake_ms / plain_ms:.2f})"
    )


def main() -> None:
    trivial = AppTest.from_string(TRIVIAL_PAGE).run()
    trivial_ms = time_reruns(trivial, "slider", "x", (3, 7))
    print(f"trivial one-slider page rerun: {trivial_ms:.1f} ms (median of {REPEATS})\n")
    print(f"{'page':28} {'rerun ms':>9} {'explorer ms':>12} {'x trivial':>10} {'x explorer':>11}")
    for scenario in SCENARIOS:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.switch_page(scenario.page).run()
        page_ms, explorer_ms = time_in_rounds(at, scenario)
        print(
            f"{scenario.page:28} {page_ms:9.1f} {explorer_ms:12.1f} {page_ms / trivial_ms:10.1f} "
            f"{page_ms / explorer_ms:11.2f}"
        )
    print()
    grid_versus_six_forwards(modes.ModesOptions())  # the default: fixed per-cell costs dominate
    grid_versus_six_forwards(modes.ModesOptions(width=512, batch_size=512))  # where the forwards dominate
    profiler_run_times()
    memory_sweep_and_estimate()


if __name__ == "__main__":
    main()
