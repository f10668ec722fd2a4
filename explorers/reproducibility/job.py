"""The training job one run executes: small, but with every common source of randomness in it.

- a DataLoader that shuffles (from the generator it is given, else from torch's global RNG),
  with optional worker processes (forked, the Linux default);
- augmentation in the dataset's `__getitem__`: Gaussian noise from numpy's global RNG and a
  random scale from `random` (augmentation="global"), or both from one numpy `Generator` that
  the dataset creates in `__init__` (augmentation="generator_in_init");
- random initialisation (nn.Linear's default) and dropout, from torch's global RNG;
- Adam, whose state (step count, moment estimates) a checkpoint must carry.

`run` seeds the process, sets deterministic algorithms and the thread count: process-wide
state. It is meant for a fresh interpreter (`explorers.reproducibility.child`), one run per
process, so that nothing a previous run did (or the server, or another user) reaches it.

Besides the losses, a run records what each source of randomness produced, so the lab can say
which source made two runs differ: the initial weights' digest, each step's sample indices,
each sample's augmentation draws (first noise value, scale) and the worker that made it, and
the digest of torch's RNG state each time dropout drew from it.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

import explorers.reproducibility.manifest as manifest
from explorers import bounds
from explorers.reproducibility.checkpoints import ResumableShuffle, Resume, load_checkpoint, save_checkpoint
from explorers.reproducibility.recipe import (  # noqa: F401 (the job's recipe, read here as job.BATCH etc.)
    BATCH,
    BATCHES_PER_EPOCH,
    CLASSES,
    DATA_SEED,
    DROPOUT,
    HIDDEN,
    IN_FEATURES,
    LEARNING_RATE,
    NOISE_STD,
    SCALE_RANGE,
    TRAIN_SIZE,
    VAL_SIZE,
)

THREADS = 1  # CPU reductions may group differently with other thread counts; the manifest records it

STEPS_RANGE = (2, 100)
WORKERS_RANGE = (0, 4)
SEED_RANGE = (0, 99_999)
AUGMENTATIONS = {
    "global": "numpy's global RNG and random",
    "generator_in_init": "a numpy Generator created in the dataset's __init__",
}
HASH_PROBE = "pytorch-explorer"  # hashed in each run: runs that share a string-hash seed get the same number
SOURCES = ("seed_torch", "seed_numpy", "seed_python", "seed_workers", "deterministic")
HEAVY_IMPORTS = ("torch._dynamo", "torch._inductor")  # what a fresh process may import on the job's first calls


@dataclass(frozen=True)
class JobConfig:
    """What one run does; every run of a comparison gets the same one."""

    seed_torch: bool = True
    seed_numpy: bool = True
    seed_python: bool = True
    seed_workers: bool = True  # the DataLoader gets a seeded generator and a worker_init_fn seeding numpy, random
    deterministic: bool = True  # torch.use_deterministic_algorithms
    num_workers: int = 2
    steps: int = 20
    seed: int = 0
    augmentation: str = "global"

    def __post_init__(self) -> None:
        check_flags(self, SOURCES)
        bounds.check_ints(self, {"num_workers": WORKERS_RANGE, "steps": STEPS_RANGE, "seed": SEED_RANGE})
        bounds.check_choices(self, {"augmentation": AUGMENTATIONS})

    def as_dict(self) -> dict:
        return asdict(self)


def check_flags(options: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(options, name)
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, not {value!r}")


def digest(*tensors: torch.Tensor) -> str:
    """A short fingerprint of tensors' exact bytes: equal digests mean bitwise-equal tensors."""
    h = hashlib.blake2b(digest_size=8)
    for tensor in tensors:
        h.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


# --- Data -------------------------------------------------------------------------------------------


def make_data() -> tuple[torch.Tensor, torch.Tensor, str]:
    """(train features, train targets, split hash): the same for every run, drawn from DATA_SEED."""
    generator = torch.Generator().manual_seed(DATA_SEED)
    features = torch.randn(TRAIN_SIZE + VAL_SIZE, IN_FEATURES, generator=generator)
    teacher = torch.randn(IN_FEATURES, CLASSES, generator=generator)
    targets = (features @ teacher).argmax(dim=1)
    order = torch.randperm(TRAIN_SIZE + VAL_SIZE, generator=generator)
    train, val = order[:TRAIN_SIZE], order[TRAIN_SIZE:]
    split_hash = hashlib.sha256()
    for part in (features, targets, train, val):
        split_hash.update(part.numpy().tobytes())
    return features[train], targets[train], split_hash.hexdigest()[:16]


