"""Real-scale lab: one real training step of a published model, on fake tensors, per GPU.

`plan` builds the model with `transformers`' own class from its published config, inside
`FakeTensorMode` (nothing is allocated, so Llama-3-8B fits in a laptop's memory), and runs
the Memory lab's two measured training steps on it (`explorers.memory.your_model`): forward
with the library's own loss, backward, the optimizer step, `zero_grad`. Step 2 is the steady
state. Every byte of the unsharded step is measured. Sharding over N data-parallel ranks is
then *computed* from those measured parts, at each phase's own peak:

- ZeRO-1 keeps 1/N of the optimizer state (and of the optimizer step's temporaries);
- ZeRO-2 also 1/N of the gradients;
- ZeRO-3 (FSDP full shard) also 1/N of the parameters, plus one gathered unit: the largest
  block's (or the embeddings and head's) full parameters in forward, and also its full
  gradients in backward, before they are reduce-scattered.

    from explorers import scale
    p = scale.plan("llama-3-8b", batch_size=1, seq_len=2048, precision="bf16-mixed", optimizer="adamw")
    p.parameters, p.gradients, p.optimizer_state, p.activations, p.peak, p.at_peak, p.fits(80 * 2**30)
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import explorers.scale.models as models
import explorers.scale.scaling as scaling
from explorers.memory.regions import BlockRegions
from explorers.memory.your_model import Measurement, _measure_steps, _nbytes

PRECISIONS = ("fp32", "bf16-mixed", "bf16")
OPTIMIZERS = ("adamw", "sgd_momentum", "sgd")
TRAINABLE = ("all", "last", "head")
ZERO_STAGES = (0, 1, 2, 3)
BATCH_RANGE = (1, 512)
SEQ_RANGE = (16, 131072)
WORLD_RANGE = (1, 1024)
MICRO_BATCHES_RANGE = (1, 64)  # gradient accumulation steps
GIB = 2**30
BUDGETS_GIB = (24, 40, 80, 141)  # the memory of common GPUs: RTX 4090 / L4, A100 40 GB, A100/H100 80 GB, H200

SHARDED_BY_STAGE = {  # the kinds of bytes a rank keeps 1/N of, from this ZeRO stage on
    "optimizer state": 1,
    "optimizer step temporaries": 1,
    "gradients": 2,
    "parameters": 3,
}
GATHERED = "gathered unit"  # ZeRO-3's transient full parameters of one unit, computed
GATHERED_GRADIENTS = "unit's full gradients"  # ZeRO-3: that unit's gradients before reduce-scatter, computed


@dataclass(frozen=True)
class PlanOptions:
    model: str = "llama-3-8b"
    batch_size: int = 1  # the micro-batch: sequences per forward and backward
    seq_len: int = 2048
    precision: str = "bf16-mixed"  # fp32 | bf16-mixed (fp32 weights, bf16 autocast) | bf16 (weights and state)
    optimizer: str = "adamw"
    checkpointing: bool = False  # the library's own gradient_checkpointing_enable()
    trainable: str = "all"  # all | last (the last `trainable_blocks` blocks and the head) | head
    trainable_blocks: int = 2
    world_size: int = 1  # data-parallel ranks
    zero_stage: int = 0  # 0 is DDP: every rank holds the whole step
    micro_batches: int = 1  # forward and backward passes per optimizer step (gradient accumulation)
    foreach: bool = False  # AdamW steps every parameter at once (CUDA's default) instead of one at a time

    def __post_init__(self) -> None:
        check(self)


@dataclass(frozen=True)
class Plan:
    """Bytes per rank for one training step; `measured` is the unsharded step itself, as measured."""

    options: PlanOptions
    source: str  # where the hyperparameters come from
    parameter_count: int
    trainable_count: int
    head_parameters: int  # the output projection's (the head's), as built
    head_tied: bool  # the head's weight is the token embedding's (training the head trains the embedding)
    blocks: int
    vocab_size: int
    hidden_size: int
    measured: Measurement
    parameters: int  # per rank, after sharding
    gradients: int
    optimizer_state: int
    activations: int  # saved for backward; autocast's weight copies are their own part, below
    weight_copies: int  # autocast's 16-bit copies of the fp32 weights (0 without autocast)
    peak: int  # the higher of the first two steps' peaks, per rank
    peak_phase: str
    peak_step: int  # 1 or 2
    phase_peaks: dict[str, int]  # each phase's peak, per rank, the higher of the two steps
    at_peak: dict[str, int]  # what was alive at the peak, per rank, by kind; sums to `peak`
    gathered_unit: int  # ZeRO-3: bytes of the largest unit's full parameters (0 otherwise)
    gathered_gradients: int  # ZeRO-3: bytes of its full gradients in backward, before reduce-scatter (0 otherwise)
    torch_version: str
    transformers_version: str
    seconds: float  # how long the fake steps took here
    scaled: bool  # True: measured on copies with one and two blocks (of each kind) and scaled to the block count

    @property
    def sharded(self) -> bool:
        return self.options.world_size > 1 and self.options.zero_stage > 0

    def fits(self, budget_bytes: int) -> bool:
        return self.peak <= budget_bytes

    def headroom(self, budget_bytes: int) -> int:
        """Bytes left under `budget_bytes` at the peak (negative: how much is missing)."""
        return budget_bytes - self.peak


def check(options: PlanOptions) -> None:
    """Refuse what cannot be run, with the reason (bad values from a link or a notebook)."""
    if not isinstance(options.model, str) or options.model not in models.KEYS:
        raise ValueError(f"model must be one of {models.KEYS}, not {options.model!r}")
    for name, allowed in (
        ("precision", PRECISIONS),
        ("optimizer", OPTIMIZERS),
        ("trainable", TRAINABLE),
        ("zero_stage", ZERO_STAGES),
    ):
        if getattr(options, name) not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, not {getattr(options, name)!r}")
    for name, (low, high) in (
        ("batch_size", BATCH_RANGE),
        ("seq_len", SEQ_RANGE),
        ("world_size", WORLD_RANGE),
        ("trainable_blocks", (1, 128)),
        ("micro_batches", MICRO_BATCHES_RANGE),
    ):
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be an integer from {low} to {high}, not {value!r}")
    for name in ("checkpointing", "foreach"):
        if not isinstance(getattr(options, name), bool):
            raise ValueError(f"{name} must be True or False, not {getattr(options, name)!r}")
    if options.foreach and options.optimizer != "adamw":
        raise ValueError(f"foreach=True is for AdamW here, not {options.optimizer!r}")


def plan(
    model: object,
    batch_size: int,
    seq_len: int,
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    checkpointing: bool = False,
    trainable: str | int = "all",
    world_size: int = 1,
    zero_stage: int = 0,
    micro_batches: int = 1,
    foreach: bool = False,
) -> Plan:
    """Bytes per GPU for one training step of `model` (a key of `models.KEYS` or a transformers config).

    `trainable` is "all", "head", or an integer N: the last N blocks and the head. `foreach=True`
    measures AdamW's multi-tensor step, CUDA's default; False (the default) steps one parameter at a time.
    """
    blocks = trainable if isinstance(trainable, int) and not isinstance(trainable, bool) else 2
    which = "last" if isinstance(trainable, int) and not isinstance(trainable, bool) else trainable
    key = model if isinstance(model, str) else models.KEYS[0]  # a config object: the options are checked all the same
    options = PlanOptions(
        key,
        batch_size,
        seq_len,
        precision,
        optimizer,
        checkpointing,
        which,
        blocks,
        world_size,
        zero_stage,
        micro_batches,
        foreach,
    )
    source = models.published(model)["source"] if isinstance(model, str) else "a transformers config object"
    return _plan(models.config_for(model), options, source)


def measure_plan(options: PlanOptions, report: Callable | None = None) -> Plan:
    """The run engine's entry: `plan` for a published model, by its options."""
    if report:
        report(0, 1)
    result = _published_plan(options)
    if report:
        report(1, 1)
    return result


