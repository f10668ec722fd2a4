"""What a checkpoint holds so that a run resumed in a new process continues exactly where it stopped.

Weights, Adam's state, torch's / numpy's / python's global RNG states, and the sampler's place
in the epoch (`ResumableShuffle`). Everything is stored as tensors, numbers, strings and lists,
so `torch.load(weights_only=True)` reads it back: that loader rebuilds only such data and runs no
code from the file. A resuming run restores the weights and whichever other parts it keeps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Resume:
    """Load a checkpoint before training; each keep_* says which part of it to restore."""

    path: str
    keep_optimizer_state: bool = True
    keep_rng_state: bool = True
    keep_sampler_state: bool = True


class ResumableShuffle(torch.utils.data.Sampler[int]):
    """A shuffling sampler whose position a checkpoint can carry, so a resumed run sees the same batches.

    Its state is the generator's state when the epoch's permutation was drawn, plus how many
    samples of that epoch were already used. Resumed, it redraws the same permutation and skips
    those samples without reading them (reading would run, and draw for, their augmentation).
    """

    def __init__(self, size: int, generator: torch.Generator) -> None:
        self.size, self.generator = size, generator
        self.epoch_start_state = generator.get_state()
        self._resume: tuple[torch.Tensor, int] | None = None

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        skip = 0
        if self._resume is not None:
            state, skip = self._resume
            self.generator.set_state(state)
            self._resume = None
        self.epoch_start_state = self.generator.get_state()
        yield from torch.randperm(self.size, generator=self.generator).tolist()[skip:]

    def resume_at(self, epoch_start_state: torch.Tensor, samples_done: int) -> None:
        self._resume = (epoch_start_state, samples_done)


def rng_state() -> dict:
    """torch's, numpy's and python's global RNG states as tensors and numbers (weights_only can load them)."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    version, python_state, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {"version": version, "state": list(python_state), "gauss_next": gauss_next},
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["position"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    python_state = state["python"]
    random.setstate((python_state["version"], tuple(python_state["state"]), python_state["gauss_next"]))


def save_checkpoint(path, model, optimizer, sampler, step: int, batches_in_epoch: int) -> None:
    """Everything a resumed run could need; the resuming run chooses what it restores."""
    torch.save(
        {
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": rng_state(),
            "sampler": {
                "epoch_start_state": sampler.epoch_start_state if sampler else None,
                "batches_in_epoch": batches_in_epoch,
            },
        },
        path,
    )


def load_checkpoint(resume: Resume, model, optimizer, sampler, batch_size: int) -> tuple[int, int]:
    """Restore the weights, and the parts `resume` keeps; return (step, batches already used this epoch)."""
    checkpoint = torch.load(resume.path, weights_only=True)  # tensors and plain data only: no code runs
    model.load_state_dict(checkpoint["model"])
    if resume.keep_optimizer_state:
        optimizer.load_state_dict(checkpoint["optimizer"])
    if resume.keep_rng_state:
        set_rng_state(checkpoint["rng"])
    batches_in_epoch = 0
    position = checkpoint["sampler"]
    if resume.keep_sampler_state and sampler is not None and position["epoch_start_state"] is not None:
        batches_in_epoch = position["batches_in_epoch"]
        sampler.resume_at(position["epoch_start_state"], batches_in_epoch * batch_size)
    return checkpoint["step"], batches_in_epoch
