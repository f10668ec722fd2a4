"""The Modes lab's lesson: sentences bound to the measured cells, each shown only where it applies.

General statements about PyTorch live in STATEMENTS (each tried on the adversarial zoo by
tests/claims/test_modes.py); every other sentence is built from a measured field.
"""

from __future__ import annotations

import re

from explorers.modes.experiment import ValidationRun
from explorers.modes.your_model import Cell, ModeGrid, TrainingReader
from explorers.statements import Statement
from explorers.units import format_bytes, format_number

GRAD_MODES_NOTES = "https://pytorch.org/docs/stable/notes/autograd.html#grad-modes"
STATEMENTS: dict[str, Statement] = {
    "train_flag": Statement(
        text=(
            "`train()` and `eval()` set the `training` flag of the model and of every submodule, and change nothing "
            "else: no parameter or buffer moves. What a module does with the flag is up to its own `forward`."
        ),
        scope=(
            "nn.Module.train as PyTorch defines it (a module that overrides train() may do more); the flag takes "
            "effect at the next forward, in whichever modules read self.training"
        ),
        source="torch/nn/modules/module.py: Module.train",
    ),
    "no_graph": Statement(
        text=(
            "Under `no_grad`, ops record no graph: a new output gets no `grad_fn` and no tensor is saved for "
            "backward, unless code inside re-enables grad with `torch.enable_grad()`; an in-place op returns its "
            "input, which keeps the `grad_fn` it already had, and is not recorded. Under `inference_mode` "
            "nothing is recorded, even there."
        ),
        scope=(
            "for ops run while the mode is in force on this thread; enable_grad inside no_grad records again, "
            "enable_grad inside inference_mode does not; an in-place op under no_grad on a tensor already in a "
            "graph keeps that tensor's grad_fn, and backward then skips the op (torch 2.13)"
        ),
        source=GRAD_MODES_NOTES,
    ),
    "grad_mode_values": Statement(
        text=(
            "The grad mode does not change what a forward computes: from the same weights, buffers and random "
            "state, `enable_grad`, `no_grad` and `inference_mode` give the same outputs, up to float rounding where "
            "a module picks another kernel when no graph is recorded (`nn.LSTM`, `nn.MultiheadAttention`)."
        ),
        scope=(
            "for forwards that do not branch on torch.is_grad_enabled() themselves; equal within torch.allclose's "
            "default tolerance; not nn.TransformerEncoder's nested-tensor fast path (enable_nested_tensor with a "
            "padding mask, in eval() with no graph), which returns zeros at the padded positions"
        ),
        source=GRAD_MODES_NOTES,
    ),
    "inference_tensors": Statement(
        text=(
            "A tensor created inside `inference_mode` is an inference tensor (`out.is_inference()`): outside the "
            "mode it cannot be saved for backward (`out * s`, with `s` requiring grad) or updated in place "
            "(`out.add_(1)`); an op that saves none of it (`out + s`) works."
        ),
        scope=(
            "for inference tensors used directly: a view made later, such as out.detach(), escapes the in-place "
            "check (torch 2.13). What inference_mode returns without creating it (the input, or a view of a tensor "
            "made outside the mode) is an ordinary tensor, and so is every tensor made under no_grad"
        ),
        source="https://pytorch.org/docs/stable/generated/torch.autograd.grad_mode.inference_mode.html",
    ),
}
PREDICT_QUESTION = "After a forward in train() mode under no_grad, did BatchNorm's running_mean change?"


def grid_caption(definition: str) -> str:
    """The caption under the grid: how each cell was run, and what "saved" means."""
    return (
        "Each cell runs on a fresh copy of the same weights, buffers and random state; every ✓ and ✗ is "
        f"measured, not looked up. {definition}"
    )


def explain(grid: ModeGrid, validation: ValidationRun | None = None) -> list[str]:
    """The lesson, bound to this run's measurements."""
    lines = [*_failed_forwards(grid), *_failed_backwards(grid), *_readers(grid)]
    lines += [*_no_grad_graphs(grid), *_train_no_grad(grid), *_eval_enable_grad(grid), *_inference_output(grid)]
    if validation is not None:
        lines += _validation(validation)
    return lines


def _label(cell: Cell) -> str:
    return f"`{cell.behaviour}()` + `{cell.grad_mode}`"


