"""One run of the job in a process of its own, told what to do by a JSON request.

Two ways to get that process (explorers.reproducibility.fresh chooses):
- a new interpreter, `python explorers/reproducibility/child.py PARENT_PID` with the request on stdin;
- a fork of the template (explorers.reproducibility.template): an interpreter that imported what
  this script imports before "ready", and nothing else, then reseeds as a new interpreter would.

The request names the job's config, where to write the result (torch.save; the parent loads it
with weights_only=True) and optionally a checkpoint to write or to resume from. Progress goes to
stdout as lines starting with PREFIX ("ready" once torch is imported, "step N", "done" once the
result file is complete). Nothing from the request is executed: it is a config of bounded values,
validated by JobConfig.

The process leads its own process group, so the parent can end it with its DataLoader workers in
one signal; and it ends that group itself once its parent is gone (a killed engine worker), so a
run never outlives the one who asked for it. As a script it runs without -m, so that this watch
starts before anything heavy is imported: `-m` would import the package (and torch) first.
"""

from __future__ import annotations

import sys
from pathlib import Path

PREFIX = "@@repro"


def say(*words: object) -> None:
    print(PREFIX, *words, flush=True)


def reseed_from_the_os() -> None:
    """The three global RNGs as a new interpreter starts them: from the OS's entropy, not the template's draws.

    torch seeds its CPU default generator nondeterministically at import, numpy's legacy global RNG
    and `random` seed from the OS at import; a fork would copy the template's one state to every run.
    """
    import random

    import numpy as np
    import torch

    torch.seed()
    np.random.seed()
    random.seed()


def run_request(request: dict) -> None:
    """The job as the request asks, its result saved where the request says; "done" when the file is complete."""
    import torch

    import explorers.reproducibility.job as job

    config = job.JobConfig(**request["config"])
    resume = job.Resume(**request["resume"]) if request.get("resume") else None
    result = job.run(
        config,
        on_step=lambda step: say("step", step),
        resumable=request.get("resumable", False),
        save_at=request.get("save_at"),
        save_path=request.get("save_path"),
        resume=resume,
    )
    torch.save(result, request["result_path"])
    say("done")


def preload() -> None:
    """What a run imports before "ready": a new interpreter pays it per run, the template once."""
    import json  # noqa: F401

    import torch  # noqa: F401  (the import is most of a fresh process's start)

    import explorers.reproducibility.job as job  # noqa: F401


def main(parent: int) -> None:
    from explorers.lifeline import exit_with_parent  # light: nothing heavy is imported before the watch starts

    exit_with_parent(parent, whole_group=True)
    preload()
    import json

    say("ready")
    run_request(json.loads(sys.stdin.read()))


if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # the repository root, not this script's folder
    main(int(sys.argv[1]))
