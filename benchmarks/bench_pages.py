"""Server-side rerun time of every lab page after a control change, as ratios measured in one process.

    make bench
    python benchmarks/bench_pages.py Gradients   # one page only

For each page: the median AppTest rerun after a new seed (so no cache answers), against
(a) a trivial Streamlit page with one slider, rerun the same way, and (b) the same
experiments called directly on this process's main thread: the target is (b) <= 1.3.
The page runs them on the run engine's workers, so (b) includes the trip to a worker and
back, Streamlit's drawing, and whatever the workers' parallelism wins back. This machine
is shared and noisy, so only the ratios mean anything.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from explorers import engine  # noqa: E402
from explorers.autograd import experiment as autograd  # noqa: E402
from explorers.gradients import clipping  # noqa: E402
from explorers.gradients import experiment as gradients  # noqa: E402
from explorers.memory import experiment as memory  # noqa: E402
from explorers.modes import experiment as modes  # noqa: E402
from explorers.modes import your_model as mode_grid  # noqa: E402
from explorers.profiler import experiment as profiler  # noqa: E402

REPEATS = 9
TRIVIAL_PAGE = "import streamlit as st\nst.slider('x', 0, 10, key='x')\n"


@dataclass(frozen=True)
class Scenario:
    page: str
    key: str  # the seed's number_input
    seeds: tuple[int, ...]
    requests: Callable[[int], list[tuple[Callable, object]]]  # what the page asks the engine for, per seed


def autograd_requests(seed: int) -> list:
    options = autograd.AutogradOptions(seed=seed)
    two_passes = ("forward", "backward_retain", "backward_retain")
    return [
        (autograd.replay, autograd.Replay(options, ("forward",))),
        (autograd.replay, autograd.Replay(options, two_passes)),
    ]


def modes_requests(seed: int) -> list:
    options = modes.ModesOptions(seed=seed)
    return [(modes.lab_grid, modes.grid_options(options)), (modes.misleading_validation, options)]


def memory_requests(seed: int) -> list:
    options = memory.without_view_settings(memory.MemoryOptions(seed=seed))
    return [(memory.batch_point, dataclasses.replace(options, batch_size=b)) for b in memory.sweep_batches(options)]


def profiler_requests(seed: int) -> list:
    return [(profiler.profile, profiler.ProfileOptions(seed=seed))]


def gradients_requests(seed: int) -> list:
    options = gradients.GradientsOptions(seed=seed)
    model = gradients.model_options(options)
    return [
        (gradients.scenario_run, model),
        (gradients.scale_sweep, model),
        (clipping.clip_once, dataclasses.replace(model, max_norm=options.max_norm)),
        (clipping.clipped_training, gradients.training_options(options)),
    ]


SCENARIOS = [
    Scenario("pages/1_Autograd.py", "autograd.seed", tuple(range(100, 100 + 2 * REPEATS)), autograd_requests),
    Scenario("pages/2_Modes.py", "modes.seed", tuple(range(200, 200 + 2 * REPEATS)), modes_requests),
    Scenario("pages/4_Memory.py", "memory.seed", tuple(range(300, 300 + 2 * REPEATS)), memory_requests),
    Scenario("pages/3_Profiler.py", "profiler.seed", tuple(range(400, 400 + 2 * REPEATS)), profiler_requests),
    Scenario("pages/5_Gradients.py", "gradients.seed", tuple(range(500, 500 + 2 * REPEATS)), gradients_requests),
]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_reruns(at: AppTest, widget: str, key: str, values) -> float:
    samples = []
    for _, value in zip(range(REPEATS), cycle(values), strict=False):
        element = getattr(at, widget)(key=key).set_value(value)
        start = time.perf_counter()
        element.run()
        samples.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    return median_ms(samples)


def time_bare(scenario: Scenario, seeds) -> float:
    """The page's experiments, called one after another on this process's main thread."""
    samples = []
    for seed in seeds:
        start = time.perf_counter()
        for fn, options in scenario.requests(seed):
            fn(options)
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


def page_versus_bare(scenario: Scenario) -> tuple[float, float]:
    """Alternating blocks of page reruns and bare runs, each on seeds new to both, so drift hits both alike."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.switch_page(scenario.page).run()
    page, bare = [], []
    for block in range(2):
        seeds = scenario.seeds[block * REPEATS : (block + 1) * REPEATS]
        page.append(time_reruns(at, "number_input", scenario.key, seeds))
        bare.append(time_bare(scenario, [s + 10_000 for s in seeds]))
    return statistics.median(page), statistics.median(bare)


