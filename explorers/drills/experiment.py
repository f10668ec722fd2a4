"""The Fix-the-loop lab's experiment: one drill's loop run for real, as written or with one fix applied.

`run_loop(DrillOptions(drill, seed, fix))` runs the loop under the bench (explorers/drills/harness.py)
and returns what it measured. `fix=None` is the buggy loop as shown; `fix=<the drill's right fix>`
is the correct loop; any other offered fix is that edit of the same source. The loop is seeded
from `seed` (model initialisation, the DataLoader's shuffling, dropout), so on one seed the buggy,
the fixed and the correct loop start from the same weights and see the same data.

    from explorers import drills
    pair = drills.run("forgot_zero_grad", seed=0)     # the buggy and the correct loop
    pair.buggy.recording.losses, pair.correct.recording.steps[0].grad_norms
    drills.check("forgot_zero_grad", lines=[9], fix="insert_zero_grad")
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

import explorers.drills.loops as loops
from explorers import bounds
from explorers.drills.catalogue import DEFAULT_DRILL, DRILLS, Drill
from explorers.drills.fixes import FIXES
from explorers.drills.harness import Recording, record
from explorers.drills.symptoms import Comparison, compare
from explorers.rng import isolated_rng

SEED_RANGE = (0, 9_999)
MAX_SOURCE_LINES = 40  # the longest loop's lines, with room


@dataclass(frozen=True)
class DrillOptions:
    drill: str = DEFAULT_DRILL
    seed: int = 0
    fix: str | None = None  # None: the loop as shown, with its bug

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"drill": DRILLS})
        bounds.check_ints(self, {"seed": SEED_RANGE})
        if self.fix is not None and self.fix not in DRILLS[self.drill].options:
            raise ValueError(
                f"fix must be one of {list(DRILLS[self.drill].options)} for {self.drill}, not {self.fix!r}"
            )

    @property
    def correct(self) -> DrillOptions:
        return DrillOptions(self.drill, self.seed, DRILLS[self.drill].fix)


@dataclass(frozen=True)
class LoopRun:
    options: DrillOptions
    source: str  # the source that ran: the loop as shown, or with the fix applied
    recording: Recording
    seconds: float
    torch_version: str

    @property
    def drill(self) -> Drill:
        return DRILLS[self.options.drill]


def fixed_source(drill: Drill, fix: str | None) -> str:
    """The loop's source as shown, with `fix` applied (None: with its bug)."""
    if fix is None:
        return drill.source
    return "\n".join(FIXES[fix].apply(drill.lines)) + "\n"


def compiled(drill: Drill, fix: str | None):
    """The function `fixed_source` shows, compiled in the loops module's namespace: what runs is what is shown.
    Only the catalogue's own loops and edits are compiled, never text a user typed."""
    namespace = dict(vars(loops))
    exec(compile(fixed_source(drill, fix), f"<{drill.name}, fix {fix}>", "exec"), namespace)
    return namespace["train"]


def run_loop(options: DrillOptions, report=None) -> LoopRun:
    drill = DRILLS[options.drill]
    loop = compiled(drill, options.fix)
    if report:
        report(0, 1)
    start = time.perf_counter()
    with isolated_rng(options.seed):
        recording = record(loop, options.seed)
    seconds = time.perf_counter() - start
    if report:
        report(1, 1)
    return LoopRun(options, fixed_source(drill, options.fix), recording, seconds, torch.__version__)


@dataclass(frozen=True)
class DrillRun:
    """The buggy loop and the correct loop on one seed, and how the buggy one differs."""

    buggy: LoopRun
    correct: LoopRun

    @property
    def comparison(self) -> Comparison:
        return compare(self.buggy.recording, self.correct.recording)


def run(name: str, seed: int = 0) -> DrillRun:
    """For a notebook: the drill's buggy and correct loop, run here (the lab runs them on the engine)."""
    options = DrillOptions(name, seed)
    return DrillRun(run_loop(options), run_loop(options.correct))
