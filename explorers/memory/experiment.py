"""The Memory lab's experiments: presets, a batch-size sweep, memory budgets, accidental retention.

The page runs these on the run engine (`explorers.engine`), one batch size per run, so
that a run's tracking, seeded dropout and thread state stay in its own worker process:
`batch_point`, `remedies_table` and `retention` take the options and an optional
`report(done, total)`.

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

import explorers.memory.your_model as your_model
from explorers import bounds, capacity
from explorers.memory.tracker import LiveBytes
from explorers.memory.your_model import Measurement
from explorers.rng import isolated_rng
from explorers.units import format_bytes

PRESETS = {"mlp": "MLP", "cnn": "Small CNN (32x32 images)", "transformer": "Transformer encoder blocks"}
BATCHES = tuple(2**i for i in range(0, 17))  # 1 … 65,536
WIDTH_RANGE = (16, 4096)
DEPTH_RANGE = (1, 24)
SEQ_RANGE = (8, 4096)
HEADS = (1, 2, 4, 8, 16, 32)
ACCUMULATION_RANGE = (1, 16)
BUDGETS_GB = (8, 16, 24, 40, 80)  # GiB (2**30 bytes); the name stays "gb" so that older links still open
SEED_RANGE = (0, 99_999)
IMAGE = 32
MLP_FEATURES = 256
MEASURE_LIMIT_BYTES = 256 * 2**20  # measured for real only below this ceiling or estimated peak: "comfortably"
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
    budget_gb: int = 24  # GiB
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


def element_bytes(options: MemoryOptions) -> int:
    """The width autocast computes the presets' matmuls, convolutions and activations in."""
    return 4 if options.precision == "fp32" else 2


def predicted_activations(options: MemoryOptions, batch: int) -> int:
    """What each preset saves for backward at this (micro-)batch, in bytes: the lab's closed forms.

    Counted as explorers.saved counts: the batch itself is not, but under autocast its low-precision
    copy (the first layer's saved input) is. The lab's loss, `output.float().pow(2).mean()`, keeps the
    output in fp32. With checkpointing only block boundaries stay: every top-level block's input but
    the batch, and the output the loss keeps.
    """
    e, b, w, d = element_bytes(options), batch, options.width, options.depth
    low_precision = e < 4
    if options.preset == "mlp":
        if options.checkpointing:  # the d block outputs the checkpoints keep, the loss's fp32 output
            return e * d * b * w + 4 * b
        batch_copy = e * b * MLP_FEATURES if low_precision else 0
        return batch_copy + e * 2 * d * b * w + 4 * b  # GELU's input and output per block
    if options.preset == "cnn":
        maps = b * w * IMAGE * IMAGE
        if options.checkpointing:
            return e * d * maps + 4 * 10 * b
        batch_copy = e * b * 3 * IMAGE * IMAGE if low_precision else 0
        norm_statistics = 2 * 4 * w * d  # BatchNorm's saved fp32 mean and inverse deviation, per channel
        return batch_copy + e * (2 * d * maps + b * w) + norm_statistics + 4 * 10 * b  # BN input, ReLU output
    if options.checkpointing:  # each layer ends in LayerNorm, which autocast keeps in fp32
        return 4 * d * options.seq_len * b * w
    return d * published_per_layer(options, b)


def published_per_layer(options: MemoryOptions, batch: int) -> int:
    """Korthikanti et al. 2022: sbh(34 + 5as/h) bytes per layer, for 2-byte values and 1-byte dropout masks.

    At fp32 the 2-byte values take 4 bytes and the masks stay at one: sbh(66 + 9as/h).
    """
    per_token, per_score = published_coefficients(options)
    s, h, a = options.seq_len, options.width, options.heads
    return per_token * s * batch * h + per_score * a * s * s * batch


def published_coefficients(options: MemoryOptions) -> tuple[int, int]:
    return (34, 5) if element_bytes(options) == 2 else (66, 9)


def predicted_weight_copies(options: MemoryOptions) -> int:
    """Autocast's low-precision weight casts that backward needs (none at fp32, none kept under checkpointing).

    A layer keeps its weight's copy to compute its input's gradient, so a first layer whose input
    (the batch) needs no gradient keeps none, except a convolution, which saves its weight anyway.
    """
    if element_bytes(options) == 4 or options.checkpointing:
        return 0
    w, d = options.width, options.depth
    weights = {
        "mlp": (d - 1) * w * w + w,
        "cnn": 9 * 3 * w + 9 * (d - 1) * w * w + 10 * w,
        "transformer": 9 * w * w * d + 3 * w * w * (d - 1),  # out, linear1, linear2; in-projection past the first
    }[options.preset]
    return 2 * weights


