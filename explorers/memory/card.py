"""The Memory lab's answer card: what fills memory in training, with this run's numbers as evidence."""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.memory.experiment import Point
from explorers.memory.lesson import STATEMENTS, largest_at_peak, part_name, peak_lines
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
            f"{STATEMENTS['batch_split'].text} {STATEMENTS['optimizer_state'].text} The evidence says in which "
            "phase this run's peaks fell, and what was alive at each."
            + (f" {STATEMENTS['kernel_memory'].text}" if _allocator_saw_more(point) else "")
        ),
        evidence=_evidence(point, doubling),
        recovery=(
            "Measure first, then cut the largest part alive at the peak: activations → activation checkpointing, "
            "mixed precision, "
            "a smaller micro-batch with gradient accumulation; optimizer state → SGD with momentum or an 8-bit/"
            f"sharded optimizer. {STATEMENTS['graph_retention'].text} Fix such a loop before buying memory."
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
    micro = result.micro_batches > 1
    where = f"batch {point.batch:,} ({how})"
    if micro:  # what ran: k micro-batches of m, which is the batch asked for only when k divides it
        asked = f", the batch asked for was {point.batch:,}" if point.samples_per_step != point.batch else ""
        where = (
            f"{point.accumulation} micro-batches of {point.micro_batch:,} ({how}; {point.samples_per_step:,} samples "
            f"per optimizer step{asked})"
        )
    parts = {
        "parameters": result.parameters,
        "gradients": result.gradients,
        "optimizer state": result.optimizer_state,
        "activations per micro-batch" if micro else "activations": result.activations,
    }
    largest, size = largest_at_peak(result.steady_step)
    names = " and ".join(part_name(name, result.micro_batches) for name in largest)
    text = (
        f"At {where}: "
        + ", ".join(f"{name} {format_bytes(size)}" for name, size in parts.items())
        + (
            f". The largest parts alive at the steady peak were {names} ({format_bytes(size)} each). "
            if len(largest) > 1
            else f". The largest part alive at the steady peak was {names} ({format_bytes(size)}). "
        )
        + " ".join(line.replace("**", "") for line in peak_lines(result))
    )
    return text + (f" {doubling}" if doubling else "")


def _allocator_saw_more(point: Point) -> bool:
    """The witness for the kernel-memory statement: the allocator's record above the tensors' count."""
    record = point.result.allocator
    return record is not None and record.peak > point.result.steady_step.peak
