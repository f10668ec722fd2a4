"""The results file of a DDP run, and the plain data the lab reads from it.

Rank 0 of the worker script writes one JSON file (the lab's launcher, or torchrun on a
cluster); a run that failed is put together from the ranks' own records in the same
format. A file is read only through `schema.parse`, which checks it strictly and builds
the dataclasses below.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import torch

import explorers.ddp.model as lab_model
import explorers.ddp.options as lab_options
from explorers import uploads

FORMAT = "pytorch-explorer/ddp-results"
VERSION = 1
MAX_FILE_BYTES = 8 * 2**20
MAX_UPLOAD_MB = uploads.upload_megabytes(MAX_FILE_BYTES)  # the page's uploader refuses larger files
MAX_JSON_DEPTH = uploads.MAX_DEPTH  # a results file nests 6 levels; an upload nested deeper is refused unparsed
MAX_ERROR_CHARS = 400
MAX_COLLECTIVES_PER_RANK = 1_000
OUTCOMES = ("finished", "failed", "timed_out")
RANK_OUTCOMES = ("running", "finished", "failed", "killed")
PHASES = ("starting", "init", "training", "gathering", "done")
TIME_RANGE = (0.0, 1e11)  # seconds since the epoch
SIGNIFICANT_DIGITS = 9  # enough to restore a float32 exactly
THIS_MACHINE = "this machine"  # a run's source when the lab launched it here
FORKSERVER_WARM, FORKSERVER_COLD, TORCHRUN = "forkserver, warm", "forkserver, started for this run", "torchrun"
FORKSERVER_SHARED = "forkserver, started elsewhere"  # by another user of multiprocessing, without DDP's modules
LAUNCH_METHODS = (FORKSERVER_WARM, FORKSERVER_COLD, FORKSERVER_SHARED, TORCHRUN)
HOST_PATTERN = r"[A-Za-z0-9._-]{1,64}"  # a host name: shown in the diagram and the lesson, so nothing else gets in
TORCH_PATTERN = r"[A-Za-z0-9.+_-]{1,40}"


def compact(values) -> list[float]:
    """Numbers for the file: float32 precision, written short."""
    return [float(f"{float(v):.{SIGNIFICANT_DIGITS}g}") for v in values]


def host_name() -> str:
    """This machine's name as the file records it (HOST_PATTERN)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:64] or "unknown"


def rank_record(rank: int, *, local_rank: int, node: int, pid: int, launched_at: float, **known) -> dict:
    """One rank's record in the file's format: what is `known` (outcome, phase, error, recorded), the rest empty.

    A rank starts its own record (outcome "running"); the launcher writes one for a rank that left none.
    """
    record = {
        "rank": rank,
        "local_rank": local_rank,
        "node": node,
        "pid": pid,
        "host": host_name(),
        "outcome": "running",
        "phase": "starting",
        "error": None,
        "launched_at": launched_at,
        "recorded": True,
        "ready_at": None,
        "init_done_at": None,
        "finished_at": None,
        "param_sum_before_ddp": None,
        "param_sum_after_ddp": None,
        "final_param_sum": None,
        "sampler_orders": [],
        "micro_steps": [],
        "steps": [],
        "collectives": [],
    }
    unknown = set(known) - set(record)
    if unknown:
        raise ValueError(f"not fields of a rank record: {sorted(unknown)}")
    return record | known


def write_json(path: Path, data: dict) -> None:
    """Written whole or not at all: a reader never sees half a file."""
    temporary = Path(f"{path}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, allow_nan=False))
    os.replace(temporary, path)


def parameter_layout() -> list[dict]:
    model = lab_model.build_model(0)
    return [{"name": name, "numel": p.numel()} for name, p in model.named_parameters()]


def assemble(options, records: list[dict], single: dict | None, outcome: str, launch=None, note=None) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "outcome": outcome,
        "note": note,
        "options": lab_options.as_dict(options),
        "world_size": options.world_size,
        "backend": "nccl" if options.device == "cuda" else "gloo",
        "launcher": options.launcher,
        "torch": torch.__version__,
        "parameters": parameter_layout(),
        "launch": launch or {"started_at": None, "ended_at": None, "port": None, "method": None},
        "ranks": sorted(records, key=lambda r: r["rank"]),
        "single_process": single,
    }


# --- What the lab reads ------------------------------------------------------------------------


@dataclass(frozen=True)
class MicroStep:
    epoch: int
    step: int  # the optimizer step this micro-batch belongs to
    micro: int  # its place among the step's accumulated micro-batches
    synced: bool  # whether its backward all-reduced (the last micro-batch of a step)
    indices: tuple[int, ...]
    loss: float
    data: tuple[float, float]  # wall-clock start and end of each phase
    forward: tuple[float, float]
    backward: tuple[float, float]  # includes the all-reduce when synced
    optimizer: tuple[float, float] | None
    # When the last parameter's gradient was accumulated in this backward (a post-accumulate-grad hook);
    # None in files written before it was recorded. Against the all-reduce starts, it witnesses overlap.
    last_gradient_at: float | None = None