@dataclass(frozen=True)
class Point:
    batch: int
    micro_batch: int  # the batch each forward and backward sees (batch // accumulation)
    result: Measurement
    measured: bool  # False: estimated on fake tensors
    # Transformer without checkpointing: bytes per layer per (s·b·h) and per (a·s²·b) that PyTorch's
    # layer keeps, fitted from estimates at two sequence lengths, to set beside the published formula's.
    fitted_coefficients: tuple[float, float] | None = None
    # With them: what the lab's loss saves beyond the layers (the final output, in fp32), in bytes.
    loss_saved: int | None = None
    accumulation: int = 1  # micro-batches per optimizer step

    @property
    def samples_per_step(self) -> int:
        """What one optimizer step trains on: micro-batches × their size (not always the batch asked for)."""
        return self.accumulation * self.micro_batch


def micro_batch(options: MemoryOptions, batch: int) -> int:
    return max(batch // options.accumulation, 1)


def _step_options(options: MemoryOptions, batch: int) -> dict:
    micro = micro_batch(options, batch)
    return {
        "optimizer": options.optimizer,
        "precision": options.precision,
        "checkpointing": options.checkpointing,
        # Micro-batches past the second repeat its memory exactly: two show what accumulation keeps alive.
        "micro_batches": min(options.accumulation, 2),
        "predictions": {
            "activations": predicted_activations(options, micro),
            "weight_copies": predicted_weight_copies(options),
        },
    }


@functools.lru_cache(maxsize=1024)  # estimates are pure functions of frozen options: safe to share
def estimate_point(options: MemoryOptions, batch: int) -> Measurement:
    return your_model.estimate(lambda: build(options, micro_batch(options, batch)), **_step_options(options, batch))


def measure_point(options: MemoryOptions, batch: int) -> Measurement:
    with isolated_rng(options.seed, options.device):
        model, example = build(options, micro_batch(options, batch))
        model, example = model.to(options.device), example.to(options.device)
        return your_model.measure(model, example, **_step_options(options, batch))


def fitted_coefficients(options: MemoryOptions, batch: int) -> tuple[float, float]:
    """Per layer, the bytes PyTorch's encoder layer keeps per (s·b·h) and per (a·s²·b) at this batch.

    The layers' own saved bytes (a loss that saves nothing, so the loss's saved output stays out of
    the layers' share) are d·b·(j·s·h + k·a·s²), so bytes / s is linear in s: estimates at two
    sequence lengths give j and k exactly. (At batch 1 some views share storage, so fit at the batch.)
    """
    s1 = options.seq_len
    s2 = s1 // 2 if s1 >= 2 * SEQ_RANGE[0] else 2 * s1
    b, d, h, a = micro_batch(options, batch), options.depth, options.width, options.heads
    per_s = {s: _estimated_activations(dataclasses.replace(options, seq_len=s), b, False) / s for s in (s1, s2)}
    per_score = (per_s[s2] - per_s[s1]) / (s2 - s1) / (d * b * a)
    per_token = (per_s[s1] - d * b * per_score * a * s1) / (d * b * h)
    return per_token, per_score


def loss_saved(options: MemoryOptions, batch: int) -> int:
    """What the lab's loss saves for backward beyond the layers: estimates with and without it, subtracted."""
    b = micro_batch(options, batch)
    return _estimated_activations(options, b, True) - _estimated_activations(options, b, False)


def _saves_nothing(output: torch.Tensor) -> torch.Tensor:
    return output.float().sum()  # sum's backward needs only the shape


@functools.lru_cache(maxsize=1024)
def _estimated_activations(options: MemoryOptions, micro: int, with_loss: bool = True) -> int:
    activations, _ = your_model.estimate_saved(
        lambda: build(options, micro),
        precision=options.precision,
        checkpointing=options.checkpointing,
        **({} if with_loss else {"loss_fn": _saves_nothing}),
    )
    return activations


def ceiling(options: MemoryOptions, batch: int) -> int:
    """A closed-form bound on a step's peak, from the parameter list and the closed forms above; no step runs.

    What stays (parameters, gradients, optimizer state, buffers, the batch), twice what the step would
    save without checkpointing (backward's gradients of it are as large; a checkpointed block recomputes
    its share), four parameter-sized temporaries (the optimizer's, autocast's copies), and all of it
    doubled for what the closed forms miss (PyTorch's attention keeps more than the published formula
    at small widths). On 1,231 random configurations of every preset the fake-tensor peak reached at
    most 0.77 of it; tests/unit/test_memory.py checks the closest of them and a spread of the rest.
    """
    micro = micro_batch(options, batch)
    with torch.device("meta"):  # shapes only: nothing allocated, nothing initialised
        model, example = build(options, micro)
    state = your_model.predicted_state(model, options.optimizer)
    kept = sum(state.values()) + sum(b.nbytes for b in model.buffers()) + example.nbytes
    unsaved = dataclasses.replace(options, checkpointing=False)
    saved = predicted_activations(unsaved, micro) + predicted_weight_copies(unsaved)
    return 2 * (kept + 2 * saved + 4 * state["parameters"])


def point(options: MemoryOptions, batch: int, limit: int = MEASURE_LIMIT_BYTES) -> Point:
    """Measure for real only what fits comfortably and safely: what the ceiling says fits at once (its
    fake-tensor estimate costs 60-90 ms beside a 25 ms step at the defaults), the rest once its estimate fits."""
    safe = min(limit, int(SAFE_SHARE * capacity.available_memory_bytes()))
    measured = ceiling(options, batch) <= safe or estimate_point(options, batch).peak <= safe
    published = options.preset == "transformer" and not options.checkpointing
    fitted = fitted_coefficients(options, batch) if published else None
    kept_by_loss = loss_saved(options, batch) if published else None
    result = measure_point(options, batch) if measured else estimate_point(options, batch)
    return Point(batch, micro_batch(options, batch), result, measured, fitted, kept_by_loss, options.accumulation)


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


def budget_bytes(options: MemoryOptions) -> int:
    return options.budget_gb * 2**30


def largest_batch_that_fits(options: MemoryOptions, budget: int) -> int | None:
    """The largest power-of-two batch whose estimated steady-state peak fits, from fake-tensor estimates only.

    The peak is affine in the batch size (fixed state plus per-sample activations), so two
    estimates give a first guess, and a few more settle it on the power-of-two grid.
    """
    low, high = BATCHES[4], BATCHES[5]
    peak_low, peak_high = (estimate_point(options, b).peak for b in (low, high))
    per_sample = max((peak_high - peak_low) / (high - low), 1)
    guess = (budget - (peak_low - per_sample * low)) / per_sample
    index = max((i for i, b in enumerate(BATCHES) if b <= guess), default=0)
    fits = {}

    def check(i: int) -> bool:
        if i not in fits:
            fits[i] = estimate_point(options, BATCHES[i]).peak <= budget
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
    """The largest power-of-two batch whose estimated steady-state peak fits the budget, as configured and under
    each remedy (only the powers of two in BATCHES are tried)."""
    rows = []
    for index, (name, change) in enumerate(REMEDIES.items()):
        if report:
            report(index, len(REMEDIES))
        changed = dataclasses.replace(options, **change)
        largest = largest_batch_that_fits(changed, budget_bytes(options))
        rows.append(
            {
                "remedy": name,
                "largest power-of-two batch": _largest_words(largest),
                "estimated peak at that batch": format_bytes(estimate_point(changed, largest).peak) if largest else "-",
            }
        )
    return rows


def _largest_words(largest: int | None) -> str:
    """The grid's top fitting says only that it fits: larger batches were not tried."""
    if largest is None:
        return "none fits"
    if largest == BATCHES[-1]:
        return f"at least {largest:,} (the largest tried)"
    return f"{largest:,}"


# --- Accidental retention ----------------------------------------------------------------


RETENTION_OPTIONS = MemoryOptions(preset="mlp", width=256, depth=2)  # small: the loops' shapes are the lesson
RETENTION_BATCH = 32
RETENTION_LOOPS = (  # (name, runs backward, keeps the loss tensor rather than loss.item())
    ("training, loss.item()", True, False),
    ("training, sum of loss tensors", True, True),
    ("evaluation without no_grad, loss.item()", False, False),
    ("evaluation without no_grad, sum of loss tensors", False, True),
)


def retention(
    options: MemoryOptions = RETENTION_OPTIONS, report=None, steps: int = 6, batch: int = RETENTION_BATCH
) -> dict:
    """Live bytes after each step of four loops that keep a running loss, `total = total + ...`.

    Two train (forward, backward, step), two only evaluate, all without `no_grad`; one of each
    keeps `loss.item()` (a float), the other the loss tensor (and the graph behind it).
    """
    curves = {}
    for name, trains, keeps_tensor in RETENTION_LOOPS:
        with isolated_rng(options.seed, options.device):
            model, example = build(dataclasses.replace(options, checkpointing=False), batch)
        model, example = model.to(options.device), example.to(options.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        tracker = LiveBytes()
        tracker.add([*model.parameters(), *model.buffers(), example], "model and batch")
        live, total = [], 0.0
        with tracker:
            for _ in range(steps):
                loss = model(example).float().pow(2).mean()
                if trains:
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                total = total + (loss if keeps_tensor else loss.item())
                del loss
                live.append(tracker.total)
        curves[name] = live
        if report:
            report(len(curves), len(RETENTION_LOOPS))
    return curves
