"""Fix the loop: training loops with one bug each, run for real; find the lines and the fix from the symptoms.

- `catalogue()`: the drills, each a complete loop (explorers/drills/loops.py) with the lines that
  hold its bug, the fix that removes it and the wrong fixes offered beside it;
- `run(name, seed)`: the buggy and the correct loop on one seed, measured by the bench
  (explorers/drills/harness.py): the loss per batch, ‖.grad‖ per layer at each step, memory after
  each forward, accuracy per epoch, modes, data order, PyTorch's warnings and errors; its
  `.comparison.findings` are how the buggy run differs, each with its numbers;
- `check(name, lines, fix)`: the answer scored (lines found, fix right);
- `run_loop(DrillOptions(name, seed, fix))`: one loop with any offered fix applied, as the lab runs it.

What to expect: a right fix trains bit for bit as the correct loop. `compare(fixed, correct, shown)`
judges a wrong one: unchanged (bit for bit the loop as shown), fails, or hides the symptom (it ends
no worse while a reading, a gradient at a step, a mode, memory, the data order, still differs).

    from explorers import drills
    pair = drills.run("forgot_zero_grad", seed=0)
    [drills.lesson.symptom(f) for f in pair.comparison.findings]
    drills.check("forgot_zero_grad", lines=[9], fix="insert_zero_grad").right
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "lesson": "lesson",
        "Check": "answers", "check": "answers",
        "DEFAULT_DRILL": "catalogue", "DRILLS": "catalogue", "Drill": "catalogue",
        "DrillOptions": "experiment", "DrillRun": "experiment", "LoopRun": "experiment", "run": "experiment",
        "run_loop": "experiment",
        "FIXES": "fixes", "Fix": "fixes",
        "Comparison": "symptoms", "Finding": "symptoms", "compare": "symptoms",
    },
    keep=("catalogue",),
)  # fmt: skip


def catalogue() -> dict:
    from explorers.drills.catalogue import DRILLS

    return dict(DRILLS)


__all__ = [
    "DEFAULT_DRILL",
    "DRILLS",
    "FIXES",
    "Check",
    "Comparison",
    "Drill",
    "DrillOptions",
    "DrillRun",
    "Finding",
    "Fix",
    "LoopRun",
    "catalogue",
    "check",
    "compare",
    "lesson",
    "run",
    "run_loop",
]
