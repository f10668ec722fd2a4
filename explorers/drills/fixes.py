"""Fixes, right and wrong: each an edit of a loop's source lines, found by what a line holds, not by its number.

A fix applies to every loop that has the line it edits, so the wrong fixes a drill offers are
real edits of that drill's own loop (clipping before its `optimizer.step()`, a tenth of its
learning rate), and the lab runs them as it runs the right one. `apply` returns the edited
source, or None where the fix has nothing to edit in that loop.

A fix is a *reflex* when it can be tried on any loop without reading it (a learning rate, clipping,
another optimizer, another batch size, a reseed): a drill offers its right fix among decoys of the same kind,
so the kind of an option never singles out the answer (explorers/drills/catalogue.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LR = re.compile(r"\blr=([0-9.e+-]+)")


@dataclass(frozen=True)
class Edit:
    """One change at the one line holding `anchor`: replace `old` by `new` in it, or insert/delete/move lines."""

    anchor: str
    kind: str  # "replace" | "insert_before" | "insert_after" | "delete" | "move_before" | "move_after" | "wrap"
    # the replacement (replace), the new line (insert), the anchor of the destination (move), or the block
    # statement that the anchor line and the lines indented under it move into (wrap)
    text: str = ""
    old: str = ""  # for replace: the part of the line replaced (the anchor itself when empty)


@dataclass(frozen=True)
class Fix:
    label: str  # what the user picks: the edit in words, with its code
    edits: tuple[Edit, ...] = ()
    learning_rate_factor: float | None = None  # a fix that scales the learning rate the loop sets
    reflex: bool = False  # tried on any loop without reading it; see the module docstring

    def apply(self, lines: list[str]) -> list[str] | None:
        """The loop's lines with this fix; None where the loop has no line to edit."""
        lines = list(lines)
        if self.learning_rate_factor is not None:
            found = [i for i, line in enumerate(lines) if _LR.search(line)]
            if len(found) != 1:
                return None
            i = found[0]
            value = float(_LR.search(lines[i]).group(1)) * self.learning_rate_factor
            lines[i] = _LR.sub(f"lr={value:g}", lines[i])
        for edit in self.edits:
            lines = _apply(edit, lines)
            if lines is None:
                return None
        return lines


def _find(lines: list[str], anchor: str) -> int | None:
    found = [i for i, line in enumerate(lines) if anchor in line]
    return found[0] if len(found) == 1 else None


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _apply(edit: Edit, lines: list[str]) -> list[str] | None:
    i = _find(lines, edit.anchor)
    if i is None:
        return None
    line = lines[i]
    if edit.kind == "replace":
        return [*lines[:i], line.replace(edit.old or edit.anchor, edit.text, 1), *lines[i + 1 :]]
    if edit.kind == "insert_before":
        return [*lines[:i], _indent(line) + edit.text, *lines[i:]]
    if edit.kind == "insert_after":
        return [*lines[: i + 1], _indent(line) + edit.text, *lines[i + 1 :]]
    if edit.kind == "delete":
        return [*lines[:i], *lines[i + 1 :]]
    if edit.kind == "wrap":
        end = i + 1
        while end < len(lines) and len(_indent(lines[end])) > len(_indent(line)):
            end += 1
        return [*lines[:i], _indent(line) + edit.text, *("    " + each for each in lines[i:end]), *lines[end:]]
    if edit.kind in ("move_before", "move_after"):
        rest = [*lines[:i], *lines[i + 1 :]]
        j = _find(rest, edit.text)
        if j is None:
            return None
        at = j if edit.kind == "move_before" else j + 1
        return [*rest[:at], _indent(rest[j]) + line.strip(), *rest[at:]]
    raise ValueError(f"unknown edit {edit.kind!r}")


BACKWARD = "loss.backward()"
STEP = "optimizer.step()"
ZERO_GRAD = "optimizer.zero_grad()"
BATCHES = "for x, y in loader:"
VALIDATION = "with torch.no_grad():"

