"""What one DDP run is asked to do: a frozen, bounded options dataclass, shared by the launcher and every rank.

The same fields travel three ways: as the engine's cache key, as command-line flags of the
worker script (`python -m explorers.ddp.worker --per-rank-batch 4 ...`, which is also how
torchrun starts it on a cluster), and as the `options` block of the results file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from explorers import bounds

WORLD_SIZE_RANGE = (1, 4)  # processes on this machine: each imports torch (about 1.5 s) on shared cores
CLUSTER_WORLD_SIZE_RANGE = (1, 64)  # what a results file from torchrun on a real cluster may hold
PER_RANK_BATCH_RANGE = (1, 16)
DATASET_SIZE_RANGE = (4, 64)  # at least the largest local world size, so every rank owns a sample
STEPS_RANGE = (1, 12)  # optimizer steps in the whole run, at most
EPOCHS_RANGE = (1, 3)
ACCUMULATION_RANGE = (1, 4)
SEED_RANGE = (0, 99_999)
# DDP's bucket_cap_mb (in MiB, as DDP reads it). The lab's model holds 644 bytes of gradients, so only
# caps of a few hundred bytes split it: 25 is DDP's default (one bucket here).
BUCKET_CAPS_MB = (0.00005, 0.0001, 25.0)


def bucket_label(cap_mb: float) -> str:
    """0.00005 -> '0.00005', 25.0 -> '25': never '5e-05'."""
    return f"{cap_mb:.5f}".rstrip("0").rstrip(".")


SHARDINGS = ("sampler", "strided")  # DistributedSampler (even shards), or each rank's own slice (maybe uneven)
LAUNCHERS = ("processes", "torchrun")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class DDPOptions:
    world_size: int = 2
    per_rank_batch: int = 4
    dataset_size: int = 10
    steps: int = 8
    epochs: int = 2
    seed: int = 0
    shuffle: bool = False
    set_epoch: bool = True
    drop_last: bool = False
    sharding: str = "sampler"
    join: bool = True
    accumulation: int = 1
    bucket_cap_mb: float = 25.0
    launcher: str = "processes"
    device: str = "cpu"

    def __post_init__(self) -> None:
        check(self, WORLD_SIZE_RANGE)

    @property
    def effective_batch(self) -> int:
        """Samples behind one optimizer step when every rank has full batches."""
        return self.per_rank_batch * self.world_size * self.accumulation

    @property
    def uses_sampler(self) -> bool:
        return self.sharding == "sampler"


def check(options: DDPOptions, world_size_range: tuple[int, int]) -> None:
    """Every field in its range or set (ValueError naming it); the world size against `world_size_range`."""
    bounds.check_ints(
        options,
        {
            "world_size": world_size_range,
            "per_rank_batch": PER_RANK_BATCH_RANGE,
            "dataset_size": DATASET_SIZE_RANGE,
            "steps": STEPS_RANGE,
            "epochs": EPOCHS_RANGE,
            "accumulation": ACCUMULATION_RANGE,
            "seed": SEED_RANGE,
        },
    )
    for name in ("shuffle", "set_epoch", "drop_last", "join"):
        if not isinstance(getattr(options, name), bool):
            raise ValueError(f"{name} must be True or False, not {getattr(options, name)!r}")
    bounds.check_choices(
        options,
        {"bucket_cap_mb": BUCKET_CAPS_MB, "sharding": SHARDINGS, "launcher": LAUNCHERS, "device": DEVICES},
    )
    if isinstance(options.bucket_cap_mb, bool):
        raise ValueError(f"bucket_cap_mb must be one of {list(BUCKET_CAPS_MB)}, not {options.bucket_cap_mb!r}")


def as_dict(options: DDPOptions) -> dict:
    return dataclasses.asdict(options)


def from_dict(values: dict, world_size_range: tuple[int, int] = WORLD_SIZE_RANGE) -> DDPOptions:
    """Options from a plain mapping (a results file, the worker's flags): exactly the known fields, validated."""
    if not isinstance(values, dict):
        raise ValueError("options must be a mapping")
    names = {f.name for f in dataclasses.fields(DDPOptions)}
    unknown, missing = set(values) - names, names - set(values)
    if unknown or missing:
        raise ValueError(f"options: unknown {sorted(unknown)}, missing {sorted(missing)}")
    made = object.__new__(DDPOptions)  # skip __post_init__: the world size is checked against the given range
    for name in names:
        object.__setattr__(made, name, values[name])
    check(made, world_size_range)
    return made


def worker_flags(options: DDPOptions) -> list[str]:
    """The worker script's command-line flags for these options (world size and ranks come from the launcher)."""
    flags = []
    for field in dataclasses.fields(DDPOptions):
        if field.name in ("world_size", "launcher"):
            continue
        flag = "--" + field.name.replace("_", "-")
        value = getattr(options, field.name)
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + field.name.replace("_", "-"))
        else:
            flags += [flag, str(value)]
    return flags
