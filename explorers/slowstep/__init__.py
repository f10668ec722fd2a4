"""Slow step: training loops each slowed by one planted performance bug; find it from profiler evidence.

- `catalogue.DRILLS`: the ten drills, each the same loop (explorers/slowstep/loops.py) with one part
  written the slow way, its right fix and the toolbox of fixes (`catalogue.FIXES`);
- `evidence(SlowStepOptions(drill, seed))`: the slow and the correct loop on one seed, timed in turn and
  profiled (explorers/slowstep/measure.py): phases, operators, one step's timeline, the Chrome trace;
- `try_fix(FixOptions(drill, seed, fix))`: the speedup of any fix, with its paired noise margin, and
  whether it changed the losses.

    from explorers import slowstep
    run = slowstep.evidence(slowstep.SlowStepOptions("float64_model", seed=1))
    run.evidence.ops[:3], run.answers
    slowstep.try_fix(slowstep.FixOptions("float64_model", 1, "float32")).verdict
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "DRILLS": "catalogue", "FIXES": "catalogue", "DEFAULT_DRILL": "catalogue",
        "SlowStepOptions": "experiment", "FixOptions": "experiment", "evidence": "experiment", "try_fix": "experiment",
        "EvidenceRun": "measure", "FixRun": "measure",
    },
)  # fmt: skip

__all__ = ["DEFAULT_DRILL", "DRILLS", "FIXES", "EvidenceRun", "FixOptions", "FixRun", "SlowStepOptions", "evidence",
           "try_fix"]  # fmt: skip