FIXES: dict[str, Fix] = {
    "insert_zero_grad": Fix(
        "Call `optimizer.zero_grad()` before `loss.backward()`", (Edit(BACKWARD, "insert_before", ZERO_GRAD),)
    ),
    "move_zero_grad": Fix(
        "Move `optimizer.zero_grad()` above `loss.backward()`", (Edit(ZERO_GRAD, "move_before", BACKWARD),)
    ),
    "model_zero_grad": Fix(
        "Call `model.zero_grad()` instead of `optimizer.zero_grad()`",
        (Edit(ZERO_GRAD, "replace", "model.zero_grad()"),),
    ),
    "lower_lr": Fix("Lower the learning rate to a tenth", learning_rate_factor=0.1, reflex=True),
    "raise_lr": Fix("Raise the learning rate ten times", learning_rate_factor=10.0, reflex=True),
    "clip": Fix(
        "Clip the gradients: `clip_grad_norm_(model.parameters(), max_norm=1.0)` before the step",
        (Edit(STEP, "insert_before", "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)"),),
        reflex=True,
    ),
    "adam": Fix("Switch to Adam", (Edit("torch.optim.SGD(", "replace", "torch.optim.Adam("),), reflex=True),
    "train_each_epoch": Fix(
        "Call `model.train()` at the start of every epoch", (Edit(BATCHES, "insert_before", "model.train()"),)
    ),
    "remove_eval": Fix("Delete `model.eval()`", (Edit("model.eval()", "delete"),)),
    "eval_for_validation": Fix(
        "Call `model.eval()` before validating", (Edit(VALIDATION, "insert_before", "model.eval()"),)
    ),
    "seed_validation": Fix(
        "Seed torch before validating: `torch.manual_seed(0)`",
        (Edit(VALIDATION, "insert_before", "torch.manual_seed(0)"),),
        reflex=True,
    ),
    "item_for_logging": Fix(
        "Sum each loss's `.item()`, a float, not the loss tensor",
        (
            Edit(
                "val_loss += F.cross_entropy(model(x), y)", "replace", "val_loss += F.cross_entropy(model(x), y).item()"
            ),
        ),
    ),
    "no_grad_validation": Fix(
        "Validate under `torch.no_grad()`, and sum each loss's `.item()`",
        (
            Edit("for x, y in val_loader:", "wrap", VALIDATION),
            Edit(
                "val_loss += F.cross_entropy(model(x), y)", "replace", "val_loss += F.cross_entropy(model(x), y).item()"
            ),
        ),
    ),
    "gc_collect": Fix(
        "Collect garbage after validating: `gc.collect()`", (Edit("bench.epoch(", "insert_before", "gc.collect()"),)
    ),
    "del_loss": Fix("`del loss` after logging it", (Edit("bench.log(", "insert_after", "del loss"),)),
    "del_val_batch": Fix(
        "Free each validation batch: `del x, y` after its loss",
        (Edit("val_loss += ", "insert_after", "del x, y"),),
    ),
    "halve_batch": Fix("Halve the batch size", (Edit("batch_size=16", "replace", "batch_size=8"),), reflex=True),
    "double_batch": Fix("Double the batch size", (Edit("batch_size=16", "replace", "batch_size=32"),), reflex=True),
    "remove_softmax": Fix(
        "Pass the logits to `cross_entropy`: remove `.softmax(dim=1)`",
        (Edit("F.cross_entropy(model(x).softmax(dim=1), y)", "replace", "F.cross_entropy(model(x), y)"),),
    ),
    "squeeze_output": Fix(
        "Squeeze the output to the target's shape: `model(x).squeeze(1)`",
        (Edit("F.mse_loss(model(x), y)", "replace", "F.mse_loss(model(x).squeeze(1), y)"),),
    ),
    "mse_sum": Fix(
        'Sum the squared errors instead of averaging them: `reduction="sum"`',
        (Edit("F.mse_loss(model(x), y)", "replace", 'F.mse_loss(model(x), y, reduction="sum")'),),
    ),
    "nll_on_probabilities": Fix(
        "Use `F.nll_loss` on the softmax instead of `F.cross_entropy`",
        (Edit("F.cross_entropy(model(x).softmax(dim=1), y)", "replace", "F.nll_loss(model(x).softmax(dim=1), y)"),),
    ),
    "softmax_over_batch": Fix(
        "Take the softmax over the batch: `.softmax(dim=0)`",
        (Edit(".softmax(dim=1), y)", "replace", ".softmax(dim=0), y)"),),
    ),
    "l1_loss": Fix("Use `F.l1_loss`, which is robust to outliers", (Edit("F.mse_loss(", "replace", "F.l1_loss("),)),
    "remove_detach": Fix(
        "Remove `.detach()` from the features", (Edit("model.body(x).detach()", "replace", "model.body(x)"),)
    ),
    "requires_grad_body": Fix(
        "Make the body trainable: `model.body.requires_grad_(True)`",
        (Edit("model = bench.model()", "insert_after", "model.body.requires_grad_(True)"),),
    ),
    "requires_grad_head": Fix(
        "Make the head trainable: `model.head.requires_grad_(True)`",
        (Edit("model.head = ", "insert_after", "model.head.requires_grad_(True)"),),
    ),
    "shuffle": Fix("Shuffle the data: `shuffle=True`", (Edit("shuffle=False", "replace", "shuffle=True"),)),
    "divide_loss": Fix(
        "Divide the loss by the accumulation steps: `(loss / ACCUMULATION).backward()`",
        (Edit(BACKWARD, "replace", "(loss / ACCUMULATION).backward()"),),
    ),
    "optimizer_after_head": Fix(
        "Build the optimizer after replacing the head", (Edit("optimizer = ", "move_after", "model.head = "),)
    ),
    "clamp_out_of_place": Fix(
        "Clamp out of place: `probs = probs.clamp(min=1e-6)`",
        (Edit("probs.clamp_(min=1e-6)", "replace", "probs = probs.clamp(min=1e-6)"),),
    ),
    "cross_entropy_on_logits": Fix(
        "Compute the loss with `F.cross_entropy(model(x), y)` on the logits: no softmax, clamp or log",
        (
            Edit("probs = model(x).softmax(dim=1)", "delete"),
            Edit("probs.clamp_(min=1e-6)", "delete"),
            Edit("F.nll_loss(probs.log(), y)", "replace", "F.cross_entropy(model(x), y)"),
        ),
    ),
    "clamp_under_no_grad": Fix(
        "Clamp under `no_grad`, where autograd does not record it",
        (Edit("probs.clamp_(min=1e-6)", "replace", "with torch.no_grad(): probs.clamp_(min=1e-6)"),),
    ),
    "retain_graph": Fix(
        "`loss.backward(retain_graph=True)`", (Edit(BACKWARD, "replace", "loss.backward(retain_graph=True)"),)
    ),
    "set_epoch": Fix(
        "Call `sampler.set_epoch(epoch)` at the start of every epoch",
        (Edit(BATCHES, "insert_before", "sampler.set_epoch(epoch)"),),
    ),
    "loader_shuffle": Fix(
        "Pass `shuffle=True` to the DataLoader too",
        (Edit("sampler=sampler, drop_last=True)", "replace", "sampler=sampler, shuffle=True, drop_last=True)"),),
    ),
    "reseed_each_epoch": Fix(
        "Reseed torch every epoch: `torch.manual_seed(epoch)`",
        (Edit(BATCHES, "insert_before", "torch.manual_seed(epoch)"),),
        reflex=True,
    ),
    "keep_last_batch": Fix(
        "Keep the incomplete last batch: `drop_last=False`",
        (Edit("drop_last=True)", "replace", "drop_last=False)"),),
    ),
    "batchnorm_eval_in_training": Fix(
        "Keep BatchNorm in eval mode while training: `model.body.bn.eval()` after `model.train()`",
        (Edit("model.train()", "insert_after", "model.body.bn.eval()"),),
    ),
    "drop_last": Fix(
        "Drop the incomplete last batch: `drop_last=True`",
        (Edit("shuffle=True)", "replace", "shuffle=True, drop_last=True)"),),
    ),
}