def _published_plan(options: PlanOptions) -> Plan:
    """Sharding is computed from the unsharded step, so a new world size or ZeRO stage measures nothing again."""
    config = models.config_for(options.model)
    unsharded = dataclasses.replace(options, world_size=1, zero_stage=0)
    return _per_rank(config, options, models.published(options.model)["source"], *_published_step(unsharded))


@functools.lru_cache(maxsize=256)
def _published_step(options: PlanOptions):
    """Fake steps are deterministic: the searches, the remedies and the formulas ask for the same step again."""
    return _measured_step(models.config_for(options.model), options)


def _plan(config, options: PlanOptions, source: str, whole: bool = False) -> Plan:
    """Measured on small copies of the model and scaled to its block count (`scaling`), or on the whole model."""
    return _per_rank(config, options, source, *_measured_step(config, options, whole))


def _measured_step(config, options: PlanOptions, whole: bool = False):
    """The unsharded step's (measurement, largest unit, counts, head, seconds, scaled); sharding plays no part."""
    length = models.longest_sequence(config)
    if options.seq_len > length:
        raise ValueError(f"this model's position table holds {length} positions: seq_len must be at most {length}")
    if options.trainable == "last" and options.trainable_blocks > config.num_hidden_layers:
        raise ValueError(
            f"this model has {config.num_hidden_layers} blocks: trainable_blocks must be at most "
            f"{config.num_hidden_layers}"
        )
    started = time.perf_counter()
    target = scaling.block_counts(config.num_hidden_layers, options.trainable, options.trainable_blocks)
    copies = [target] if whole else scaling.small_copies(*target)
    if not whole and sum(copies[-1]) >= sum(target):  # the copies would be no smaller than the model
        copies = [target]
    found = [
        _measure(scaling.with_blocks(config, sum(c)), dataclasses.replace(options, trainable_blocks=max(c[1], 1)))
        for c in copies
    ]
    if len(copies) == 1:
        measured, unit, counts, head = found[0]
    else:
        measured = scaling.combine_measurements([f[0] for f in found], copies, target)
        unit = max(found[-1][1], found[0][1])  # one block, or everything outside: the same in every copy
        counts = tuple(scaling.combine([f[2][i] for f in found], copies, target) for i in (0, 1))
        head = found[-1][3]  # the head is the same in every copy
    return measured, unit, counts, head, time.perf_counter() - started, len(copies) > 1


