"""What to change when a step does not fit: each remedy is one more measured step, ordered by the bytes it saves.

A remedy is offered only where it changes something (checkpointing that is already on is
not offered), and what it saved is the peak before minus the peak after. Sharding remedies
are computed from a measured step (`Plan.sharded`), as the lab's ZeRO numbers always are.
Gradient accumulation keeps the global batch: the micro-batch is divided by its smallest
prime factor and the accumulation steps multiplied by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from explorers.scale.experiment import MICRO_BATCHES_RANGE, Plan, PlanOptions, measure_plan
from explorers.scale.search import Question

SHARDING_WORLD = 8  # offered when the step runs on one GPU: ZeRO-3 over a node of 8


@dataclass(frozen=True)
class Remedy:
    name: str  # what changes, e.g. "activation checkpointing"
    options: PlanOptions
    plan: Plan  # the measured step with the change
    saved: int  # bytes of peak saved per GPU (negative: the change costs memory)

    @property
    def computed(self) -> bool:
        """True when the peak after the change is computed from a measured step (sharding), not measured."""
        return self.plan.sharded


@dataclass(frozen=True)
class Remedies:
    before: Plan
    remedies: tuple[Remedy, ...]  # most saved first


def candidates(options: PlanOptions) -> list[tuple[str, PlanOptions]]:
    """The changes that apply to these settings."""
    found = []
    if not options.checkpointing:
        found.append(("activation checkpointing", replace(options, checkpointing=True)))
    if options.precision != "bf16":
        found.append(("bf16 weights, gradients and optimizer state", replace(options, precision="bf16")))
    if options.trainable == "all":
        found.append(("train the last 2 blocks and the head", replace(options, trainable="last", trainable_blocks=2)))
    if options.world_size > 1 and options.zero_stage < 3:
        stage = options.zero_stage + 1
        found.append((f"ZeRO-{stage} over {options.world_size} GPUs", replace(options, zero_stage=stage)))
    elif options.world_size == 1:
        found.append((f"ZeRO-3 over {SHARDING_WORLD} GPUs", replace(options, world_size=SHARDING_WORLD, zero_stage=3)))
    if options.foreach:
        found.append(("AdamW one parameter at a time (foreach=False)", replace(options, foreach=False)))
    factor = _smallest_factor(options.batch_size)
    steps = options.micro_batches * factor
    if options.batch_size > 1 and steps <= MICRO_BATCHES_RANGE[1]:
        smaller = options.batch_size // factor
        name = f"micro-batch {smaller} with {steps} accumulation steps"
        found.append((name, replace(options, batch_size=smaller, micro_batches=steps)))
    return found


def _smallest_factor(n: int) -> int:
    """The smallest prime factor of n (n itself when prime): the micro-batch divides evenly, the global batch stays."""
    return next((f for f in range(2, int(n**0.5) + 1) if n % f == 0), n)


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