@dataclass(frozen=True)
class StepGradients:
    epoch: int
    step: int
    local: tuple[float, ...]  # this rank's gradient before the all-reduce, every parameter flattened
    synced: tuple[float, ...]  # after it
    buckets: int  # all-reduce calls DDP made for this step


@dataclass(frozen=True)
class Collective:
    epoch: int
    step: int
    shadow: bool  # a joined rank's all-reduce of zeros, matching the others' real one
    bucket: int
    bytes: int
    start: float
    end: float | None
    micro_batch: int | None = None  # the rank's micro-batch (counted from 0 over the run) whose backward made it


@dataclass(frozen=True)
class RankResult:
    rank: int
    local_rank: int
    node: int  # torchrun's node rank (GROUP_RANK); 0 on one machine
    pid: int
    host: str
    outcome: str
    phase: str
    error: str | None
    launched_at: float
    recorded: bool  # False when the rank left no record: its micro-batches and calls are unknown, not zero
    ready_at: float | None
    init_done_at: float | None
    finished_at: float | None
    param_sum_before_ddp: float | None
    param_sum_after_ddp: float | None
    final_param_sum: float | None
    sampler_orders: tuple[tuple[int, ...], ...]  # per epoch, the indices in the order this rank's sampler gave them
    micro_steps: tuple[MicroStep, ...]
    steps: tuple[StepGradients, ...]
    collectives: tuple[Collective, ...]

    @property
    def indices(self) -> list[list[int]]:
        """Per optimizer step, the dataset indices this rank trained on (its micro-batches together)."""
        by_step: dict[int, list[int]] = {}
        for entry in self.micro_steps:
            by_step.setdefault(entry.step, []).extend(entry.indices)
        return [by_step[s] for s in sorted(by_step)]

    @property
    def local_grads(self) -> list[torch.Tensor]:
        """Per synchronised step, every parameter's gradient on this rank before the all-reduce (fresh tensors)."""
        return [torch.tensor(s.local, dtype=torch.float64) for s in self.steps]

    @property
    def synced_grads(self) -> list[torch.Tensor]:
        return [torch.tensor(s.synced, dtype=torch.float64) for s in self.steps]


@dataclass(frozen=True)
class SingleProcess:
    losses: tuple[float, ...]
    grad_max_diffs: tuple[float | None, ...]
    param_max_diffs: tuple[float | None, ...]
    max_param_diff: float


@dataclass(frozen=True)
class StepTiming:
    step: int
    data_s: float
    forward_s: float
    backward_s: float  # including the all-reduce
    optimizer_s: float


@dataclass(frozen=True)
class Timings:
    launch_s: tuple[float | None, ...]  # per rank: process start to script ready (interpreter, imports)
    init_s: tuple[float | None, ...]  # per rank: process group, DDP wrap (broadcast), data
    steps: tuple[tuple[StepTiming, ...], ...]  # per rank, per optimizer step
    total_s: float | None  # launch to the last rank's end, as the launcher saw it


@dataclass(frozen=True)
class DDPRun:
    options: lab_options.DDPOptions
    outcome: str
    note: str | None
    world_size: int
    backend: str
    launcher: str
    torch_version: str
    parameters: tuple[tuple[str, int], ...]
    launch_started_at: float | None
    launch_ended_at: float | None
    port: int | None  # the rendezvous port the lab's launcher chose (None under torchrun)
    launch_method: str | None  # how the ranks started (LAUNCH_METHODS); None in a file from a cluster
    ranks: tuple[RankResult, ...]
    single_process: SingleProcess | None
    source: str  # "this machine", or the name of the file it was loaded from
    results_json: str  # the file itself, for download

    @property
    def single_process_max_diff(self) -> float | None:
        return None if self.single_process is None else self.single_process.max_param_diff

    @property
    def started_at(self) -> float:
        """The clock's zero for timelines: the launch, or the earliest rank start."""
        return self.launch_started_at or min(r.launched_at for r in self.ranks)

    @property
    def timings(self) -> Timings:
        return Timings(
            launch_s=tuple(_gap(r.launched_at, r.ready_at) for r in self.ranks),
            init_s=tuple(_gap(r.ready_at, r.init_done_at) for r in self.ranks),
            steps=tuple(_step_timings(r) for r in self.ranks),
            total_s=_gap(self.launch_started_at, self.launch_ended_at),
        )

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.host for r in self.ranks))

    @property
    def nodes(self) -> int:
        return len({r.node for r in self.ranks})


def _gap(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def _step_timings(rank: RankResult) -> tuple[StepTiming, ...]:
    totals: dict[int, list[float]] = {}
    for entry in rank.micro_steps:
        phases = (entry.data, entry.forward, entry.backward, entry.optimizer)
        spent = [0.0 if p is None else p[1] - p[0] for p in phases]
        totals[entry.step] = [a + b for a, b in zip(totals.get(entry.step, [0.0] * 4), spent, strict=True)]
    return tuple(StepTiming(step, *totals[step]) for step in sorted(totals))
