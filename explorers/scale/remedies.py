"""What to change when a step does not fit: each remedy is one more measured step, ordered by the bytes it saves.

A remedy is offered only where it changes something (checkpointing that is already on is
not offered), and what it saved is the measured peak before minus the measured peak after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from explorers.scale.experiment import Plan, PlanOptions, measure_plan, with_changes
from explorers.scale.search import Question

SHARDING_WORLD = 8  # offered when the step runs on one GPU: ZeRO-3 over a node of 8


@dataclass(frozen=True)
class Remedy:
    name: str  # what changes, e.g. "activation checkpointing"
    options: PlanOptions
    plan: Plan  # the measured step with the change
    saved: int  # bytes of peak saved per GPU (negative: the change costs memory)


@dataclass(frozen=True)
class Remedies:
    before: Plan
    remedies: tuple[Remedy, ...]  # most saved first


def candidates(options: PlanOptions) -> list[tuple[str, PlanOptions]]:
    """The changes that apply to these settings."""
    found = []
    if not options.checkpointing:
        found.append(("activation checkpointing", with_changes(options, checkpointing=True)))
    if options.precision != "bf16":
        found.append(("bf16 weights, gradients and optimizer state", with_changes(options, precision="bf16")))
    if options.trainable == "all":
        found.append(
            ("train the last 2 blocks and the head", with_changes(options, trainable="last", trainable_blocks=2))
        )
    if options.world_size > 1 and options.zero_stage < 3:
        stage = options.zero_stage + 1
        found.append((f"ZeRO-{stage} over {options.world_size} GPUs", with_changes(options, zero_stage=stage)))
    elif options.world_size == 1:
        found.append(
            (f"ZeRO-3 over {SHARDING_WORLD} GPUs", with_changes(options, world_size=SHARDING_WORLD, zero_stage=3))
        )
    if options.batch_size > 1:
        half = options.batch_size // 2
        steps = options.micro_batches * 2
        name = f"micro-batch {half} with {steps} accumulation steps"
        found.append((name, with_changes(options, batch_size=half, micro_batches=steps)))
    return found


def measure(question: Question, report: Callable | None = None) -> Remedies:
    """The run engine's entry: the step as set, then each remedy measured, most saved first."""
    changes = candidates(question.plan)
    total = len(changes) + 1
    before = measure_plan(question.plan)
    if report:
        report(1, total)
    remedies = []
    for done, (name, options) in enumerate(changes, 2):
        plan = measure_plan(options)
        remedies.append(Remedy(name, options, plan, before.peak - plan.peak))
        if report:
            report(done, total)
    return Remedies(before, tuple(sorted(remedies, key=lambda r: -r.saved)))
