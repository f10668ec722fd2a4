"""The compile lab's models: one clean, and one for each way a model meets torch.compile's limits.

Each is a small stack of blocks (Linear, GELU, LayerNorm) and a head, so the presets differ only in
the line that matters, which is what `explain` and the recompile counters then find. What each
preset does to compilation is never written here: the lab reads it from dynamo's own reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

FEATURES = 32
CLASSES = 10
BLOCKS = 4
BATCH = 16

forward_calls = 0  # read by the Counting preset's forward: a global the training loop's code changes


class Blocks(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        layers = []
        for i in range(BLOCKS):
            layers += [nn.Linear(FEATURES if i == 0 else width, width), nn.GELU(), nn.LayerNorm(width)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class Branching(Blocks):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        if h.sum() > 0:  # a branch on a tensor's value
            h = h * 2
        return self.head(h)


class Logging(Blocks):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        self.last_scale = h.abs().mean().item()  # a Python float, kept for a log line
        return self.head(h)


class Counting(Blocks):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        global forward_calls
        forward_calls += 1
        return self.head(self.body(x)) / math.sqrt(forward_calls)  # a warm-up factor read from a global


@dataclass(frozen=True)
class Preset:
    label: str
    build: Callable[[int], nn.Module]
    line: str  # the line of forward that makes it differ from the clean model, as shown
    batch_sizes: Callable[[int], int]  # step -> batch size


def _fixed(step: int) -> int:
    return BATCH


def _growing(step: int) -> int:
    return BATCH + step  # a new batch size every step, as with variable-length or last-batch inputs


PRESETS: dict[str, Preset] = {
    "clean": Preset("Clean blocks", Blocks, "return self.head(self.body(x))", _fixed),
    "branch": Preset("A branch on a tensor's value", Branching, "if h.sum() > 0:", _fixed),
    "item": Preset(".item() in forward", Logging, "self.last_scale = h.abs().mean().item()", _fixed),
    "shapes": Preset("A new input shape every step", Blocks, "batch size 16, 17, 18, …", _growing),
    "global": Preset(
        "A Python counter read from a global",
        Counting,
        "return self.head(self.body(x)) / math.sqrt(forward_calls)",
        _fixed,
    ),
}
DEFAULT_PRESET = "branch"


def inputs(preset: str, step: int, seed: int = 0) -> torch.Tensor:
    """The input of one step: seeded from (seed, step), so every run of a preset sees the same batches."""
    generator = torch.Generator().manual_seed(seed * 10_007 + step)
    return torch.randn(PRESETS[preset].batch_sizes(step), FEATURES, generator=generator)


def targets(x: torch.Tensor, step: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed * 10_007 + step + 1)
    return torch.randint(0, CLASSES, (len(x),), generator=generator)