class AugmentedDataset(torch.utils.data.Dataset):
    """Training samples with noise and a random scale added on every read."""

    def __init__(self, features: torch.Tensor, targets: torch.Tensor, augmentation: str, seed: int) -> None:
        self.features, self.targets = features, targets
        # The pattern that goes wrong with workers: one Generator, made once. Each DataLoader worker
        # gets its own copy of this object, state included, so the workers draw the same numbers.
        self.rng = np.random.default_rng(seed) if augmentation == "generator_in_init" else None

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int):
        if self.rng is None:
            noise = np.random.normal(0.0, NOISE_STD, IN_FEATURES)  # numpy's global RNG
            scale = random.uniform(*SCALE_RANGE)  # python's global RNG
        else:
            noise = self.rng.normal(0.0, NOISE_STD, IN_FEATURES)
            scale = float(self.rng.uniform(*SCALE_RANGE))
        sample = (self.features[index] + torch.from_numpy(noise).float()) * scale
        info = torch.utils.data.get_worker_info()
        draws = torch.tensor([noise[0], scale], dtype=torch.float64)
        return sample, self.targets[index], index, draws, info.id if info else -1


def seed_worker(worker_id: int) -> None:
    """PyTorch's recommended worker_init_fn: numpy and `random` seeded from the worker's torch seed."""
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


# --- Model and process state -------------------------------------------------------------------------


def make_model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Dropout(DROPOUT), nn.Linear(HIDDEN, CLASSES))


def seed_process(config: JobConfig) -> None:
    """What a training script does first: the seeds this config asks for, determinism, the thread count."""
    torch.set_num_threads(THREADS)
    if config.seed_torch:
        torch.manual_seed(config.seed)
    if config.seed_numpy:
        np.random.seed(config.seed)
    if config.seed_python:
        random.seed(config.seed)
    if config.deterministic:  # a new process starts with it off; turning it on imports torch._inductor (seconds)
        torch.use_deterministic_algorithms(True)


def _loaded(names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in sys.modules]


def global_rng_digests() -> dict[str, str]:
    """Fingerprints of this process's three global RNGs: a change means something drew from it."""
    numpy_state = np.random.get_state()
    return {
        "torch": digest(torch.get_rng_state()),
        "numpy": hashlib.blake2b(numpy_state[1].tobytes() + repr(numpy_state[2:]).encode(), digest_size=8).hexdigest(),
        "python": hashlib.blake2b(repr(random.getstate()).encode(), digest_size=8).hexdigest(),
    }


def make_loader(dataset, config: JobConfig, resumable: bool):
    """(loader, the resumable sampler or None) as the config asks."""
    workers = {}
    if config.num_workers:
        # fork (Linux's default) starts a worker in milliseconds; the process has one thread team of size 1
        workers = {"num_workers": config.num_workers, "multiprocessing_context": "fork"}
    if resumable:
        # Every new iterator draws a base seed from the loader's generator, even with num_workers=0, and a
        # resumed run starts one iterator more than the straight one. Drawn from torch's global RNG (no
        # generator), that extra draw shifts dropout's stream: checked, full-state resume then diverges.
        generator = torch.Generator().manual_seed(config.seed)
        sampler = ResumableShuffle(len(dataset), generator)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=BATCH, sampler=sampler, generator=generator, drop_last=True, **workers
        )
        return loader, sampler
    generator = torch.Generator().manual_seed(config.seed) if config.seed_workers else None
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        generator=generator,
        worker_init_fn=seed_worker if config.seed_workers else None,
        drop_last=True,
        **workers,
    )
    return loader, None


# --- The run --------------------------------------------------------------------------------------------


@dataclass
class _Trained:
    """What each step of one process's training produced, and when its first batch arrived."""

    losses: list = field(default_factory=list)
    indices: list = field(default_factory=list)
    draws: list = field(default_factory=list)
    workers: list = field(default_factory=list)
    first_batch: float | None = None
    last_step: float | None = None  # when the last step's optimizer step returned


