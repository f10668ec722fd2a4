"""The Autograd lab's lesson: sentences bound to the recorded lifecycle, and the general statements they lean on.

A sentence about this run is built from a field of the run that witnessed it (a measured number,
a value compared before and after, an error PyTorch raised). A sentence about PyTorch in general
is one of `STATEMENTS`, with when it holds and where PyTorch says so; tests/claims/test_autograd.py
tries to falsify each one on the adversarial zoo.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from explorers.autograd.experiment import ACTIONS, RATIO_LABEL, AutogradRun, Snapshot, TensorRow
from explorers.statements import Statement
from explorers.units import format_bytes

AUTOGRAD_NOTES = "https://pytorch.org/docs/stable/notes/autograd.html"
STATEMENTS: dict[str, Statement] = {
    "records": Statement(
        text=(
            "While grad mode is on, a differentiable operation that reads a tensor requiring grad returns a tensor "
            "with a `grad_fn`: the graph's node for that operation, which keeps what its backward needs."
        ),
        scope=(
            "Floating-point outputs of differentiable operations only; detach(), integer outputs (argmax) and "
            "creation ops such as zeros_like return tensors without one; inside a custom Function's forward grad "
            "mode is off, and the Function's own output gets the node."
        ),
        source=f"{AUTOGRAD_NOTES}#how-autograd-encodes-the-history",
    ),
    "accumulates": Statement(
        text="Backward adds each pass's gradient into a leaf's `.grad`; it never overwrites it.",
        scope=(
            "Leaves that require grad, with Tensor.backward() or torch.autograd.backward() (torch.autograd.grad "
            "returns gradients instead of storing them); a `.grad` of None counts as zero."
        ),
        source="https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html",
    ),
    "release": Statement(
        text=(
            "Without `retain_graph=True`, backward drops the references that the nodes it runs hold to the tensors "
            "they saved for backward (built-in saves and a custom Function's `save_for_backward`; a tensor kept as a "
            "plain `ctx` attribute stays until the node goes); a storage's memory is freed only when nothing else "
            "(a parameter, the batch, a variable you kept) still holds it."
        ),
        scope=(
            "Eager mode; tensors saved by built-in grad_fn nodes and by a custom Function's save_for_backward, "
            "not tensors stashed on ctx as plain attributes (`ctx.keep = x`), which stay until the node goes; a "
            "backward limited with `inputs=` (or `torch.autograd.grad` over part of a graph) runs only the nodes on "
            "the way to those inputs, and the others keep what they saved."
        ),
        source=f"{AUTOGRAD_NOTES}#saved-tensors",
    ),
    "second_backward": Statement(
        text=(
            'A second backward through a graph raises "Trying to backward through the graph a second time" only '
            "when one of its nodes saved tensors that the first pass released; a graph whose nodes saved nothing "
            "runs backward again without error."
        ),
        scope="When the first backward ran without retain_graph=True.",
        source="torch/csrc/autograd/saved_variable.cpp: SavedVariable::unpack (ERR_BACKWARD_TWICE)",
    ),
    "zero_grad": Statement(
        text=(
            "`zero_grad(set_to_none=True)` leaves `.grad` as None (no memory held, the next backward writes a fresh "
            "tensor); `set_to_none=False` keeps a tensor of zeros that the next backward adds into."
        ),
        scope="The parameters in the optimizer's param groups (torch.optim.Optimizer.zero_grad).",
        source="torch/optim/optimizer.py: Optimizer.zero_grad",
    ),
    "optimizer_clears_own": Statement(
        text="An optimizer's `zero_grad` clears only the parameters it was given; any other leaf keeps its `.grad`.",
        scope="torch.optim optimizers; e.g. an input x that requires grad, or a parameter left out of the groups.",
        source="torch/optim/optimizer.py: Optimizer.zero_grad",
    ),
    "version_check": Statement(
        text=(
            "Backward refuses a saved tensor whose version counter moved after it was saved: an in-place write that "
            "moves the counter, to the tensor or to a view of it (`optimizer.step()` updating a parameter included), "
            'makes it raise "modified by an inplace operation", even one that wrote the same values back. A write '
            "through `.data` moves no counter, and saved-tensor hooks such as `allow_mutation_on_saved_tensors` save "
            "a copy instead: backward then runs without this error."
        ),
        scope=(
            "Tensors saved by built-in ops and by save_for_backward, with no saved_tensors_hooks installed (a pack "
            "hook that returns a copy saves the copy, as torch.autograd.graph.allow_mutation_on_saved_tensors "
            "does); a write through `.data` does not move the counter, so backward then uses the new values without "
            "an error; `optimizer.step()` skips parameters whose `.grad` is None and writes nothing to them; a "
            "tensor stashed on ctx as a plain attribute is not checked."
        ),
        source="torch/csrc/autograd/saved_variable.cpp: SavedVariable::unpack (version check)",
    ),
    "no_grad": Statement(
        text=(
            "Under `torch.no_grad()` an operation records no graph: its result has `grad_fn=None`, and "
            "`requires_grad=False` unless it is a view of a tensor that requires grad."
        ),
        scope=(
            "While grad mode is off: a `torch.enable_grad()` nested inside the block (or a forward that calls it) "
            "records again; custom Functions included; tensors made before the block keep theirs."
        ),
        source="https://pytorch.org/docs/stable/generated/torch.no_grad.html",
    ),
    "eval_records": Statement(
        text=(
            "`model.eval()` changes how modules such as Dropout and BatchNorm compute; it does not stop autograd "
            "recording the graph."
        ),
        scope="Any nn.Module; the gradient mode (no_grad, inference_mode) is a separate switch.",
        source=f"{AUTOGRAD_NOTES}#locally-disabling-gradient-computation",
    ),
}

# Sentences of the page, here so the claims tests can read them (pages hold none).
NOTHING_YET = "Nothing has run yet. Press **forward** to build a graph."
STEP_THROUGH = "**Step through the lifecycle.** Each click replays every step from the seed, so a link reproduces it."
SCALAR_HAS_NO_LAYERS = "The scalar neuron has one input and no layers."
X_REQUIRES_GRAD_HELP = "Makes the input a leaf that receives a gradient."
SAVED_ROWS_CAPTION = (
    "Every row is a reference to a storage. Parameters, buffers, the input and the target exist without the "
    "graph, so the `activation` rows alone count as memory the graph costs."
)


def saved_rows(result: AutogradRun) -> tuple[str, tuple, str]:
    """(heading, rows, caption) of the saved-for-backward table: the graph held now, else the one no longer held."""
    if result.saved_held:
        return (
            f"Tensors the graph holds for backward now ({len(result.saved_held)})",
            result.saved_held,
            SAVED_ROWS_CAPTION,
        )
    if not result.saved_tensors:
        return "Tensors saved for backward (none)", (), "The latest loss's graph holds no saved tensor."
    step = result.saved_at_step
    return (
        f"Tensors the forward at step {step} saved ({len(result.saved_tensors)}): no longer held",
        result.saved_tensors,
        f"What the graph built at step {step} saved; the latest loss's graph holds none of them now.",
    )


ACCUMULATION_SHOWN_FROM = 1.5  # a ratio nearer 1 could be one pass; past this the sum is plain to see


def error_heading(snapshot: Snapshot) -> str:
    """What the error box above the graph says about the step that failed."""
    if snapshot.error_from_pytorch:
        return f"PyTorch raised on `{ACTIONS[snapshot.action]}`, and that is the lesson:"
    return f"The lab did not run `{ACTIONS[snapshot.action]}`:"


def explain(result: AutogradRun) -> list[str]:
    """The lesson of this run, one markdown sentence per fact, built from its live numbers."""
    steps = result.steps
    if not steps:
        return [NOTHING_YET]
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
    lines += _second_backward_lines(steps)
    lines += _accumulation_lines(final)
    lines += _zero_grad_lines(result)
    lines += _step_lines(result)
    lines += _no_grad_lines(final)
    return lines


def _second_backward_lines(steps: Sequence[Snapshot]) -> list[str]:
    """What a plain backward through a graph a plain backward had already run through did: PyTorch's answer."""
    released = False  # a plain backward ran through the latest graph
    for step in steps:
        if step.action.startswith("forward"):
            released = False
        elif step.action == "backward" and released and step.error and "second time" in step.error:
            return [
                "The second `backward()` failed with PyTorch's own error: the first one had released the tensors "
                "the graph saved. Pass `retain_graph=True` to the first if you need two passes."
            ]
        elif step.action == "backward" and released and not step.error:
            return ["Two `backward()` calls through the same graph both ran. " + STATEMENTS["second_backward"].text]
        elif step.action == "backward" and not step.error:
            released = True
    return []


