"""The Profiler lab's lesson: what the run shows, the one change to try, and the predict-then-reveal evidence."""

from __future__ import annotations

import dataclasses

from explorers.profiler.experiment import THREADS_RANGE, WIDTH_RANGE, WORKERS_RANGE, ProfileOptions
from explorers.profiler.your_model import ProfileResult


def suggestion(options: ProfileOptions, result: ProfileResult) -> tuple[str, ProfileOptions] | None:
    """The one change the verdict points to, as a label and the options with it applied."""
    cores = THREADS_RANGE[1]
    if result.verdict == "data-bound" and options.num_workers < min(2, WORKERS_RANGE[1]):
        return "Load batches in 2 DataLoader worker processes", dataclasses.replace(options, num_workers=2)
    if result.verdict == "copy-bound" and options.device == "cuda" and not options.pin_memory:
        return "Pin host memory for faster, asynchronous copies", dataclasses.replace(options, pin_memory=True)
    if result.verdict == "optimizer-bound" and options.optimizer != "sgd":
        return "Switch to plain SGD (no per-parameter state to update)", dataclasses.replace(options, optimizer="sgd")
    if result.verdict == "compute-bound" and options.threads < cores:
        return f"Use all {cores} CPU threads for the math", dataclasses.replace(options, threads=cores)
    if result.verdict == "compute-bound" and options.width > WIDTH_RANGE[0]:
        narrower = max(options.width // 2, WIDTH_RANGE[0])
        return f"Halve the model width to {narrower}", dataclasses.replace(options, width=narrower)
    return None


def explain(options: ProfileOptions, result: ProfileResult) -> list[str]:
    phases = result.mean_phases()
    wall = result.mean_wall_ms
    covered = sum(phases.values())
    lines = [
        f"**{result.verdict}**: {result.evidence}",
        f"The five phases cover {covered:.1f} of {wall:.1f} ms per step ({covered / wall:.0%}); the grey `other` "
        "bar is the rest (loop and profiler bookkeeping).",
    ]
    if result.warmup_steps:
        first = result.warmup_steps[0].wall_ms
        lines.append(
            f"The first warm-up step took {first:.1f} ms against {wall:.1f} ms once warm: measure after "
            "warm-up, or the first step's one-off costs (allocations, worker start-up) skew the average."
        )
    if options.data_cost_ms and options.num_workers == 0:
        lines.append(
            f"With `num_workers=0` the {options.data_cost_ms} ms of per-batch data work runs on the training "
            "loop's own thread, so the step waits for it every time."
        )
    elif options.data_cost_ms and options.num_workers:
        lines.append(
            f"{options.num_workers} worker process(es) prepare batches while the model trains, so the "
            f"loop waited {phases['data']:.1f} ms per step for data instead of ~{options.data_cost_ms} ms."
        )
    lines.append(
        f"The profiler itself made these steps **{result.overhead_ratio:.2f}×** as long as the same steps "
        "without it: small, fast operators pay the most, so keep the active window short."
    )
    if result.device == "cuda" and not result.synchronized:
        lines.append(
            "Without `torch.cuda.synchronize()` GPU work is asynchronous: a phase ends when its kernels "
            "are launched, and their time is charged to whatever waits for them later."
        )
    return lines


def data_cost_evidence(slow: ProfileResult, options: ProfileOptions, current: ProfileResult) -> str:
    """What a 20 ms data cost did, measured just now against the current settings."""
    before, after = current.mean_phases(), slow.mean_phases()
    grown = max(after, key=lambda phase: after[phase] - before[phase])
    return (
        f"Measured just now: the data phase went from {before['data']:.1f} to {after['data']:.1f} ms per step; "
        f"`{grown}` grew most. Compute did not change: the step simply waits for its batch."
    )
