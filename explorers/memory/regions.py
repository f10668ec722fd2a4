"""Where in a stack of alike blocks a training step is, so each place keeps its own peak.

The Real-scale lab measures copies of a model with one and two blocks and scales every
number linearly to the model's block count. A phase's peak is the highest of many moments,
and the highest moment in a 2-block copy need not be the highest in a 32-block model: early
in backward the head's gradients dominate, late in backward all the blocks' gradients do.
Each moment, though, is linear in the block count, and so is the highest moment *within one
place*: before the blocks, after them, or in the first or the last block of each kind
(frozen or training). A middle block k's moments are linear in k too, so their highest is in
the first or the last block. So the tracker keeps one peak per place, each is scaled on its
own, and the phase's peak is the highest of the scaled places (`explorers.scale.scaling`).

Places are set by hooks that add nothing to memory: a forward pre-hook on each block, and in
backward a tensor hook on each block's output (its backward starts) and on the first block's
input (the blocks are done). A checkpointed block's forward runs again inside backward; its
pre-hook then names the same block, which is where backward is.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.utils._pytree as pytree
from torch import nn

BEFORE, AFTER, WHOLE = "before the blocks", "after the blocks", "whole phase"
START = {"forward": (BEFORE,), "backward": (AFTER,)}  # where each phase starts; other phases are one place


def labels(kinds: Sequence[str]) -> list[tuple[str, ...]]:
    """Each block's places: "<kind> first" and/or "<kind> last" (a lone block of its kind is both)."""
    found = []
    for index, kind in enumerate(kinds):
        mine = [i for i, k in enumerate(kinds) if k == kind]
        names = [f"{kind} {end}" for end, i in (("first", mine[0]), ("last", mine[-1])) if i == index]
        found.append(tuple(names) or (f"{kind} middle",))
    return found


class BlockRegions:
    """Hooks that keep `tracker.regions` on the place the step is at."""

    def __init__(self, blocks: Sequence[nn.Module], kinds: Sequence[str]) -> None:
        self.blocks, self.places = list(blocks), labels(kinds)
        self.tracker = None
        self.handles: list = []

    def start(self, tracker, phase: str) -> None:
        """The place where `phase` begins: call just before `tracker.start(phase)`."""
        tracker.regions = START.get(phase, (WHOLE,))

    def __enter__(self) -> BlockRegions:
        for index, block in enumerate(self.blocks):
            self.handles.append(block.register_forward_pre_hook(self._entering(index), with_kwargs=True))
            self.handles.append(block.register_forward_hook(self._leaving(index)))
        return self

    def __exit__(self, *_) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.tracker = None

    def _set(self, places: tuple[str, ...]) -> None:
        if self.tracker is not None:
            self.tracker.regions = places

    def _entering(self, index: int):
        def hook(module, args, kwargs):
            self._set(self.places[index])
            if index == 0 and self._forward():  # backward leaves the blocks once the first input has its gradient
                _on_gradient(_first_grad_tensor((args, kwargs)), lambda: self._set((BEFORE,)))

        return hook

    def _leaving(self, index: int):
        def hook(module, args, output):
            if not self._forward():  # a checkpointed block's second forward, inside backward
                return
            if index == len(self.blocks) - 1:
                self._set((AFTER,))
            _on_gradient(_first_grad_tensor(output), lambda: self._set(self.places[index]))

        return hook

    def _forward(self) -> bool:
        return self.tracker is not None and self.tracker.phase == "forward"


def _first_grad_tensor(values) -> torch.Tensor | None:
    for leaf in pytree.tree_leaves(values):
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad and leaf.grad_fn is not None:
            return leaf
    return None


def _on_gradient(tensor: torch.Tensor | None, then) -> None:
    """Run `then` when backward reaches `tensor` (its gradient is computed); the gradient passes unchanged."""
    if tensor is not None:
        tensor.register_hook(lambda grad: then())