def _saved_memory_lines(steps: Sequence[Snapshot]) -> list[str]:
    lines = []
    for before, step in itertools.pairwise(steps):
        if step.error or before.saved_bytes == 0:
            continue
        held = format_bytes(before.saved_bytes)
        if step.action == "backward":
            line = (
                f"Before `backward()` the graph held **{held}** in {before.saved_count} saved tensors (what its nodes "
                "saved for backward; tensors kept as plain `ctx` attributes are not counted); after it, "
                f"**{format_bytes(step.saved_bytes)}**: backward dropped the graph's references to the saved "
                "tensors counted here."
            )
            if step.saved_alive_bytes:
                line += (
                    f" **{format_bytes(step.saved_alive_bytes)}** of it ({step.saved_alive_count} storages) is still "
                    "in memory: this lab keeps the layer outputs for its table, and a storage lives while "
                    "anything holds it."
                )
            else:
                line += " No other tensor held them, so their memory was freed."
            lines.append(line)
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


def _accumulation_lines(final: Snapshot) -> list[str]:
    """The sum of several passes in one `.grad`, described by what those passes added."""
    rows = [r for r in final.tensors if r.grad_vs_one_pass is not None and r.passes >= 2]
    if not rows:
        return []
    largest = max(rows, key=lambda r: r.grad_vs_one_pass)
    if largest.grad_vs_one_pass < ACCUMULATION_SHOWN_FROM:
        return []
    return [
        f"`{largest.name}.grad` holds the sum of {_passes(largest)}: ‖`{largest.name}.grad`‖ / ‖latest pass‖ = "
        f"**{largest.grad_vs_one_pass:.3f}×**. " + STATEMENTS["accumulates"].text
    ]


