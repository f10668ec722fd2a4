"""The Memory lab's lesson: what the measured step shows, in sentences bound to its numbers."""

from __future__ import annotations

from explorers.memory.experiment import MemoryOptions, Point
from explorers.memory.your_model import Measurement


def explain(options: MemoryOptions, result: Measurement, points: tuple[Point, ...]) -> list[str]:
    mib = lambda n: f"{n / 2**20:,.1f} MiB"  # noqa: E731
    lines = [
        f"Parameters **{mib(result.parameters)}**, gradients **{mib(result.gradients)}** and optimizer state "
        f"**{mib(result.optimizer_state)}** ({options.optimizer}) do not depend on the batch size; activations saved "
        f"for backward (**{mib(result.activations)}** at batch {options.batch_size:,}) do.",
    ]
    measured = [p for p in points if p.measured]
    if len(measured) >= 2:
        first, last = measured[0], measured[-1]
        ratio = last.result.activations / max(first.result.activations, 1)
        lines.append(
            f"From batch {first.batch:,} to {last.batch:,} ({last.batch // first.batch}x) the measured "
            f"activations grew {ratio:.1f}x: linear in the batch."
        )
    predicted = result.predicted.get("activations")
    if predicted:
        gap = result.activations / predicted
        lines.append(
            f"The closed form predicts {mib(predicted)} of activations; measured {mib(result.activations)} "
            f"({gap:.2f}x). " + _gap_reason(options, gap)
        )
    lines.append(
        f"The peak ({mib(result.peak)}) is a moment, not a sum: at that moment "
        + ", ".join(f"{k.replace('_', ' ')} {mib(v)}" for k, v in result.at_peak.items() if v)
        + "."
    )
    if options.accumulation > 1:
        lines.append(
            f"With {options.accumulation} accumulation steps only a micro-batch of {options.micro_batch:,} "
            "is alive at once: activations shrink, parameters, gradients and optimizer state do not."
        )
    return lines


def _gap_reason(options: MemoryOptions, gap: float) -> str:
    if 0.95 <= gap <= 1.05:
        return "They agree."
    if options.precision != "fp32":
        return (
            "Autocast keeps low-precision copies of the weights for backward and leaves some ops (losses, "
            "normalisations) in fp32, so the 2-byte formula is off."
        )
    if options.preset == "transformer":
        return (
            "The published formula assumes 1-byte dropout masks and Megatron's layer; PyTorch's encoder layer "
            "saves a different set of tensors (its attention is fused)."
        )
    return "The formula counts only the main saved tensors; small ones (norm statistics, the loss) make up the rest."
