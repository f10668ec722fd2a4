"""Your own model in the Autograd lab: `run(actions, yours=YourModel(model, batch, target, loss_fn))`.

The batch and the loss follow `explorers.batches`: a tensor is `model(x)`, a tuple or list
`model(*batch)`, a dict `model(**batch)` (Hugging Face style); `loss_fn(output, target)` with a
target, `loss_fn(output, batch)` without one, `loss_fn(output)` for a one-argument loss, and the
output is passed as the model returned it. Without a `loss_fn`: the output's own `loss` when it
carries one (a `ModelOutput` given labels), else `mse_loss(output, target)` with a target (an
integer target of another shape is a ValueError naming the loss to pass), else the first output
tensor summed. A forward or loss that fails is a ValueError from `run`, not a step's error.

The lab works on private copies (see `experiment.run`), so the caller's model and tensors stay as
they were; module hooks on your model fire on the copy (a UserWarning says so) and tensor hooks are
registered again on the copy's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from explorers import batches


@dataclass(frozen=True)
class YourModel:
    """A notebook user's model and batch, for `run(..., yours=YourModel(...))`."""

    model: nn.Module
    example_input: object  # a tensor, a tuple or list of arguments, or a dict of keyword arguments
    target: object = None
    loss_fn: Callable | None = None  # (output, target), (output, batch) without a target, or (output)

    @property
    def loss_expression(self) -> str:
        made = batches.describe_call(self.example_input).split(" with ")[0]
        if self.loss_fn is None:
            if self.target is None:
                return f"loss = output.loss, else the first output summed; output = {made}"
            return f"loss = output.loss, else mse(output, target); output = {made}"
        name = getattr(self.loss_fn, "__name__", type(self.loss_fn).__name__)
        second = "" if batches.takes_one_argument(self.loss_fn) else ", batch" if self.target is None else ", target"
        return f"loss = {name}(output{second}); output = {made}"


class UserModel(nn.Module):
    """A notebook user's model, called on a batch as `explorers.batches` says; its raw output, no intermediates."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.inner = model

    def forward(self, batch: object) -> tuple[object, list[tuple[str, torch.Tensor]]]:
        return batches.forward(self.inner, batch), []


def named_inputs(batch: object) -> dict[str, torch.Tensor]:
    """The batch's tensors by the name the tables show: `x`, `batch[0]`, `batch['input_ids']`."""
    if torch.is_tensor(batch):
        return {"x": batch}
    items = batch.items() if isinstance(batch, Mapping) else enumerate(batch) if isinstance(batch, tuple | list) else ()
    return {f"batch[{key!r}]": value for key, value in items if torch.is_tensor(value)}


def loss_of(yours: YourModel, output: object, batch: object, target: object) -> torch.Tensor:
    """The loss as the module docstring says; ValueError for what cannot be a loss."""
    if yours.loss_fn is not None:
        return batches.loss_of(yours.loss_fn, output, batch, target)
    own = batches.output_loss(output)
    if own is not None:
        return batches.checked_loss(own, "the output's own loss")
    first = batches.first_float(output) if target is not None else _first_tensor(output)
    if target is None:
        return first if first.dim() == 0 else first.sum()
    mismatch = batches.target_mismatch(first, target)
    if mismatch:
        raise ValueError(f"With no loss_fn and a target, the lab uses mse_loss, and {mismatch}")
    return batches.loss_of(nn.functional.mse_loss, first, batch, target)


def _first_tensor(output) -> torch.Tensor:
    tensor = next(iter(batches.tensors_in(output)), None)
    if tensor is None:
        raise ValueError(f"the model returned {type(output).__name__} with no tensor in it")
    return tensor