def _passes(row: TensorRow) -> str:
    if row.passes_equal:
        return f"{row.passes} backward passes that each added the same gradient"
    between = f"`{'`, `'.join(row.between)}` ran between them" if row.between else "nothing ran between them"
    return (
        f"{row.passes} backward passes that added different gradients ({between}; the largest element differs "
        f"by {row.passes_max_difference:.2g} of the first pass's largest), so the ratio of norms is not a count "
        "of passes"
    )


def ratio_label() -> str:
    """The table column's name: a ratio of norms, not a count of passes."""
    return RATIO_LABEL


def _zero_grad_lines(result: AutogradRun) -> list[str]:
    lines = []
    cleared = [s for s in result.steps if s.action.startswith("zero_grad") and not s.error]
    steps = result.steps
    for index in reversed(range(len(steps))):  # the latest zero_grad that cleared every trainable parameter
        step = steps[index]
        if step not in cleared:
            continue
        wanted = "None" if step.action == "zero_grad_none" else "zeros"
        params = [r.name for r in step.tensors if r.role == "parameter" and r.requires_grad]
        if not params or any(step.row(n).grad != wanted for n in params):
            continue
        # The first later step whose snapshot shows a trainable parameter's .grad no longer as zero_grad left it.
        later = next(
            (i for i in range(index + 1, len(steps)) if any(steps[i].row(n).grad != wanted for n in params)), None
        )
        if later is None:
            lines.append(f"After `{ACTIONS[step.action]}` every trainable parameter's `.grad` is {wanted}. ")
        else:
            lines.append(
                f"At step {index + 1}, `{ACTIONS[step.action]}` left every trainable parameter's `.grad` {wanted}; "
                f"step {later + 1} (`{ACTIONS[steps[later].action]}`) changed that. "
            )
        lines[-1] += STATEMENTS["zero_grad"].text
        break
    survived = next((s for s in cleared if s.row("x").requires_grad and s.row("x").grad != "None"), None)
    if survived:
        lines.append("`x.grad` survived `zero_grad`. " + STATEMENTS["optimizer_clears_own"].text)
    return lines