def _first_sentence(error: str) -> str:
    """PyTorch's message up to its first full stop (some messages run on without a space: "allowed.You can")."""
    return re.split(r"\.\s|\.(?=[A-Z][a-z]+ [a-z])", error)[0].rstrip(".")


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


def _failed_backwards(grid: ModeGrid) -> list[str]:
    """Cells whose forward built a graph that backward then refused, with PyTorch's own error."""
    by_error: dict[str, list[Cell]] = {}
    for cell in grid:
        if cell.builds_graph and cell.backward_error:
            by_error.setdefault(cell.backward_error, []).append(cell)
    return [
        f"{', '.join(_label(c) for c in cells)}: the forward built a graph, and `output.sum().backward()` failed with "
        f"PyTorch's error *{_first_sentence(error)}*."
        for error, cells in by_error.items()
    ]


def _reader_effects(reader: TrainingReader) -> str:
    effects = []
    if reader.random_in_train:
        effects.append("random in `train()`")
    if reader.train_eval_differ:
        effects.append("a different output in `eval()`")
    if reader.buffers_moved:
        effects.append("moved " + ", ".join(f"`{b}`" for b in reader.buffers_moved) + " in `train()`")
    return ", ".join(effects)


def reader_words(reader: TrainingReader) -> str:
    """One measured module, e.g. "`1` (BatchNorm1d: a different output in `eval()`, moved `running_mean`)"."""
    name = f"`{reader.name}`" if reader.name else "the model itself"
    return f"{name} ({reader.kind}: {_reader_effects(reader)})"


def _readers(grid: ModeGrid) -> list[str]:
    """Which modules measured as reading `training`, replayed alone on the same input."""
    if not grid.readers:
        return [
            "Replayed alone on the input each received, no module's output or buffers changed between `train()` "
            "and `eval()`: on this model the switch changed no measured value."
        ]
    return [
        "Replayed alone on the input each received, these modules behaved differently in `train()` than in "
        "`eval()`: " + "; ".join(reader_words(r) for r in grid.readers) + "."
    ]


def dropout_share_words(cell: Cell, bold: bool = False) -> str:
    """What dropout zeroed, counted over the non-zero units it received: a unit that arrived as zero (after a
    ReLU, say) reads zero whether it was dropped or not, so it is counted apart, never as dropped."""
    mark = "**" if bold else ""
    already = cell.dropout_received - cell.dropout_nonzero
    return (
        f"zeroed {mark}{cell.dropout_zeroed:,} of the {cell.dropout_nonzero:,}{mark} non-zero units it "
        f"received ({cell.dropout_zeroed_fraction:.1%}"
        + (f"; {already:,} of its {cell.dropout_received:,} arrived as zero)" if already else ")")
    )


def _module_effects(cell: Cell, grid: ModeGrid) -> list[str]:
    """What the modes-sensitive modules did in a cell that ran, in words."""
    effects = []
    if cell.dropout_active:
        effects.append(
            "dropout still " + dropout_share_words(cell, bold=True)
            if cell.dropout_zeroed
            else "dropout still gave a different output on a second call"
        )
    elif cell.output_random:
        effects.append("a second forward under another seed still gave a different output")
    if cell.bn_running_stats_changed:
        effects.append(
            f"BatchNorm's running statistics still moved (running_mean by up to "
            f"**{format_number(cell.bn_running_mean_shift)}**)"
        )
    said = _batchnorm_buffers(grid) if cell.bn_running_stats_changed else set()
    others = [b for b in cell.buffers_moved or () if b not in said]
    if others:
        effects.append("buffers " + ", ".join(f"`{b}`" for b in others) + " still moved")
    return effects


def _batchnorm_buffers(grid: ModeGrid) -> set[str]:
    """The BatchNorm modules' buffers, which the BatchNorm sentence already covers."""
    return {f"{r.name}.{b}" if r.name else b for r in grid.readers if "BatchNorm" in r.kind for b in r.buffers_moved}


def _no_grad_graphs(grid: ModeGrid) -> list[str]:
    """Cells run under `no_grad` whose output still has a `grad_fn`: the forward recorded inside the block."""
    cells = [c for c in grid if c.grad_mode == "no_grad" and c.builds_graph]
    if not cells:
        return []
    held = {c.saved_bytes for c in cells}
    labels = ", ".join(_label(c) for c in cells)
    if len(held) == 1 and held != {0}:  # the witness: bytes packed for backward during this very forward
        return [
            f"{labels}: the output still has a `grad_fn`, and **{format_bytes(held.pop())}** was saved for backward "
            "during the forward: code inside it recorded a graph despite `no_grad`."
        ]
    return [f"{labels}: the output still has a `grad_fn`, despite `no_grad`."]