def grid_versus_six_forwards(options: modes.ModesOptions) -> None:
    """The mode grid against the six plain forwards it is built on, same model and batch."""
    model = modes.build_model(options)
    batch = torch.randn(options.batch_size, modes.IN_FEATURES)

    def six_forwards() -> None:
        for behaviour in mode_grid.BEHAVIOURS:
            model.train(behaviour == "train")
            for grad_mode in mode_grid.GRAD_MODES:
                with mode_grid._GRAD_CONTEXTS[grad_mode]():
                    model(batch)

    def timed(work) -> float:
        samples = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            work()
            samples.append(time.perf_counter() - start)
        return median_ms(samples)

    bare, grid = timed(six_forwards), timed(lambda: mode_grid.mode_grid(model, batch))
    print(
        f"mode grid, width {options.width}, batch {options.batch_size}: {grid:.2f} ms; six plain forwards: "
        f"{bare:.2f} ms; ratio {grid / bare:.1f}"
    )


def engine_start_and_round_trip() -> None:
    """A new engine's first answer (forkserver importing torch, workers forking) and a warm round trip."""
    start = time.perf_counter()
    fresh = engine.Engine()
    fresh.submit(autograd.replay, autograd.Replay(autograd.AutogradOptions(seed=1))).result()
    cold = time.perf_counter() - start
    trips = []
    for seed in range(2, 2 + REPEATS):
        request = autograd.Replay(autograd.AutogradOptions(seed=seed))
        start = time.perf_counter()
        fresh.submit(autograd.replay, request).result()
        trips.append(time.perf_counter() - start)
    bare = []
    for seed in range(2, 2 + REPEATS):
        start = time.perf_counter()
        autograd.replay(autograd.Replay(autograd.AutogradOptions(seed=seed)))
        bare.append(time.perf_counter() - start)
    fresh.close()
    print(
        f"engine: first answer from a new engine {cold:.2f} s; a small run (autograd, one step) through a warm "
        f"worker {median_ms(trips):.1f} ms against {median_ms(bare):.1f} ms on the main thread "
        f"(ratio {median_ms(trips) / median_ms(bare):.2f})"
    )


def memory_sweep_and_estimate() -> None:
    """The default 8-point sweep, and one fake-tensor estimate against one real step at the largest measured size."""
    options = memory.MemoryOptions()
    memory.estimate_point.cache_clear()
    start = time.perf_counter()
    points = memory.sweep(options, memory.sweep_batches(options))
    sweep_s = time.perf_counter() - start
    largest = max(p.batch for p in points if p.measured)
    real, fake = [], []
    for _ in range(5):
        memory.estimate_point.cache_clear()
        start = time.perf_counter()
        memory.measure_point(options, largest)
        real.append(time.perf_counter() - start)
        start = time.perf_counter()
        memory.estimate_point(options, memory.BATCHES[-1])
        fake.append(time.perf_counter() - start)
    print(
        f"memory sweep, 8 batch sizes, defaults, main thread: {sweep_s:.2f} s; estimate at batch "
        f"{memory.BATCHES[-1]:,}: {median_ms(fake):.0f} ms vs one tracked real step at batch {largest}: "
        f"{median_ms(real):.0f} ms (ratio {median_ms(fake) / median_ms(real):.2f})"
    )


def main(only: list[str]) -> None:
    """`only`: page names to measure (e.g. Gradients); all pages and the extra figures when empty."""
    trivial = AppTest.from_string(TRIVIAL_PAGE).run()
    trivial_ms = time_reruns(trivial, "slider", "x", (3, 7))
    print(f"trivial one-slider page rerun: {trivial_ms:.1f} ms (median of {REPEATS})")
    print(f"workers: {engine.default_engine().size}, {engine.default_engine().threads_per_worker} thread(s) each\n")
    print("page rerun after a new seed (no cache), against the same experiments on this process's main thread")
    print(f"{'page':24} {'rerun ms':>9} {'bare ms':>9} {'x bare':>7} {'x trivial':>10}")
    for scenario in SCENARIOS:
        if only and not any(name.lower() in scenario.page.lower() for name in only):
            continue
        page_ms, bare_ms = page_versus_bare(scenario)
        print(f"{scenario.page:24} {page_ms:9.1f} {bare_ms:9.1f} {page_ms / bare_ms:7.2f} {page_ms / trivial_ms:10.1f}")
    if only:
        return
    print()
    engine_start_and_round_trip()
    grid_versus_six_forwards(modes.ModesOptions())  # the default: fixed per-cell costs dominate
    grid_versus_six_forwards(modes.ModesOptions(width=512, batch_size=512))  # where the forwards dominate
    memory_sweep_and_estimate()


if __name__ == "__main__":
    main(sys.argv[1:])
