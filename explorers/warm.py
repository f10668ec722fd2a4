"""What a lab's first visit would pay in an engine worker, paid once when the server starts (ui/launch.py submits
it to every worker): the labs' imports, the worker's own forkserver (DDP's ranks and the Profiler's DataLoader
workers fork from it: explorers/forkserver.py) and Reproducibility's template interpreter.

    from explorers import engine, warm
    engine.default_engine().submit(warm.worker, 0).result()   # {"imports": 0.9, "forkserver": 1.8, ...}
"""

from __future__ import annotations

import importlib
import multiprocessing.forkserver
import time

# Every lab's package: the modules its experiments import in the worker that runs them.
LAB_MODULES = (
    "explorers.autograd",
    "explorers.gradients",
    "explorers.modes",
    "explorers.memory",
    "explorers.profiler",
    "explorers.ddp",
    "explorers.reproducibility",
    "explorers.serving",
    "explorers.scale",
    "explorers.drills",
    "explorers.compiled",
    "explorers.precision",
    "explorers.tensors",
    "explorers.evidence.experiment",
    "explorers.slowstep.experiment",
    "hta.trace_analysis",
)


def worker(index: int, report=None) -> dict[str, float]:
    """Seconds each part took in this worker; `index` tells the submits apart, so that each reaches a worker (the
    engine calls every experiment as `fn(options, report=...)`)."""
    took: dict[str, float] = {}
    started = time.perf_counter()
    for module in LAB_MODULES:
        importlib.import_module(module)
    took["imports"] = time.perf_counter() - started
    started = time.perf_counter()
    multiprocessing.forkserver.ensure_running()  # with the preload the engine set for its workers
    took["forkserver"] = time.perf_counter() - started
    from explorers.reproducibility import fresh

    started = time.perf_counter()
    fresh.start_template()
    took["template"] = time.perf_counter() - started
    return took
