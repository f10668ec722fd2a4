"""The lab's model, data and shards: the same code on every rank and in the single-process reference.

The dataset is synthetic and fixed by the seed, so every rank builds the same one and a
sample is known by its index alone: a batch's indices say exactly what it trained on. Each
rank builds its model from `seed + rank` on purpose: DistributedDataParallel broadcasts
rank 0's parameters when it wraps the model, and the run records that the replicas agree
afterwards although they did not before.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

IN_FEATURES = 8
HIDDEN = 16
LEARNING_RATE = 0.1


class IndexedData(Dataset):
    """x ~ N(0, 1) in 8 features, y = sin(x · w_true); each item also carries its own index."""

    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        w_true = torch.randn(IN_FEATURES, 1, generator=generator) / math.sqrt(IN_FEATURES)
        self.x = torch.randn(size, IN_FEATURES, generator=generator)
        self.y = torch.sin(3 * self.x @ w_true)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[index], self.y[index], index


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def flat(tensors) -> torch.Tensor:
    """Parameters (or gradients) as one 1-D float64 vector, in `named_parameters()` order."""
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


def shard_loader(dataset: IndexedData, options, rank: int, world_size: int) -> tuple[DataLoader, object]:
    """(the rank's DataLoader, its DistributedSampler or None).

    "sampler": a real DistributedSampler, which pads (drop_last=False) or trims (drop_last=True)
    so every rank gets the same number of samples. "strided": the rank's own slice
    `rank::world_size`, as a rank reading its own files gets: no padding, so shards can differ.
    """
    if options.sharding == "sampler":
        sampler = DistributedSampler(
            dataset,
            num_replicas=world_size,
            rank=rank,
            shuffle=options.shuffle,
            seed=options.seed,
            drop_last=options.drop_last,
        )
        return DataLoader(dataset, batch_size=options.per_rank_batch, sampler=sampler), sampler
    shard = Subset(dataset, range(rank, len(dataset), world_size))
    return DataLoader(shard, batch_size=options.per_rank_batch, shuffle=False), None


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)
