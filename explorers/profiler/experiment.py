"""The Profiler lab's experiment: a synthetic training job, profiled by phase.

The knobs (model width and depth, batch size, DataLoader workers and pinned memory, a
per-batch data cost standing in for augmentation, optimizer, threads) set up a real
training loop, and `your_model.profile_training` measures it. `profile` sets the
process-wide thread count and starts the profiler, so the page runs it on the run
engine (`explorers.engine`), in a worker process of its own; from a notebook, call it
directly::

    import explorers.profiler.experiment as experiment
    result = experiment.profile(experiment.ProfileOptions(data_cost_ms=20))
    result.verdict, result.mean_phases()
"""

from __future__ import annotations

import multiprocessing.forkserver
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from explorers import bounds, capacity
from explorers.profiler.your_model import ProfileResult, profile_training, settle_steps, total_steps

WIDTH_RANGE = (32, 1024)  # wider: the largest job (every round, 10 active steps) outlasts its time limit here
WIDTHS = tuple(2**k for k in range(5, 11))  # the widths the page offers: halving one gives another
DEPTH_RANGE = (1, 8)
BATCH_RANGE = (8, 1024)
DATA_COST_RANGE = (0, 50)  # milliseconds of simulated augmentation per batch
WORKERS_RANGE = (0, 4)
THREADS_RANGE = (1, capacity.usable_cores())
WARMUP_RANGE = (0, 5)
ACTIVE_RANGE = (1, 10)
SEED_RANGE = (0, 99_999)
REPEAT_RANGE = (0, 1_000_000)
ROUNDS = 3  # blocks with and without the profiler, alternating: the spread of three says how sure the lab is
OPTIMIZERS = ("sgd", "adam", "adamw")
IN_FEATURES = 256
CLASSES = 10
# DataLoader workers start from a clean forkserver, not a fork of the (multi-threaded) profiling worker:
# forking a process while its OpenMP threads run can deadlock the child.
WORKER_START = "forkserver"


@dataclass(frozen=True)
class ProfileOptions:
    width: int = 512
    depth: int = 2
    batch_size: int = 64
    data_cost_ms: int = 0
    num_workers: int = 0
    pin_memory: bool = False
    optimizer: str = "adam"
    threads: int = 1
    warmup: int = 2
    active: int = 5
    synchronize: bool = True
    seed: int = 0
    device: str = "cpu"
    repeat: int = 0  # which measurement of these settings: "profile again" asks for a new one

    def __post_init__(self) -> None:
        bounds.check_ints(
            self,
            {
                "width": WIDTH_RANGE,
                "depth": DEPTH_RANGE,
                "batch_size": BATCH_RANGE,
                "data_cost_ms": DATA_COST_RANGE,
                "num_workers": WORKERS_RANGE,
                "threads": THREADS_RANGE,
                "warmup": WARMUP_RANGE,
                "active": ACTIVE_RANGE,
                "seed": SEED_RANGE,
                "repeat": REPEAT_RANGE,
            },
        )
        bounds.check_choices(self, {"optimizer": OPTIMIZERS, "device": ("cpu", "cuda", "mps")})


class _SlowCollate:
    """Default collation plus a fixed sleep per batch: a stand-in for augmentation whose cost you choose."""

    def __init__(self, cost_ms: int):
        self.cost_s = cost_ms / 1000

    def __call__(self, samples):
        import torch.utils.data

        if self.cost_s:
            time.sleep(self.cost_s)
        return torch.utils.data.default_collate(samples)


def build_job(options: ProfileOptions):
    """(model, loader, optimizer, loss_fn) for the options; seeded, and sized for the steps it will run."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(options.seed)
    torch.manual_seed(options.seed)  # only ever called in the child process, which owns its global state
    layers: list[nn.Module] = []
    width_in = IN_FEATURES
    for _ in range(options.depth):
        layers += [nn.Linear(width_in, options.width), nn.ReLU()]
        width_in = options.width
    model = nn.Sequential(*layers, nn.Linear(width_in, CLASSES))
    # Every step gets a fresh batch within one epoch: a new epoch would restart the workers mid-measurement.
    steps = total_steps(options.warmup, options.active, ROUNDS, settle_steps(options.num_workers, None))
    samples = options.batch_size * steps
    dataset = torch.utils.data.TensorDataset(
        torch.randn(samples, IN_FEATURES, generator=generator),
        torch.randint(0, CLASSES, (samples,), generator=generator),
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=options.batch_size,
        shuffle=True,
        generator=generator,
        num_workers=options.num_workers,
        collate_fn=_SlowCollate(options.data_cost_ms),
        pin_memory=options.pin_memory and options.device == "cuda",
        multiprocessing_context=WORKER_START if options.num_workers else None,
    )
    optimizer = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[options.optimizer]
    return model, loader, optimizer(model.parameters(), lr=1e-3), nn.functional.cross_entropy


def profile(options: ProfileOptions, report=None) -> ProfileResult:
    """Profile the lab's job in this process; `report(done, total)` hears each step and may raise to stop.

    Sets the process-wide thread count: the page runs it in an engine worker, which resets it afterwards.
    """
    import torch

    torch.set_num_threads(options.threads)
    model, loader, optimizer, loss_fn = build_job(options)
    result = profile_training(
        model,
        loader,
        optimizer,
        loss_fn,
        device=options.device,
        warmup=options.warmup,
        active=options.active,
        rounds=ROUNDS,
        synchronize=options.synchronize,
        trace_path=new_trace_path(),
        on_step=report,
    )
    # Loader workers fork from this process's forkserver, which does its imports (explorers.forkserver) before
    # its first fork: about 1.8 s here, which the lab's first run with workers would wait for. Started now,
    # once the measurement is over, it imports while the page is read (this returns at once).
    multiprocessing.forkserver.ensure_running()
    return result


TRACE_DIR = Path(tempfile.gettempdir()) / "pytorch-explorer-traces"
KEEP_TRACES = 40  # older trace files are deleted: a shared server must not fill its disk


def new_trace_path() -> str:
    TRACE_DIR.mkdir(exist_ok=True)
    for old in sorted(TRACE_DIR.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-KEEP_TRACES]:
        old.unlink(missing_ok=True)
    return str(TRACE_DIR / f"step-trace-{time.time_ns()}.json")
