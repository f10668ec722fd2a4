"""The Autograd lab's lesson: sentences bound to the recorded lifecycle."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from explorers.autograd.experiment import AutogradRun, Snapshot
from explorers.units import format_bytes


def explain(result: AutogradRun) -> list[str]:
    """The lesson of this run, one markdown sentence per fact, built from its live numbers."""
    steps = result.steps
    if not steps:
        return [
            "Nothing has run yet. Press **forward**: autograd records every operation on tensors that "
            "require grad, back to the leaves."
        ]
    lines = []
    final = result.final
    leaves = [r for r in final.tensors if r.is_leaf and r.requires_grad]
    non_leaves = [r for r in final.tensors if not r.is_leaf]
    if non_leaves:
        example = non_leaves[0]
        lines.append(
            f"Backward accumulates into the `.grad` of the {len(leaves)} **leaves** that require grad "
            f"({', '.join(r.name for r in leaves[:3])}{', …' if len(leaves) > 3 else ''}): tensors no "
            f"operation produced. `{example.name}` was made by `{example.grad_fn}`, so it is not "
            "a leaf and its `.grad` is not kept."
        )
    lines += _saved_memory_lines(steps)
    for step in steps:
        if step.error and step.action == "backward" and "second time" in step.error:
            lines.append(
                "The second `backward()` failed with PyTorch's own error: the first one had freed the "
                "saved tensors. Pass `retain_graph=True` if you really need two passes."
            )
            break
    lines += _accumulation_lines(final)
    if any(s.action.startswith("zero_grad") for s in steps):
        lines.append(
            "`zero_grad(set_to_none=True)` leaves `.grad` as None (no memory held, the next backward "
            "writes instead of adding); `set_to_none=False` keeps a tensor of zeros."
        )
        x = final.row("x")
        if x.requires_grad and x.grad != "None":
            lines.append("`x.grad` survived `zero_grad`: the optimizer only clears the parameters it was given.")
    for before, step in itertools.pairwise(result.snapshots):
        if step.action == "sgd_step" and not step.error:
            name = next(r.name for r in step.tensors if r.role == "parameter")
            old, new = before.row(name).version, step.row(name).version
            if new > old:
                lines.append(
                    f"`optimizer.step()` updated the weights in place: `{name}`'s version counter went from {old} "
                    f"to {new}. A graph that saved a weight before the step refuses to backward through it."
                )
                break
    loss = final.tensors[-1]
    if loss.role == "loss" and loss.grad_fn is None:
        lines.append(
            "Under `no_grad` the loss has `grad_fn=None` and `requires_grad=False`: no graph, nothing saved. "
            "This is a gradient-mode switch; `model.eval()` is a different one and would not do this."
        )
    return lines


def _saved_memory_lines(steps: Sequence[Snapshot]) -> list[str]:
    lines = []
    for before, step in itertools.pairwise(steps):
        if step.error or before.saved_bytes == 0:
            continue
        held = format_bytes(before.saved_bytes)
        if step.action == "backward":
            lines.append(
                f"Before `backward()` the graph held **{held}** in {before.saved_count} saved tensors; "
                f"after it, **{format_bytes(step.saved_bytes)}**: backward frees them as it goes."
            )
            break
        if step.action == "backward_retain":
            lines.append(
                f"`retain_graph=True` kept **{format_bytes(step.saved_bytes)}** of saved tensors alive "
                "after backward: retaining the graph costs memory until the loss is dropped."
            )
            break
    if not lines and steps and steps[-1].saved_bytes:
        lines.append(
            f"The graph now holds **{format_bytes(steps[-1].saved_bytes)}** in {steps[-1].saved_count} "
            "tensors saved for backward (parameters, buffers and the batch not counted: they exist without the graph)."
        )
    return lines


ACCUMULATION_SHOWN_FROM = 1.5  # a ratio nearer 1 could be one pass; past this the sum is plain to see


def _accumulation_lines(final: Snapshot) -> list[str]:
    rows = [r for r in final.tensors if r.grad_vs_one_pass is not None]
    if not rows:
        return []
    largest = max(rows, key=lambda r: r.grad_vs_one_pass)
    if largest.grad_vs_one_pass < ACCUMULATION_SHOWN_FROM:
        return []
    return [
        f"`{largest.name}.grad` is now **{largest.grad_vs_one_pass:.3f}×** the size of what the latest backward "
        "pass added to it: backward accumulates into `.grad`, it never overwrites. That is why a training loop "
        "zeroes gradients every step."
    ]
