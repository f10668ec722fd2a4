"""The slow-step lab's experiments, as the page runs them on the engine (each in a worker process of its own).

`evidence(SlowStepOptions(drill, seed))` measures the drill's loop and its correct loop
(explorers/slowstep/measure.py); `try_fix(FixOptions(drill, seed, fix))` times the loop against one
fix. `repeat` asks for a new measurement of the same settings ("measure again"). From a notebook::

    from explorers import slowstep
    run = slowstep.evidence(slowstep.SlowStepOptions("float64_model", seed=1))
    run.evidence.phases, run.evidence.ops[:3], run.answers
    slowstep.try_fix(slowstep.FixOptions("float64_model", 1, "float32")).speedup
"""

from __future__ import annotations

import multiprocessing.forkserver
from dataclasses import dataclass

import explorers.slowstep.measure as measure
from explorers import bounds
from explorers.slowstep.catalogue import DEFAULT_DRILL, DRILLS, FIXES

SEED_RANGE = (0, 9_999)
REPEAT_RANGE = (0, 1_000_000)


@dataclass(frozen=True)
class SlowStepOptions:
    drill: str = DEFAULT_DRILL
    seed: int = 0
    repeat: int = 0

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"drill": DRILLS})
        bounds.check_ints(self, {"seed": SEED_RANGE, "repeat": REPEAT_RANGE})


@dataclass(frozen=True)
class FixOptions:
    drill: str = DEFAULT_DRILL
    seed: int = 0
    fix: str = "workers"
    repeat: int = 0

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"drill": DRILLS, "fix": FIXES})
        bounds.check_ints(self, {"seed": SEED_RANGE, "repeat": REPEAT_RANGE})


def _warm_forkserver() -> None:
    """A fix with DataLoader workers starts them from the forkserver: started now, the next run finds it warm."""
    multiprocessing.forkserver.ensure_running()


def evidence(options: SlowStepOptions, report=None) -> measure.EvidenceRun:
    run = measure.evidence_run(options.drill, options.seed, report)
    _warm_forkserver()
    return run


def try_fix(options: FixOptions, report=None) -> measure.FixRun:
    run = measure.fix_run(options.drill, options.seed, options.fix, report)
    _warm_forkserver()
    return run
