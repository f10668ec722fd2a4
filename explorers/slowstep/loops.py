"""The slow-step drills' training loop: one loop, each part of which has a fast way and a slow way to write it.

A `Loop` says how each part is written. `Trainer(loop, seed)` builds the job (data, model,
optimizer, an EMA of the weights, a checkpoint buffer) and `step()` trains one real step, each
part inside a `record_function("phase/<name>")` label, so `torch.profiler` sees the step as
an engineer labels it: data, forward, backward, optimizer, other (EMA, accuracy, logging,
checkpointing).

The data are seeded by position in the stream, not by worker: a sample's augmentation draws
from a generator seeded by (seed, position), so the batches are the same with or without
DataLoader workers, and two loops on one seed see the same data.

    from explorers.slowstep.loops import Loop, Trainer
    trainer = Trainer(Loop(dtype="float64"), seed=0)
    loss = trainer.step()
"""

from __future__ import annotations

import contextlib
import copy
import io
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from explorers.profiler.your_model import LABEL, STEP_LABEL

PHASES = ("data", "forward", "backward", "optimizer", "other")  # "other": EMA, metrics, logging, checkpoints
FEATURES = 256
WIDTH = 256
BLOCKS = 3
CLASSES = 10
BATCH = 128
BASE_ROWS = 256  # the dataset's distinct rows; the stream cycles through them in a seeded order
NOISE = 0.05  # every batch gets this much Gaussian noise
HEAVY_AUGMENT_PASSES = 16  # the heavy augmentation smooths each sample this many times
EMA_DECAY = 0.99
SAVE_EVERY = {"every step": 1, "every 500 steps": 500}
LOG_EVERY = {"every step": 1, "every 50 steps": 50}
WORKER_START = "forkserver"  # not a fork of a multi-threaded process (see explorers/profiler/experiment.py)


@dataclass(frozen=True)
class Loop:
    """How each part of the loop is written; the defaults are the fast way."""

    workers: int = 0
    augment: str = "light"  # "heavy": a costly random smoothing per sample; "heavy, batched": the same on the batch
    normalise: str = "once"  # "per sample": the dataset's mean and std recomputed in __getitem__
    rows: str = "tensor"  # "lists": the batch arrives as Python lists, turned into a tensor every step
    dtype: str = "float32"  # or "float64"
    forward: str = "batched"  # "per sample": a Python loop calls the model on one sample at a time
    anomaly: bool = False  # torch.autograd.set_detect_anomaly(True)
    checkpointing: bool = False  # activation checkpointing on every block
    ema: str = "in place"  # "deepcopy": a new copy of the model every step
    metrics: str = "vectorised"  # "per sample": a Python loop over the batch for the metrics
    save: str = "every 500 steps"  # or "every step"
    lr: float = 1e-3
    zero_grad_set_to_none: bool = False  # write set_to_none=True out (it is the default)
    cudnn_benchmark: bool = False
    log: str = "every step"  # loss.item() each step, or every 50 steps


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, checkpointing: bool) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(WIDTH, CLASSES)
        self.checkpointing = checkpointing

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.head(x)


class Stream(torch.utils.data.Dataset):
    """Position p of the stream is base row order[p % rows], normalised; "heavy" augments it here, per sample."""

    def __init__(self, loop: Loop, seed: int, length: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.rows = torch.randn(BASE_ROWS, FEATURES, generator=generator) * 2 + 1
        self.labels = (self.rows[:, :CLASSES] + 0.5 * torch.randn(BASE_ROWS, CLASSES, generator=generator)).argmax(1)
        self.order = torch.randperm(BASE_ROWS, generator=generator).tolist()
        self.loop, self.seed, self.length = loop, seed, length
        if loop.normalise == "once":
            self.mean, self.std = self.rows.mean(0), self.rows.std(0)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, position: int):
        index = self.order[position % BASE_ROWS]
        if self.loop.normalise == "once":
            row = (self.rows[index] - self.mean) / self.std
        else:
            row = (self.rows[index] - self.rows.mean(0)) / self.rows.std(0)
        if self.loop.augment == "heavy":
            row = smooth(row, kernels(self.seed, [position])[0])
        return position, row, self.labels[index]


def kernels(seed: int, positions: list[int]) -> torch.Tensor:
    """Each sample's random smoothing kernels, (samples, passes, 9), drawn from its own position's generator."""
    draws = [torch.randn(HEAVY_AUGMENT_PASSES, 9, generator=torch.Generator().manual_seed(seed * 1_000_003 + p))
             for p in positions]  # fmt: skip
    return torch.softmax(torch.stack(draws), -1)


