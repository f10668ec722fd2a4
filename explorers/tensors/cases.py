"""The inputs a puzzle is graded on: sizes drawn per seed, and the edge shapes a hand-made test forgets.

`cases(puzzle, seed)` gives five, in this order:
- drawn: sizes drawn from their ranges, 2 or more where the range allows (size 1 has its own case) and
  distinct from each other where the ranges allow, so that swapping two axes of equal size cannot pass
  by chance;
- smallest: every size at its lowest (mostly 1: size-1 dimensions broadcast where others do not);
- largest: every size at its highest;
- non-contiguous: drawn sizes, with every input of two or more dimensions made as the transpose of a
  contiguous tensor (the same values, other strides: `view` fails where `reshape` copies);
- drawn again, with other sizes and values.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from explorers.tensors.catalogue import Input, Puzzle

CASES = ("drawn", "smallest", "largest", "non-contiguous", "drawn again")
DISTINCT_TRIES = 50


@dataclass(frozen=True)
class Case:
    kind: str
    sizes: dict[str, int]
    inputs: dict[str, torch.Tensor]

    @property
    def names(self) -> dict[str, object]:
        """What an expression may name: the inputs and the sizes."""
        return {**self.inputs, **self.sizes}

    def words(self) -> str:
        shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in self.inputs.items())
        sizes = ", ".join(f"{name}={value}" for name, value in self.sizes.items())
        return f"the {self.kind} input ({'; '.join(p for p in (shapes, sizes) if p)})"


def _bound(value: int | str, sizes: dict[str, int]) -> int:
    return sizes[value] if isinstance(value, str) else value


def draw_sizes(puzzle: Puzzle, rng: random.Random, where: str = "drawn") -> dict[str, int]:
    def once() -> dict[str, int]:
        sizes: dict[str, int] = {}
        for name, (low, high) in puzzle.sizes.items():
            low, high = _bound(low, sizes), _bound(high, sizes)
            drawn = rng.randint(min(max(low, 2), high), high)
            sizes[name] = low if where == "smallest" else high if where == "largest" else drawn
        return sizes

    sizes = once()
    for _ in range(DISTINCT_TRIES if where == "drawn" else 0):
        if len(set(sizes.values())) == len(sizes):
            break
        sizes = once()
    return sizes


def shape(symbols: tuple[str, ...], sizes: dict[str, int]) -> tuple[int, ...]:
    dims = []
    for symbol in symbols:
        size = 1
        for factor in symbol.split("*"):
            size *= int(factor) if factor.isdigit() else sizes[factor]
        dims.append(size)
    return tuple(dims)


def values(spec: Input, dims: tuple[int, ...], sizes: dict[str, int], generator: torch.Generator) -> torch.Tensor:
    if spec.kind == "float":
        return torch.randn(dims, generator=generator)
    if spec.kind == "positive":
        return torch.rand(dims, generator=generator) + 0.1
    if spec.kind == "probabilities":
        return torch.softmax(torch.randn(dims, generator=generator), dim=-1)
    if spec.kind == "int":
        return torch.randint(-9, 10, dims, generator=generator)
    if spec.kind == "bool":
        return torch.rand(dims, generator=generator) < 0.5
    if spec.kind == "index":
        return torch.randint(0, sizes[spec.of], dims, generator=generator)
    lengths = torch.randint(1, sizes[spec.of] + 1, dims if spec.kind == "lengths" else dims[:-1], generator=generator)
    if spec.kind == "lengths":
        return lengths
    return torch.arange(dims[-1]) >= lengths[..., None]  # padding: True after each row's length


def make(puzzle: Puzzle, kind: str, sizes: dict[str, int], seed: int) -> Case:
    generator = torch.Generator().manual_seed(seed)
    inputs = {}
    for spec in puzzle.inputs:
        dims = shape(spec.shape, sizes)
        if kind == "non-contiguous" and len(dims) >= 2:
            swapped = (*dims[:-2], dims[-1], dims[-2])
            inputs[spec.name] = values(spec, swapped, sizes, generator).transpose(-2, -1)
        else:
            inputs[spec.name] = values(spec, dims, sizes, generator)
    return Case(kind, sizes, inputs)


def _rng(puzzle: Puzzle, seed: int, number: int) -> random.Random:
    return random.Random(f"{puzzle.name}-{seed}-{number}")


def shown_sizes(puzzle: Puzzle, seed: int) -> dict[str, int]:
    """The first input's sizes, which the task shows, drawn without making a tensor."""
    return draw_sizes(puzzle, _rng(puzzle, seed, 0))


def cases(puzzle: Puzzle, seed: int) -> list[Case]:
    made = []
    for number, kind in enumerate(CASES):
        rng = _rng(puzzle, seed, number)
        where = kind if kind in ("smallest", "largest") else "drawn"
        made.append(make(puzzle, kind, draw_sizes(puzzle, rng, where), rng.randrange(2**31)))
    return made