def _train(model, optimizer, loader, sampler, config: JobConfig, position, on_step, save_at, save_path) -> _Trained:
    """Train from `position` (step, batches into the epoch) to config.steps, saving a checkpoint at `save_at`."""
    step, batches_in_epoch = position
    trained = _Trained()
    model.train()
    while step < config.steps:
        for x, y, index, drawn, worker in loader:
            if trained.first_batch is None:
                trained.first_batch = time.perf_counter()
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            trained.losses.append(loss.detach())
            trained.indices.append(index)
            trained.draws.append(drawn)
            trained.workers.append(worker)
            trained.last_step = time.perf_counter()
            step += 1
            batches_in_epoch += 1
            on_step(len(trained.losses))  # steps this process trained
            if step == save_at:
                save_checkpoint(save_path, model, optimizer, sampler, step, batches_in_epoch)
            if step >= config.steps:
                break
        else:
            batches_in_epoch = 0  # the loader ran out: the next pass is a new epoch
    return trained


def run(
    config: JobConfig,
    on_step: Callable[[int], None] = lambda step: None,
    *,
    resumable: bool = False,
    save_at: int | None = None,
    save_path: str | None = None,
    resume: Resume | None = None,
) -> dict:
    """Train config.steps steps in this process and return what each source of randomness produced.

    `resumable` uses `ResumableShuffle`; `save_at`/`save_path` writes a checkpoint once that many
    steps are done; `resume` starts from a checkpoint (loaded with weights_only=True).
    The result holds only tensors, numbers, strings and lists, so it loads with weights_only=True.
    """
    clock = time.perf_counter
    already = _loaded(HEAVY_IMPORTS)  # a template fork may hold them before the job runs: not the job's imports
    started = clock()
    seed_process(config)
    seeded = clock()
    imported_by_seeding = [name for name in _loaded(HEAVY_IMPORTS) if name not in already]
    rng_before = global_rng_digests()
    features, targets, split_hash = make_data()
    dataset = AugmentedDataset(features, targets, config.augmentation, config.seed)
    model = make_model()
    initial_weights = digest(*model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)  # may import torch._dynamo: see HEAVY_IMPORTS
    built = clock()
    imported_by_building = [name for name in _loaded(HEAVY_IMPORTS) if name not in [*already, *imported_by_seeding]]
    loader, sampler = make_loader(dataset, config, resumable)
    step = batches_in_epoch = 0
    if resume is not None:
        step, batches_in_epoch = load_checkpoint(resume, model, optimizer, sampler, BATCH)
    dropout_draws: list[str] = []
    model[2].register_forward_pre_hook(lambda module, args: dropout_draws.append(digest(torch.get_rng_state())))
    trained = _train(model, optimizer, loader, sampler, config, (step, batches_in_epoch), on_step, save_at, save_path)
    first_batch = trained.first_batch
    rng_after = global_rng_digests()
    return {
        "losses": torch.stack(trained.losses),
        "indices": torch.stack(trained.indices),
        "draws": torch.stack(trained.draws),
        "workers": torch.stack(trained.workers),
        "dropout_rng": dropout_draws,
        "initial_weights": initial_weights,
        "parameters": {name: p.detach().clone() for name, p in model.named_parameters()},
        "parameters_digest": digest(*(p for _, p in sorted(model.named_parameters()))),
        "main_drew": {name: rng_before[name] != rng_after[name] for name in rng_before},
        "split_hash": split_hash,
        "facts": manifest.process_facts(),
        "timings": {  # seconds: what a fresh process pays once, then the steps themselves
            "seeding": seeded - started,  # use_deterministic_algorithms(True) imports torch._inductor
            "building": built - seeded,  # data, model, Adam
            "first_batch": (first_batch or built) - built,  # DataLoader workers start (fork)
            # the first batch's arrival to the last step's end: not the loader's shutdown, nor the bookkeeping
            "steps": (trained.last_step or built) - (first_batch or built),
        },
        "imports": {"seeding": imported_by_seeding, "building": imported_by_building},
        "str_hash": hash(HASH_PROBE),  # Python's string-hash seed, as this process has it
    }
