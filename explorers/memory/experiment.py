"""The Memory lab's experiments: presets, a batch-size sweep, memory budgets, accidental retention.

MemTracker installs process-global module hooks, so the page runs these on the run
engine (`explorers.engine`), one batch size per run: `batch_point`, `remedies_table`
and `retention` take the options and an optional `report(done, total)`.

Sizes that fit this machine comfortably are measured for real; larger ones are estimated
on fake tensors (nothing allocated), and every point says which it was. A configuration
whose estimate exceeds a safe share of this machine's free memory is never allocated.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from explorers import bounds, engine
from explorers.memory import your_model
from explorers.memory.your_model import Measurement
from explorers.rng import isolated_rng

PRESETS = {"mlp": "MLP", "cnn": "Small CNN (32x32 images)", "transformer": "Transformer encoder blocks"}
BATCHES = tuple(2**i for i in range(0, 17))  # 1 … 65,536
WIDTH_RANGE = (16, 4096)
DEPTH_RANGE = (1, 24)
SEQ_RANGE = (8, 4096)
HEADS = (1, 2, 4, 8, 16, 32)
ACCUMULATION_RANGE = (1, 16)
BUDGETS_GB = (8, 16, 24, 40, 80)
SEED_RANGE = (0, 99_999)
IMAGE = 32
MLP_FEATURES = 256
MEASURE_LIMIT_BYTES = 256 * 2**20  # measured for real only below this estimated peak: "comfortably"
SAFE_SHARE = 0.25  # never allocate more than this share of the machine's available memory


@dataclass(frozen=True)
class MemoryOptions:
    preset: str = "mlp"
    width: int = 512
    depth: int = 4
    seq_len: int = 128
    heads: int = 8
    batch_size: int = 64
    optimizer: str = "adam"
    precision: str = "fp32"
    checkpointing: bool = False
    accumulation: int = 1
    budget_gb: int = 24
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        bounds.check_ints(
            self,
            {
                "width": WIDTH_RANGE,
                "depth": DEPTH_RANGE,
                "seq_len": SEQ_RANGE,
                "accumulation": ACCUMULATION_RANGE,
                "seed": SEED_RANGE,
            },
        )
        bounds.check_choices(
            self,
            {
                "preset": PRESETS,
                "heads": HEADS,
                "batch_size": BATCHES,
                "budget_gb": BUDGETS_GB,
                "optimizer": your_model.OPTIMIZERS,
                "precision": your_model.PRECISIONS,
            },
        )
        if self.preset == "transformer" and self.width % self.heads:
            raise ValueError(f"width {self.width} must be divisible by heads {self.heads}")

    @property
    def micro_batch(self) -> int:
        """Gradient accumulation splits the batch: only one micro-batch's activations are alive at a time."""
        return max(self.batch_size // self.accumulation, 1)


def build(options: MemoryOptions, batch: int) -> tuple[nn.Sequential, torch.Tensor]:
    """The preset as an nn.Sequential of top-level blocks (the unit of checkpointing), and one input batch."""
    width, depth = options.width, options.depth
    if options.preset == "mlp":
        blocks = [nn.Sequential(nn.Linear(MLP_FEATURES if i == 0 else width, width), nn.GELU()) for i in range(depth)]
        return nn.Sequential(*blocks, nn.Linear(width, 1)), torch.randn(batch, MLP_FEATURES)
    if options.preset == "cnn":
        blocks = [
            nn.Sequential(nn.Conv2d(3 if i == 0 else width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
            for i in range(depth)
        ]
        head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))
        return nn.Sequential(*blocks, head), torch.randn(batch, 3, IMAGE, IMAGE)
    layers = [
        nn.TransformerEncoderLayer(width, options.heads, 4 * width, dropout=0.1, batch_first=True) for _ in range(depth)
    ]
    return nn.Sequential(*layers), torch.randn(batch, options.seq_len, width)


def predicted_activations(options: MemoryOptions, batch: int) -> int:
    """A closed form per preset, in bytes (fp32 unless autocast): what the lab compares the measurement with."""
    element = 4 if options.precision == "fp32" else 2
    b, w, d = batch, options.width, options.depth
    if options.checkpointing:  # only each block's input survives the forward (plus the last output)
        per_block_input = {"mlp": b * w, "cnn": b * w * IMAGE * IMAGE, "transformer": b * options.seq_len * w}
        return 4 * per_block_input[options.preset] * d
    if options.preset == "mlp":  # each block saves its Linear's input and its GELU's input
        return element * (b * MLP_FEATURES + (2 * d - 1) * b * w) + 4 * b * w
    if options.preset == "cnn":  # conv input, BatchNorm input, ReLU output per block, on 32x32 maps
        return 4 * (b * 3 * IMAGE * IMAGE + 2 * d * b * w * IMAGE * IMAGE + b * w)
    # Korthikanti et al. 2022: sbh(34 + 5as/h) bytes per layer for 16-bit activations and 1-byte dropout
    # masks; at 4-byte elements the 2-byte terms double: sbh(66 + 9as/h).
    s, h, a = options.seq_len, w, options.heads
    per_layer = s * b * h * 34 + 5 * a * s * s * b if element == 2 else s * b * h * 66 + 9 * a * s * s * b
    return per_layer * d


@dataclass(frozen=True)
class Point:
    batch: int
    result: Measurement
    measured: bool  # False: estimated on fake tensors


def _step_options(options: MemoryOptions) -> dict:
    return {"optimizer": options.optimizer, "precision": options.precision, "checkpointing": options.checkpointing}


@functools.lru_cache(maxsize=1024)  # estimates are pure functions of frozen options: safe to share
def estimate_point(options: MemoryOptions, batch: int) -> Measurement:
    micro = max(batch // options.accumulation, 1)
    return your_model.estimate(
        lambda: build(options, micro),
        **_step_options(options),
        predicted_activations=predicted_activations(options, micro),
    )


def measure_point(options: MemoryOptions, batch: int) -> Measurement:
    micro = max(batch // options.accumulation, 1)
    with isolated_rng(options.seed, options.device):
        model, example = build(options, micro)
    model, example = model.to(options.device), example.to(options.device)
    return your_model.measure(
        model, example, **_step_options(options), predicted_activations=predicted_activations(options, micro)
    )


def point(options: MemoryOptions, batch: int, limit: int = MEASURE_LIMIT_BYTES) -> Point:
    """Estimate first (free); measure for real only when the estimate fits comfortably and safely."""
    estimate = estimate_point(options, batch)
    safe = min(limit, int(SAFE_SHARE * engine.available_memory_bytes()))
    if estimate.peak <= safe:
        return Point(batch, measure_point(options, batch), measured=True)
    return Point(batch, estimate, measured=False)


def batch_point(options: MemoryOptions, report=None) -> Point:
    """The point at `options.batch_size`: what the page asks the run engine for, one batch size per run."""
    return point(options, options.batch_size)


def without_view_settings(options: MemoryOptions) -> MemoryOptions:
    """The options a measured point depends on: the device budget only draws a line, so it never reruns one."""
    return dataclasses.replace(options, budget_gb=MemoryOptions.budget_gb)


def sweep(
    options: MemoryOptions,
    batches: tuple[int, ...],
    on_point: Callable[[int, int], None] | None = None,
    limit: int = MEASURE_LIMIT_BYTES,
) -> tuple[Point, ...]:
    points = []
    for index, batch in enumerate(batches):
        points.append(point(options, batch, limit))
        if on_point:
            on_point(index + 1, len(batches))
    return tuple(points)


def sweep_batches(options: MemoryOptions, count: int = 8) -> tuple[int, ...]:
    """`count` powers of two around the chosen batch size, always including it."""
    index = BATCHES.index(options.batch_size)
    start = min(max(index - count // 2, 0), len(BATCHES) - count)
    return BATCHES[start : start + count]


def largest_batch_that_fits(options: MemoryOptions, budget_bytes: int) -> int | None:
    """The largest power-of-two batch whose estimated peak fits, from fake-tensor estimates only.

    The peak is affine in the batch size (fixed state plus per-sample activations), so two
    estimates give a first guess, and a few more settle it on the power-of-two grid.
    """
    low, high = BATCHES[4], BATCHES[5]
    peak_low, peak_high = (estimate_point(options, b).peak for b in (low, high))
    per_sample = max((peak_high - peak_low) / (high - low), 1)
    guess = (budget_bytes - (peak_low - per_sample * low)) / per_sample
    index = max((i for i, b in enumerate(BATCHES) if b <= guess), default=0)
    fits = {}

    def check(i: int) -> bool:
        if i not in fits:
            fits[i] = estimate_point(options, BATCHES[i]).peak <= budget_bytes
        return fits[i]

    while index > 0 and not check(index):
        index -= 1
    while index + 1 < len(BATCHES) and check(index + 1):
        index += 1
    return BATCHES[index] if check(index) else None


REMEDIES = {
    "as configured": {},
    "activation checkpointing": {"checkpointing": True},
    "bf16 autocast": {"precision": "bf16"},
    "4x gradient accumulation": {"accumulation": 4},
    "plain SGD": {"optimizer": "sgd"},
}


def remedies_table(options: MemoryOptions, report: Callable[[int, int], None] | None = None) -> list[dict]:
    """The largest batch that fits the chosen budget, as configured and under each single remedy."""
    budget = options.budget_gb * 10**9
    rows = []
    for index, (name, change) in enumerate(REMEDIES.items()):
        if report:
            report(index, len(REMEDIES))
        changed = dataclasses.replace(options, **change)
        largest = largest_batch_that_fits(changed, budget)
        rows.append(
            {
                "remedy": name,
                "largest batch": largest if largest else "none fits",
                "peak at that batch": _gb(estimate_point(changed, largest).peak) if largest else "-",
            }
        )
    return rows


def _gb(n: int) -> str:
    return f"{n / 10**9:.2f} GB" if n >= 10**8 else f"{n / 2**20:.1f} MiB"


# --- Accidental retention ----------------------------------------------------------------


RETENTION_OPTIONS = MemoryOptions(preset="mlp", width=256, depth=2)  # small: the loops' shapes are the lesson


def retention(options: MemoryOptions = RETENTION_OPTIONS, report=None, steps: int = 6, batch: int = 32) -> dict:
    """Live bytes after each step of three loops that keep a running loss.

    - training, fixed: `total += loss.item()`;
    - training, buggy: `total += loss`: backward already freed each step's saved tensors, so
      only the graph's small bookkeeping survives;
    - evaluation, buggy: `total += loss` with no backward and no `no_grad`: every step's
      activations stay alive through the running total.
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    curves = {}
    for name in ("training, loss.item()", "training, sum of loss tensors", "evaluation, sum of loss tensors"):
        with isolated_rng(options.seed, options.device):
            model, example = build(dataclasses.replace(options, checkpointing=False), batch)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        tracker = MemTracker()
        tracker.track_external(model, optimizer, example)
        live, total = [], 0.0
        with tracker:
            for _ in range(steps):
                tracker.reset_mod_stats()
                loss = model(example).float().pow(2).mean()
                if name.startswith("training"):
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                total = total + (loss.item() if name.endswith("item()") else loss)
                del loss
                live.append(your_model._live(tracker, example.device))
        curves[name] = live
        if report:
            report(len(curves), 3)
    return curves