def _step_lines(result: AutogradRun) -> list[str]:
    for before, step in itertools.pairwise(result.snapshots):
        if step.action != "sgd_step" or step.error:
            continue
        params = [r.name for r in step.tensors if r.role == "parameter" and r.requires_grad]
        moved = [n for n in params if step.row(n).version > before.row(n).version]
        if not moved:
            continue
        name = moved[0]
        old, new = before.row(name).version, step.row(name).version
        changed = [n for n in moved if n in step.values_changed]
        if changed:
            what = f"changed the values of {len(changed)} of {len(params)} parameters in place"
        else:
            what = "wrote every parameter in place but left the values as they were (the gradients were zero)"
        return [
            f"`optimizer.step()` {what}: `{name}`'s version counter went from {old} to {new}. "
            + STATEMENTS["version_check"].text
        ]
    return []


def _no_grad_lines(final: Snapshot) -> list[str]:
    loss = final.tensors[-1]
    if loss.role != "loss" or loss.grad_fn is not None:
        return []
    if final.forward_grad_mode is False:
        return [
            f"The latest forward ran under `no_grad`: the loss has `grad_fn=None` and "
            f"`requires_grad={loss.requires_grad}`. "
            + STATEMENTS["no_grad"].text
            + " "
            + STATEMENTS["eval_records"].text
        ]
    return [
        f"The loss ({final.loss_dtype}) has `grad_fn=None` although the forward ran with grad mode on: "
        "so backward has nowhere to start."
    ]


def two_passes_question(leaf: TensorRow) -> str:
    return f"After forward, then backward(retain_graph=True) twice, what is `{leaf.name}.grad`?"


def two_passes_reveal(leaf: TensorRow) -> str:
    return (
        f"Measured just now on this model, in a run of its own ({two_passes_steps()}): ‖{leaf.name}.grad‖ / "
        f"‖latest pass‖ = {leaf.grad_vs_one_pass:.3f}, over {leaf.passes} passes that "
        f"{'each added the same gradient' if leaf.passes_equal else 'differed'}. " + STATEMENTS["accumulates"].text
    )


TWO_PASSES = ("forward", "backward_retain", "backward_retain")  # the prediction's own run, beside the one on screen


def two_passes_steps() -> str:
    return " → ".join(ACTIONS[a] for a in TWO_PASSES)


def caption_settings(result: AutogradRun) -> dict[str, object]:
    """What a figure's caption says ran: the model, its loss and sizes (the batch that ran), and the steps."""
    options = result.options
    settings: dict[str, object] = {
        "model": options.preset,
        "loss": result.loss_expression.removeprefix("loss = "),
        "activation": options.activation,
        "seed": options.seed,
    }
    if options.preset != "scalar":
        settings |= {"depth": options.depth, "width": options.width, "batch": result.batch_size}
    settings["steps"] = trail(result)
    return settings


def trail(result: AutogradRun) -> str:
    return " → ".join(("✗ " if s.error else "") + ACTIONS[s.action] for s in result.steps) or "nothing yet"


def no_ratio_note() -> str:
    """Shown instead of the prediction when every gradient of the two-pass run measured exactly zero."""
    return (
        "On this model every gradient measured exactly zero (the activation passed no gradient for this input), "
        "so a second backward pass has nothing to add. Change the seed or the activation to see it accumulate."
    )


def two_passes_leaf(two_passes: AutogradRun) -> TensorRow | None:
    """The leaf the prediction asks about and the card quotes: the first with a measured ratio."""
    return next((r for r in two_passes.final.tensors if r.grad_vs_one_pass is not None), None)
