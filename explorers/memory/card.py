"""The Memory lab's answer card: what fills memory in training, with this run's numbers as evidence."""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.memory.experiment import Point
from explorers.units import format_bytes

QUESTION = "A training job runs out of memory: what fills it, and what do you cut first?"


def answer_card(point: Point, doubling: str | None) -> AnswerCard:
    """`point` is the batch on screen; `doubling` the lab's measured doubling evidence, when the sweep has it."""
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "Train at the batch size the optimisation needs, within one device's memory, with headroom. Assumed: "
            "one device and a steady state; out of scope: fragmentation and other processes on the device."
        ),
        mechanism=(
            "Persistent state (parameters, gradients, optimizer state) does not depend on the batch; the tensors "
            "saved for backward grow with it and live from the forward to the backward. From step two on, the "
            "optimizer state is alive during the forward, so the peak stacks state and activations."
        ),
        evidence=_evidence(point, doubling),
        recovery=(
            "Measure first, then cut the largest part: activations → activation checkpointing, mixed precision, "
            "a smaller micro-batch with gradient accumulation; optimizer state → SGD with momentum or an 8-bit/"
            "sharded optimizer. A loop that keeps `loss` (not `loss.item()`) or evaluates without `no_grad` "
            "retains graphs: fix the loop before buying memory."
        ),
        trade_off=(
            "Checkpointing trades memory for a second forward (about a third more compute); accumulation keeps "
            "the effective batch but not BatchNorm's per-batch statistics."
        ),
        could_prove_wrong=(
            "If doubling the batch doubled the parameters, gradients or optimizer state, or left the activations "
            "unchanged, the split between persistent state and activations would be wrong."
        ),
    )


def _evidence(point: Point, doubling: str | None) -> str:
    result = point.result
    how = "measured" if point.measured else "estimated on fake tensors"
    parts = {
        "parameters": result.parameters,
        "gradients": result.gradients,
        "optimizer state": result.optimizer_state,
        "activations": result.activations,
    }
    largest = max(parts, key=parts.get)
    text = (
        f"At batch {point.batch:,} ({how}): "
        + ", ".join(f"{name} {format_bytes(size)}" for name, size in parts.items())
        + f"; the largest part is {largest}. Peak {format_bytes(result.peak)} from step two on, "
        f"{format_bytes(result.first_step.peak)} in step one."
    )
    return text + (f" {doubling}" if doubling else "")
