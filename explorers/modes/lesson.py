"""The Modes lab's lesson: sentences bound to the measured cells, each shown only where it applies."""

from __future__ import annotations

from explorers.modes.experiment import ValidationRun
from explorers.modes.your_model import Cell, ModeGrid
from explorers.units import format_bytes, format_number


def explain(grid: ModeGrid, validation: ValidationRun | None = None) -> list[str]:
    """The lesson, bound to this run's measurements."""
    lines = [*_failed_forwards(grid), *_train_no_grad(grid), *_eval_enable_grad(grid), *_inference_output(grid)]
    if validation is not None:
        lines += _validation(validation)
    return lines


def _label(cell: Cell) -> str:
    return f"`{cell.behaviour}()` + `{cell.grad_mode}`"


def _first_sentence(error: str) -> str:
    return error.split(". ")[0].rstrip(".")


def _failed_forwards(grid: ModeGrid) -> list[str]:
    by_error: dict[str, list[Cell]] = {}
    for cell in grid:
        if not cell.forward_works:
            by_error.setdefault(cell.forward_error, []).append(cell)
    return [
        f"{', '.join(_label(c) for c in cells)}: the forward itself failed with PyTorch's error "
        f"*{_first_sentence(error)}*."
        for error, cells in by_error.items()
    ]


def _module_effects(cell: Cell) -> list[str]:
    """What dropout and BatchNorm did in a cell that ran, in words."""
    effects = []
    if cell.dropout_active:
        fraction = cell.dropout_zeroed_fraction
        effects.append(
            f"dropout still zeroed **{fraction:.0%}** of the units it received"
            if fraction
            else "dropout still gave a different output on a second call"
        )
    if cell.bn_running_stats_changed:
        effects.append(
            f"BatchNorm's running statistics still moved (running_mean by up to "
            f"**{format_number(cell.bn_running_mean_shift)}**)"
        )
    return effects


def _train_no_grad(grid: ModeGrid) -> list[str]:
    cell, graph = grid[("train", "no_grad")], grid[("train", "enable_grad")]
    effects = _module_effects(cell)
    if not cell.forward_works or cell.builds_graph or not effects:
        return []
    same = graph.forward_works and _module_effects(graph) == effects
    return [
        "`train()` + `no_grad`: no graph (`grad_fn` is None), yet "
        + " and ".join(effects)
        + (", exactly as under `enable_grad`. The grad mode does not change what modules do." if same else ".")
    ]


def _eval_enable_grad(grid: ModeGrid) -> list[str]:
    cell = grid[("eval", "enable_grad")]
    if not cell.builds_graph:
        return []
    frozen = []
    if cell.dropout_active is False:
        frozen.append("dropout off")
    if cell.bn_uses_batch_stats is False and cell.bn_running_stats_changed is False:
        frozen.append("BatchNorm normalising with its running statistics and leaving them unchanged")
    held = (
        f", holding **{format_bytes(cell.saved_bytes)}** for backward"
        if cell.saved_bytes
        else " (it saves nothing beyond the parameters and the input, which exist anyway)"
    )
    return [
        "`eval()` + `enable_grad`: "
        + (" and ".join(frozen) + ", yet " if frozen else "")
        + f"autograd still recorded a graph{held}. `eval()` does not stop autograd: pair it with `no_grad` or "
        "`inference_mode` when you need no gradients."
    ]


def _outcome(error: str | None) -> str:
    return "worked" if error is None else f"failed with *{_first_sentence(error)}*"


