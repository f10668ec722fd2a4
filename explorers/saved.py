"""What every lab means by "saved for backward", in one place so the labs agree.

Autograd keeps some tensors alive between forward and backward so it can compute
gradients. Of those, the model's parameters and buffers and the batch (input and
target) exist whether or not a graph is built, so they are not counted: the figure is
the memory that building the graph costs. Each storage is counted once, however many
nodes save it (a ReLU output saved by the ReLU and by the next Linear is one tensor).

Storages are keyed by their C++ identity (`_cdata`), which fake tensors have too, so
the same code measures real runs and FakeTensorMode estimates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
import torch.utils._pytree as pytree
from torch import nn

DEFINITION = (
    "Saved for backward: the tensors autograd keeps alive for backward, each storage counted once, "
    "not counting parameters, buffers or the batch (input and target), which exist without the graph."
)


def storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def excluded_storages(model: nn.Module | None, batch: Iterable[object] = ()) -> set[int]:
    """Storages of the model's parameters and buffers and of every tensor in the batch."""
    tensors = [*model.parameters(), *model.buffers()] if model is not None else []
    tensors += tensors_in(batch)
    return {storage_key(t) for t in tensors}


def tensors_in(value: object) -> list[torch.Tensor]:
    """Every tensor in a batch-like value: a tensor, or dicts, lists and tuples of them, at any depth."""
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


@contextlib.contextmanager
def counting(excluded: set[int], found: dict[int, int]) -> Iterator[None]:
    """Record in `found` (storage key -> bytes) every storage saved for backward inside the block.

    The hooks pass tensors through unchanged, so backward works exactly as without them.
    """

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = storage_key(tensor)
        if key not in excluded:
            found[key] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield
