"""The slow-step lab's answers: the first one per drill and seed kept as the learner's progress.

An answer is kept as a prediction record (ui/drill.py) keyed `slowstep.<link id>.<seed>`: the
link id, never the drill's name, so the record and the study plan's link back name no bug. It is
right when the evidence points at the bottleneck and the fix is the one a senior engineer would
make first. The study plan's day 7 and the notes export list it.
"""

from __future__ import annotations

from explorers.slowstep.catalogue import BY_LINK_ID, DRILLS, RECORD_PREFIX, label
from ui import drill

PAGE = "pages/18_Slow_step.py"
PREFIX = RECORD_PREFIX
GPU_PAGE = "pages/17_GPU_evidence.py"


def record_key(name: str, seed: int) -> str:
    return DRILLS[name].record_key(seed)


def record(name: str, seed: int, right: bool) -> None:
    drill.record(record_key(name, seed), f"{label(name)}, seed {seed}: where does the time go, what would you change?",
                 right)  # fmt: skip


def first_answer(name: str, seed: int):
    return drill.answers().get(record_key(name, seed))


def link(key: str) -> dict[str, str]:
    """The query that reopens a kept answer's drill on its seed."""
    _, link_id, seed = key.split(".")
    return {"drill": link_id if link_id in BY_LINK_ID else "", "seed": seed}


def scores() -> list[str]:
    return [
        f"{p.question} {'right' if p.right else 'not right'} first"
        for key, p in drill.answers().items()
        if key.startswith(PREFIX)
    ]
