"""One run in a fresh interpreter: `python explorers/reproducibility/child.py PARENT_PID`, a JSON request on stdin.

The request names the job's config, where to write the result (torch.save; the parent loads it
with weights_only=True) and optionally a checkpoint to write or to resume from. Progress goes to
stdout as lines starting with PREFIX ("ready" once torch is imported, "step N", "done" once the
result file is complete). Nothing from the request is executed: it is a config of bounded values,
validated by JobConfig.

The process leads its own process group (the parent starts it in a new session), so the parent
can end it with its DataLoader workers in one signal; and it ends that group itself once
PARENT_PID is no longer its parent (a killed engine worker), so a run never outlives the one who
asked for it. It runs as a script, not with -m, so that this watch starts before anything heavy is
imported: `-m` would import the package (and torch) first.
"""

from __future__ import annotations

import sys
from pathlib import Path

PREFIX = "@@repro"


def say(*words: object) -> None:
    print(PREFIX, *words, flush=True)


def main(parent: int) -> None:
    from explorers.lifeline import exit_with_parent  # light: nothing heavy is imported before the watch starts

    exit_with_parent(parent, whole_group=True)
    import json

    import torch  # the import is most of a fresh process's start: "ready" marks its end

    from explorers.reproducibility import job

    say("ready")
    request = json.loads(sys.stdin.read())
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


if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # the repository root, not this script's folder
    main(int(sys.argv[1]))
