"""The tensor drills' experiment, as the engine runs it: one answer checked against one puzzle on one seed."""

from __future__ import annotations

from dataclasses import dataclass

import explorers.tensors.grading as grading
import explorers.tensors.language as language
from explorers import bounds
from explorers.tensors.catalogue import PUZZLES
from explorers.tensors.grading import Verdict

SEED_RANGE = (0, 9_999)


@dataclass(frozen=True)
class CheckOptions:
    puzzle: str
    expression: str
    seed: int = 0

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"puzzle": PUZZLES})
        bounds.check_ints(self, {"seed": SEED_RANGE})
        if not isinstance(self.expression, str) or len(self.expression) > language.MAX_CHARS:
            raise ValueError(f"expression must be text of at most {language.MAX_CHARS} characters")


def check_answer(options: CheckOptions, report=None) -> Verdict:
    """Parse, size-check on the meta device, run on the five inputs beside the reference, trace (in a worker,
    whose `report` of progress this run has no use for: it takes milliseconds)."""
    return grading.check(PUZZLES[options.puzzle], options.expression, options.seed)