def _train_no_grad(grid: ModeGrid) -> list[str]:
    cell, graph = grid[("train", "no_grad")], grid[("train", "enable_grad")]
    effects = _module_effects(cell, grid)
    if not cell.forward_works or cell.builds_graph or not effects:
        return []
    same = graph.forward_works and _module_effects(graph, grid) == effects
    return [
        "`train()` + `no_grad`: no graph (`grad_fn` is None), yet "
        + " and ".join(effects)
        + (", exactly as under `enable_grad`." if same else ".")
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
    plain = grid[("eval", "no_grad")]
    held = ""
    if cell.saved_bytes and plain.saved_bytes == 0:  # the witness: bytes that only the grad mode made the difference
        held = f", holding **{format_bytes(cell.saved_bytes)}** for backward where `eval()` + `no_grad` held 0 B"
    without = [f"`{m}`" for m in ("no_grad", "inference_mode") if grid[("eval", m)].builds_graph is False]
    advice = f" Pair `eval()` with {' or '.join(without)} when you need no gradients." if without else ""
    return [
        "`eval()` + `enable_grad`: "
        + (" and ".join(frozen) + ", yet " if frozen else "")
        + f"autograd still recorded a graph (the output has a `grad_fn`){held}.{advice}"
    ]


def _outcome(error: str | None) -> str:
    return "worked" if error is None else f"failed with *{_first_sentence(error)}*"


def _inference_output(grid: ModeGrid) -> list[str]:
    cell, plain = grid[("eval", "inference_mode")], grid[("eval", "no_grad")]
    if not cell.forward_works:
        return []
    if not cell.is_inference_tensor:
        return [
            "`eval()` + `inference_mode` returned an ordinary tensor `out`, not an inference tensor (it was not "
            f"created inside the mode). Used later: `(out * s).sum().backward()` {_outcome(cell.reuse_mul_error)}; "
            f"`out.add_(1)` {_outcome(cell.reuse_inplace_error)}."
        ]
    line = (
        f"`eval()` + `inference_mode` saved **{format_bytes(cell.saved_bytes)}** and returned an inference tensor "
        f"`out`. Used later with a tensor `s` that requires grad: `(out + s).sum().backward()` "
        f"{_outcome(cell.reuse_add_error)}; `(out * s).sum().backward()` {_outcome(cell.reuse_mul_error)}; "
        f"`out.add_(1)` {_outcome(cell.reuse_inplace_error)}."
    )
    if cell.reuse_add_works and not cell.reuse_mul_works:
        line += (
            " The difference: mul must save `out` for backward (the gradient of `s` needs `out`), add saves nothing."
        )
    if plain.reuse_mul_works and plain.reuse_inplace_works and not (cell.reuse_mul_works or cell.reuse_inplace_works):
        line += " Both worked on the `no_grad` output, an ordinary tensor."
    if cell.reuse_add_works and not cell.reuse_mul_works and not cell.reuse_inplace_works:
        line += " " + STATEMENTS["inference_tensors"].text
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
    graph = "recorded no graph" if cell.builds_graph is False else "recorded a graph"
    shift = format_number(cell.bn_running_mean_shift)
    return f"Measured just now: in a forward that {graph}, running_mean moved by up to {shift}."


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
            f"- dropout {dropout_share_words(cell)}; a second call "
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
    if cell.output_random is not None:
        lines.append(
            "- a second forward under another seed: "
            + ("a different output" if cell.output_random else "the same output")
        )
    if cell.buffers_moved is not None:
        moved = ", ".join(f"`{b}`" for b in cell.buffers_moved) or "none"
        lines.append(f"- buffers this forward changed: {moved}")
    lines.append(f"- `output.sum().backward()`: {_code_outcome(cell.backward_error)}")
    lines.append(f"- later, `(out + s).sum().backward()`: {_code_outcome(cell.reuse_add_error)}")
    lines.append(f"- later, `(out * s).sum().backward()`: {_code_outcome(cell.reuse_mul_error)}")
    lines.append(f"- later, `out.add_(1)`: {_code_outcome(cell.reuse_inplace_error)}")
    return "\n".join(lines)


def _code_outcome(error: str | None) -> str:
    return "worked" if error is None else f"`{error}`"