def _inference_output(grid: ModeGrid) -> list[str]:
    cell, plain = grid[("eval", "inference_mode")], grid[("eval", "no_grad")]
    if not cell.is_inference_tensor:
        return []
    line = (
        f"`eval()` + `inference_mode` saved **{format_bytes(cell.saved_bytes)}** and returned an inference tensor "
        f"`out`. Used later in a graph with a tensor `s` that requires grad: `(out + s).sum().backward()` "
        f"{_outcome(cell.reuse_add_error)}; `(out * s).sum().backward()` {_outcome(cell.reuse_mul_error)}."
    )
    if cell.reuse_add_works and not cell.reuse_mul_works:
        line += (
            " The difference: mul must save `out` for backward (the gradient of `s` needs `out`), add saves nothing. "
            "Only an op that must save an inference tensor for backward fails."
        )
    if plain.reuse_mul_works and not cell.reuse_mul_works:
        line += " The same `(out * s)` worked on the `no_grad` output: an ordinary tensor."
    return [line]


def _spread(values: tuple[float, ...]) -> tuple[str, bool]:
    """The values as a percentage range, and whether they differ at that precision."""
    low, high = f"{min(values):.1%}", f"{max(values):.1%}"
    return (f"**{low}** every time", False) if low == high else (f"**{low} to {high}**", True)


def _validation(run: ValidationRun) -> list[str]:
    proper, _ = _spread(run.eval_accuracies)
    wrong, scattered = _spread(run.train_mode_accuracies)
    before, after = f"{run.proper_before:.1%}", f"{run.proper_after:.1%}"
    change = (
        f"so the proper evaluation went from **{before}** to **{after}**: a validation loop without `eval()` "
        "changes the model it measures."
        if before != after
        else f"yet the proper evaluation did not change at this precision: **{before}** before and after."
    )
    return [
        f"Validated {len(run.eval_accuracies)} times with `eval()` + `no_grad`: {proper}. In `train()` mode, "
        f"still under `no_grad`: {wrong}"
        + (", because dropout zeroes a different random set of units on each run." if scattered else "."),
        f"Those train-mode passes moved BatchNorm's running_mean by up to "
        f"**{format_number(run.running_mean_shift)}**, {change}",
    ]


def predict_evidence(cell: Cell) -> str:
    """The reveal for "did running_mean change under train() + no_grad?", from the measured cell."""
    if not cell.bn_running_stats_changed:
        return "Measured just now: BatchNorm's running statistics did not move."
    return (
        f"Measured just now: running_mean moved by up to {format_number(cell.bn_running_mean_shift)}. "
        "no_grad only stops autograd; train() still tells BatchNorm to update its statistics."
    )


def cell_evidence(cell: Cell) -> str:
    """The measurements behind one cell, as markdown."""
    if not cell.forward_works:
        return f"- the forward failed: `{cell.forward_error}`"
    lines = [
        f"- output `grad_fn`: {'set (a graph was built)' if cell.builds_graph else 'None'}; "
        f"inference tensor: {cell.is_inference_tensor}",
        f"- saved for backward: {format_bytes(cell.saved_bytes)}",
    ]
    if cell.dropout_active is not None:
        lines.append(
            f"- dropout zeroed {cell.dropout_zeroed_fraction:.1%} of the non-zero units it received; a second call "
            f"on the same input {'dropped different units' if cell.dropout_calls_differ else 'gave the same output'}"
        )
    if cell.bn_uses_batch_stats is not None:
        moved = (
            f"; running_mean moved by up to {format_number(cell.bn_running_mean_shift)}"
            if cell.bn_running_stats_changed is not None
            else ""
        )
        lines.append(
            f"- BatchNorm normalised with {'the batch' if cell.bn_uses_batch_stats else 'its running'} statistics"
            + moved
        )
    lines.append(f"- `output.sum().backward()`: {_code_outcome(cell.backward_error)}")
    lines.append(f"- later, `(out + s).sum().backward()`: {_code_outcome(cell.reuse_add_error)}")
    lines.append(f"- later, `(out * s).sum().backward()`: {_code_outcome(cell.reuse_mul_error)}")
    return "\n".join(lines)


def _code_outcome(error: str | None) -> str:
    return "worked" if error is None else f"`{error}`"
