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


def _version(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # inference tensors keep no version counter
        return None


def modified_in_place(tensor: torch.Tensor, saved_version: int) -> str:
    """PyTorch's own refusal (torch/csrc/autograd/saved_variable.cpp) for a saved tensor changed in place."""
    return (
        "one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"[{tensor.type()} {list(tensor.shape)}] is at version {tensor._version}; "
        f"expected version {saved_version} instead."
    )


@contextlib.contextmanager
def counting(excluded: set[int], found: dict[int, int]) -> Iterator[None]:
    """Record in `found` (storage key -> bytes) every storage saved for backward inside the block.

    Any `saved_tensors_hooks` switch off PyTorch's check that a saved tensor was not changed in
    place before backward used it (the check lives in SavedVariable::unpack, which hooks replace).
    So these hooks replay it: each tensor's version counter is read at pack and compared at unpack,
    and a mismatch raises PyTorch's own error instead of a silently wrong gradient.

    They keep `tensor.detach()`, not the tensor: a saved output kept as itself would hold its own
    grad_fn, a reference cycle that no garbage collection frees (measured: the storage outlived the
    graph). A detached tensor shares the storage and the version counter, which is all backward reads.
    """

    def pack(tensor: torch.Tensor) -> tuple[torch.Tensor, int | None]:
        key = storage_key(tensor)
        if key not in excluded:
            found[key] = tensor.untyped_storage().nbytes()
        return tensor.detach(), _version(tensor)

    def unpack(packed: tuple[torch.Tensor, int | None]) -> torch.Tensor:
        tensor, version = packed
        if version is not None and tensor._version != version:
            raise RuntimeError(modified_in_place(tensor, version))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield
