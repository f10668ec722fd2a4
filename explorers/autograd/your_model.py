"""Your own model in the Autograd lab: `run(actions, yours=YourModel(model, x, target))` steps through its lifecycle.

The lab works on private copies (see `experiment.run`), so the caller's model and tensors stay as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class YourModel:
    """A notebook user's model and batch, for `run(..., yours=YourModel(...))`."""

    model: nn.Module
    example_input: torch.Tensor
    target: torch.Tensor | None = None
    loss_fn: Callable | None = None  # (output, target) -> loss, or (output) -> loss without a target

    @property
    def loss_expression(self) -> str:
        if self.loss_fn is None:
            return "loss = model(x).sum()" if self.target is None else "loss = mse(model(x), target)"
        name = getattr(self.loss_fn, "__name__", type(self.loss_fn).__name__)
        return f"loss = {name}(model(x){'' if self.target is None else ', target'})"


class UserModel(nn.Module):
    """A notebook user's model, made to look like a preset: its first output tensor, no named intermediates."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.inner = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[tuple[str, torch.Tensor]]]:
        return _first_tensor(self.inner(x)), []


def _first_tensor(output) -> torch.Tensor:
    values = [output] if torch.is_tensor(output) else output.values() if isinstance(output, dict) else output
    tensor = next((v for v in values if torch.is_tensor(v)), None)
    if tensor is None:
        raise ValueError(f"the model returned {type(output).__name__} with no tensor in it")
    return tensor