def _measure(config, options: PlanOptions):
    """One model's two fake training steps: (measurement, largest FSDP unit, (parameters, trainable) counts,
    (head parameters, whether the head is tied to the token embedding))."""
    with FakeTensorMode():
        model, batch = _build(config, options)
        unit = _largest_unit(model)
        counts = (
            sum(p.numel() for p in model.parameters()),
            sum(p.numel() for p in model.parameters() if p.requires_grad),
        )
        stack = models.blocks(model)
        kinds = ["training" if any(p.requires_grad for p in block.parameters()) else "frozen" for block in stack]
        output = models.head(model)
        head = (sum(p.numel() for p in output.parameters()), output.weight is model.get_input_embeddings().weight)
        measured = _measure_steps(
            model,
            batch,
            optimizer=options.optimizer,
            precision="bf16" if options.precision == "bf16-mixed" else "fp32",  # pure bf16 runs without autocast
            loss_fn=_library_loss,
            micro_batches=options.micro_batches,
            foreach=options.foreach,
            estimated=True,
            regions=BlockRegions(stack, kinds),
        )
    return measured, unit, counts, head


def _library_loss(output, batch):
    return output.loss  # the library's own loss: labels are in the batch


def _build(config, options: PlanOptions):
    dtype = torch.get_default_dtype()
    if options.precision == "bf16":  # built in bf16, as from_pretrained(dtype=torch.bfloat16) loads it
        torch.set_default_dtype(torch.bfloat16)
    try:
        model = models.build(config)
    finally:
        torch.set_default_dtype(dtype)
    if options.checkpointing:  # the library's own switch (gradient_checkpointing_enable before transformers 5.x)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if options.trainable != "all":
        model.requires_grad_(False)
        kept = [models.head(model)]
        if options.trainable == "last":
            kept += list(models.blocks(model))[-options.trainable_blocks :]
        for module in kept:
            module.requires_grad_(True)
    ids = torch.zeros(options.batch_size, options.seq_len, dtype=torch.long)
    return model, {"input_ids": ids, "labels": ids}


