"""The Modes lab's lesson: sentences bound to the measured cells."""

from __future__ import annotations

from explorers.modes.experiment import ValidationRun
from explorers.modes.your_model import Cell, ModeGrid


def explain(grid: ModeGrid, validation: ValidationRun | None = None) -> list[str]:
    """The lesson, bound to this run's measurements."""
    lines = []
    sneaky = grid[("train", "no_grad")]
    if sneaky.dropout_active or sneaky.bn_running_stats_changed:
        parts = []
        if sneaky.dropout_active:
            parts.append(f"dropout still zeroed **{sneaky.dropout_zeroed_fraction:.0%}** of its units")
        if sneaky.bn_running_stats_changed:
            parts.append(f"BatchNorm's running_mean still moved by up to **{sneaky.bn_running_mean_shift:.4f}**")
        lines.append(
            "`train()` + `no_grad`: no graph (`grad_fn` is None), yet "
            + " and ".join(parts)
            + ". The grad mode does not change what modules do."
        )
    graph = grid[("eval", "enable_grad")]
    if graph.builds_graph:
        lines.append(
            f"`eval()` + `enable_grad`: dropout off and running stats frozen, yet autograd still recorded a "
            f"graph holding **{graph.saved_bytes / 1024:.1f} KiB** for backward. `eval()` does not stop "
            "autograd: pair it with `no_grad` or `inference_mode` when you need no gradients."
        )
    inference = grid[("eval", "inference_mode")]
    if inference.reuse_error and grid[("eval", "no_grad")].reusable_in_autograd:
        lines.append(
            f"`inference_mode` saved **{inference.saved_bytes} B** and its output is an inference tensor: "
            f"using it in autograd later failed with *{inference.reuse_error.split('.')[0]}*. "
            "A `no_grad` output is an ordinary tensor and can be reused."
        )
    if validation is not None:
        spread = validation.train_mode_accuracies
        same = len(set(validation.eval_accuracies)) == 1
        lines.append(
            f"Validated {len(spread)} times with `eval()` + `no_grad`: "
            + (f"**{validation.eval_accuracies[0]:.1%}** every time. " if same else "the results varied. ")
            + f"In `train()` mode: **{min(spread):.1%} to {max(spread):.1%}**, because dropout and batch "
            "statistics apply."
        )
        lines.append(
            f"Those train-mode passes moved BatchNorm's running_mean by up to "
            f"**{validation.running_mean_shift:.3f}**, so the proper evaluation went from "
            f"**{validation.proper_before:.1%}** to **{validation.proper_after:.1%}**: a validation loop "
            "without `eval()` changes the model it measures."
        )
    return lines


def cell_evidence(cell: Cell) -> str:
    """The measurements behind one cell, as markdown."""
    lines = [
        f"- output `grad_fn`: {'set (a graph was built)' if cell.builds_graph else 'None'}; "
        f"inference tensor: {cell.is_inference_tensor}",
        f"- saved for backward: {cell.saved_bytes:,} B",
    ]
    if cell.dropout_active is not None:
        lines.append(
            f"- dropout zeroed {cell.dropout_zeroed_fraction:.1%} of the units it received; a second call "
            f"on the same input {'dropped different units' if cell.dropout_calls_differ else 'gave the same output'}"
        )
    if cell.bn_uses_batch_stats is not None:
        lines.append(
            f"- BatchNorm normalised with {'the batch' if cell.bn_uses_batch_stats else 'its running'} statistics; "
            f"running_mean moved by up to {cell.bn_running_mean_shift:.4f}"
        )
    lines.append(f"- `output.sum().backward()`: {'worked' if cell.backward_works else '`' + cell.backward_error + '`'}")
    lines.append(
        "- output used in autograd later: " + ("worked" if cell.reusable_in_autograd else "`" + cell.reuse_error + "`")
    )
    return "\n".join(lines)
