"""The DDP lab's experiment for the run engine, and the notebook API.

`run_ddp(options, report)` launches a real multi-process job (see `launcher`), waits for it
with progress, and returns the checked results as a `DDPRun`; the page runs it on the run
engine, so its child processes belong to an engine worker. From a notebook::

    from explorers import ddp
    run = ddp.train(world_size=2, per_rank_batch=4, dataset_size=10, steps=3, seed=0)
    run.ranks[1].indices, run.ranks[0].local_grads[0], run.single_process_max_diff
"""

from __future__ import annotations

from pathlib import Path

import explorers.ddp.launcher as launcher
import explorers.ddp.results as results
import explorers.ddp.schema as schema
from explorers.ddp.options import DDPOptions
from explorers.ddp.results import THIS_MACHINE, DDPRun


def run_ddp(options: DDPOptions, report=None) -> DDPRun:
    """One real DDP job with these options; progress through `report(done, total)`."""
    raw = launcher.run(options, report)
    return schema.from_raw(raw, THIS_MACHINE)


def train(**options) -> DDPRun:
    """`DDPOptions` by keyword (each bounded: a ValueError names the one out of range), then one run."""
    return run_ddp(DDPOptions(**options))


def load_results(path: str | Path) -> DDPRun:
    """A results file written by the worker script (for example under torchrun on a cluster), checked strictly."""
    path = Path(path)
    size = path.stat().st_size
    if size > results.MAX_FILE_BYTES:
        raise schema.ResultsFileError(
            f"the file is {size:,} bytes; a results file is at most {results.MAX_FILE_BYTES:,}"
        )
    return schema.parse(path.read_bytes(), path.name)