def smooth(row: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """A costly per-sample augmentation: one sample smoothed `HEAVY_AUGMENT_PASSES` times, a conv1d each pass."""
    signal = row.view(1, 1, -1)
    for k in kernel:
        signal = 0.5 * signal + 0.5 * nn.functional.conv1d(signal, k.view(1, 1, -1), padding=4)
    return signal.view(-1)


def smooth_batch(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """The same smoothing for a whole batch: one grouped conv1d per pass, a group (and a kernel) per sample."""
    signal = x.unsqueeze(0)  # (1, samples, features): each sample a channel of its own
    for k in kernel.transpose(0, 1):  # (samples, 9) per pass
        signal = 0.5 * signal + 0.5 * nn.functional.conv1d(signal, k.unsqueeze(1), padding=4, groups=len(x))
    return signal.squeeze(0)


class Collate:
    """Stack a batch and add noise drawn from its first position's seed; "lists" hands the rows on as Python lists,
    as rows read from CSV or JSON arrive."""

    def __init__(self, seed: int, lists: bool, smooth: bool) -> None:
        self.seed, self.lists, self.smooth = seed, lists, smooth

    def __call__(self, samples):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + samples[0][0])
        x = torch.stack([s[1] for s in samples])
        if self.smooth:  # the heavy augmentation, on the whole batch at once
            x = smooth_batch(x, kernels(self.seed, [s[0] for s in samples]))
        x = x + NOISE * torch.randn(x.shape, generator=generator)
        y = torch.stack([s[2] for s in samples])
        return (x.tolist(), y.tolist()) if self.lists else (x, y)


class Trainer:
    """The job, built on one seed, and one training step at a time."""

    def __init__(self, loop: Loop, seed: int, steps: int) -> None:
        self.loop = loop
        self.dtype = getattr(torch, loop.dtype)
        torch.backends.cudnn.benchmark = loop.cudnn_benchmark
        torch.manual_seed(seed)
        self.model = Net(loop.checkpointing).to(self.dtype)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=loop.lr)
        self.ema = copy.deepcopy(self.model).requires_grad_(False)
        stream = Stream(loop, seed, (steps + 2 * max(loop.workers, 1)) * BATCH)
        self.loader = torch.utils.data.DataLoader(
            stream,
            batch_size=BATCH,
            num_workers=loop.workers,
            persistent_workers=loop.workers > 0,
            collate_fn=Collate(seed, loop.rows == "lists", loop.augment == "heavy, batched"),
            multiprocessing_context=WORKER_START if loop.workers else None,
        )
        self.batches = iter(self.loader)  # workers start here, before any step is timed
        self.checkpoints = io.BytesIO()
        self.steps = 0
        self.losses: list[float] = []  # every step's loss, for comparing results (the lab reads it)
        self.logged: list[float] = []  # what the loop's logging printed
        self.correct = 0
        self.sample_losses: list[float] = []
        self.confidence: list[float] = []  # each sample's largest class probability
        self.confusion = torch.zeros(CLASSES, CLASSES, dtype=torch.long)  # per-class accuracy, for the log

    @contextlib.contextmanager
    def phase(self, name: str, timings: dict[str, float]):
        start = time.perf_counter()
        with record_function(LABEL + name):
            yield
        timings[name] = timings.get(name, 0.0) + (time.perf_counter() - start) * 1000

    def step(self) -> dict[str, float]:
        """Train one step; returns milliseconds per phase, and "wall" for the whole step."""
        loop, timings = self.loop, {}
        start = time.perf_counter()
        with record_function(STEP_LABEL), torch.autograd.set_detect_anomaly(loop.anomaly, check_nan=loop.anomaly):
            with self.phase("data", timings):
                x, y = next(self.batches)
                if loop.rows == "lists":
                    x, y = torch.tensor(x), torch.tensor(y)
                x = x.to(self.dtype)
            with self.phase("forward", timings):
                if loop.forward == "per sample":
                    out = torch.cat([self.model(sample[None]) for sample in x])
                else:
                    out = self.model(x)
                loss = nn.functional.cross_entropy(out, y)
            with self.phase("backward", timings):
                loss.backward()
            with self.phase("optimizer", timings):
                self.optimizer.step()
                self.optimizer.zero_grad(**({"set_to_none": True} if loop.zero_grad_set_to_none else {}))
            with self.phase("other", timings):
                self._update_ema()
                self._metrics(out.detach(), y)
                self._log(loss)
                if (self.steps + 1) % SAVE_EVERY[loop.save] == 0:
                    self.checkpoints.seek(0)
                    torch.save(
                        {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, self.checkpoints
                    )
        self.steps += 1
        timings["wall"] = (time.perf_counter() - start) * 1000
        self.losses.append(float(loss.detach()))
        return timings

    def _update_ema(self) -> None:
        if self.loop.ema == "deepcopy":
            fresh = copy.deepcopy(self.model).requires_grad_(False)
            with torch.no_grad():
                for new, old in zip(fresh.parameters(), self.ema.parameters(), strict=True):
                    new.mul_(1 - EMA_DECAY).add_(old, alpha=EMA_DECAY)
            self.ema = fresh
        else:
            with torch.no_grad():
                torch._foreach_lerp_(list(self.ema.parameters()), list(self.model.parameters()), 1 - EMA_DECAY)

    def _metrics(self, out: torch.Tensor, y: torch.Tensor) -> None:
        """Accuracy, the confusion matrix, each sample's loss and confidence (to log the hardest samples)."""
        if self.loop.metrics == "per sample":
            for i in range(len(y)):
                predicted = out[i].argmax()
                self.confusion[y[i], predicted] += 1
                self.correct += int(predicted == y[i])
                self.sample_losses.append(float(nn.functional.cross_entropy(out[i : i + 1], y[i : i + 1])))
                self.confidence.append(float(out[i].softmax(-1).max()))
        else:
            predicted = out.argmax(1)
            self.confusion.index_put_((y, predicted), torch.ones_like(y), accumulate=True)
            self.correct += int((predicted == y).sum())
            self.sample_losses += nn.functional.cross_entropy(out, y, reduction="none").tolist()
            self.confidence += out.softmax(-1).amax(-1).tolist()

    def _log(self, loss: torch.Tensor) -> None:
        if self.steps % LOG_EVERY[self.loop.log] == 0:
            self.logged.append(loss.item())

    def close(self) -> None:
        """End the loader's worker processes now, not whenever the garbage collector gets to them."""
        shutdown = getattr(self.batches, "_shutdown_workers", None)
        if shutdown:
            shutdown()