def _largest_unit(model) -> tuple[int, int]:
    """(parameter bytes, trainable bytes) of FSDP's largest unit: one block, or everything outside the blocks."""

    def nbytes(parameters) -> tuple[int, int]:
        parameters = list(parameters)
        return _nbytes(parameters), _nbytes(p for p in parameters if p.requires_grad)

    stack = models.blocks(model)
    inside = {id(p) for p in stack.parameters()}
    units = [nbytes(block.parameters()) for block in stack]
    units.append(nbytes(p for p in model.parameters() if id(p) not in inside))
    return max(units)


def shard(parts: dict[str, int], stage: int, world_size: int) -> dict[str, int]:
    """The bytes one of `world_size` ranks keeps at ZeRO `stage`: 1/N of each kind sharded from that stage on."""
    return {
        kind: -(-nbytes // world_size) if stage >= SHARDED_BY_STAGE.get(kind, 99) else nbytes
        for kind, nbytes in parts.items()
    }


def _per_rank(
    config,
    options: PlanOptions,
    source: str,
    measured: Measurement,
    unit,
    counts,
    head,
    seconds: float,
    scaled: bool,
) -> Plan:
    stage = options.zero_stage if options.world_size > 1 else 0
    gathered, gathered_gradients = unit if stage == 3 else (0, 0)
    candidates = []  # (peak, phase, step, parts) at each phase's own peak, per rank; the steady step wins a tie
    for number, step in ((2, measured.steady_step), (1, measured.first_step)):
        for phase, parts in step.phase_at_peak.items():
            parts = shard(parts, stage, options.world_size)
            if stage == 3 and phase in ("forward", "backward"):
                parts[GATHERED] = gathered
                if phase == "backward":
                    parts[GATHERED_GRADIENTS] = gathered_gradients
            candidates.append((sum(parts.values()), phase, number, parts))
    peak, phase, number, at_peak = max(candidates, key=lambda c: c[0])
    phase_peaks: dict[str, int] = {}
    for total, name, _, _ in candidates:
        phase_peaks[name] = max(phase_peaks.get(name, 0), total)
    rank = shard(
        {
            "parameters": measured.parameters,
            "gradients": measured.gradients,
            "optimizer state": measured.optimizer_state,
        },
        stage,
        options.world_size,
    )
    return Plan(
        options=options,
        source=source,
        parameter_count=counts[0],
        trainable_count=counts[1],
        head_parameters=head[0],
        head_tied=head[1],
        blocks=config.num_hidden_layers,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        measured=measured,
        parameters=rank["parameters"],
        gradients=rank["gradients"],
        optimizer_state=rank["optimizer state"],
        activations=measured.activations,
        weight_copies=measured.weight_copies,
        peak=peak,
        peak_phase=phase,
        peak_step=number,
        phase_peaks=phase_peaks,
        at_peak={kind: nbytes for kind, nbytes in at_peak.items() if nbytes},
        gathered_unit=gathered,
        gathered_gradients=gathered_gradients,
        torch_version=torch.__version__,
        transformers_version=_transformers_version(),
        seconds=seconds,
        scaled=scaled,
    )


def _transformers_version() -> str:
    import transformers

    return transformers.__version__
