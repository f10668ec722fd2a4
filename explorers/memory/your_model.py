"""Memory lab: where the memory of a training step goes, on your own model.

`measure` runs two real training steps (forward, backward, optimizer step, zero_grad) on a
copy of your model and reports bytes by category, each with its closed-form prediction:
parameters, gradients, optimizer state, activations saved for backward, autocast's weight
copies, the batch, and the peak of each step with what was alive at that moment. Step 1 is
special: the optimizer's state does not exist until its first `step()`. From step 2 on it
is alive through forward and backward, so step 2 is the steady state every later step
repeats, and its peak is the one a real loop must fit.

Live bytes come from `tracker.LiveBytes`, which follows every storage the step creates
(any device, and fake tensors); on CUDA the steady peak is cross-checked against
`torch.cuda.max_memory_allocated`. `estimate` runs the same steps on fake tensors
(`FakeTensorMode`): nothing is allocated, so a GPU-sized batch can be explored on a laptop.

    from explorers import memory
    m = memory.measure(model, batch, optimizer="adam", precision="bf16", checkpointing=True)
    m.activations, m.first_step.peak, m.steady_step.peak, m.steady_step.at_peak

Your model, its buffers, its `.grad` fields, your input and your random stream are left as
they were: the steps run on a deep copy of the model (its gradients cleared, in `train()`
mode) and of the input, which hold the same bytes.

The batch and the loss follow `explorers.batches`: a tensor is `model(x)`, a tuple or list
`model(*batch)`, a dict `model(**batch)`; `loss_fn(output, target)` with `target=...`,
`loss_fn(output, batch)` without, `loss_fn(output)` for a one-argument loss, and the output is
passed as the model returned it (a Hugging Face `ModelOutput` included). The default loss is the
output's own `loss` when it carries one. Module hooks on your model fire on the copy (a
UserWarning says so); tensor hooks are registered again on the copy's parameters.

    m = memory.measure(hf_model, {"input_ids": ids, "labels": ids}, loss_fn=lambda out, batch: out.loss)
"""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.checkpoint import checkpoint

import explorers.memory.allocator as allocator
from explorers import batches, saved
from explorers.memory.allocator import AllocatorRecord
from explorers.memory.tracker import WEIGHT_COPIES, LiveBytes

OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
PRECISIONS = ("fp32", "bf16", "fp16")
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "weight_copies", "batch")
STEPS = 2  # step 2 is the steady state: every later step holds the same tensors at the same moments


@dataclass(frozen=True)
class StepMemory:
    """Live bytes through one training step."""

    peak: int
    peak_phase: str  # "forward", "backward", "optimizer step" or "zero_grad"
    at_peak: dict[str, int]  # what was alive at the peak, by kind; sums to `peak`
    phase_peaks: dict[str, int]  # the highest live total within each phase
    timeline: tuple[tuple[str, int], ...]  # (moment, live bytes) through the step
    phase_at_peak: dict[str, dict[str, int]] = field(default_factory=dict)  # what was alive at each phase's peak
    # With block places watched (explorers.memory.regions): the peak of each "phase|place", and what was alive there
    region_peaks: dict[str, int] = field(default_factory=dict)
    region_at_peak: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Measurement:
    parameters: int
    buffers: int
    batch: int  # the input tensors (as explorers.saved defines it, the batch is not an activation)
    gradients: int
    optimizer_state: int
    activations: int  # saved for backward as explorers.saved defines it, less the weight copies
    weight_copies: int  # saved for backward too: autocast's low-precision casts of the weights
    first_step: StepMemory
    steady_step: StepMemory
    predicted: dict[str, int]  # closed forms for the same categories (others where `predictions` gives them)
    graph_ops: tuple[str, ...]  # the autograd node types the forward recorded, e.g. "BmmBackward0"
    estimated: bool  # True when run on fake tensors: nothing was allocated
    micro_batches: int = 1  # forward and backward passes per optimizer step
    cuda_peak: int | None = None  # the steady step's peak by torch.cuda.max_memory_allocated, where CUDA runs
    allocator: AllocatorRecord | None = None  # one more steady step as the CPU allocator saw it (real CPU runs)
    optimizer_call: str = ""  # the optimizer as it ran, read back from its own defaults, e.g. "Adam(foreach=False)"
    largest_parameter: int = 0  # bytes of the largest trainable parameter, beside the optimizer step's temporaries

    @property
    def peak(self) -> int:
        return self.steady_step.peak


def predicted_state(model: nn.Module, optimizer: str) -> dict[str, int]:
    """Parameters, gradients and optimizer state from the parameter list alone."""
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable_bytes = sum(p.numel() * p.element_size() for p in trainable)
    optimizer_bytes = {
        "sgd": 0,
        "sgd_momentum": trainable_bytes,  # one momentum buffer per parameter
        # exp_avg and exp_avg_sq per parameter, plus a float32 step count per parameter tensor
        "adam": 2 * trainable_bytes + 4 * len(trainable),
        "adamw": 2 * trainable_bytes + 4 * len(trainable),
    }[optimizer]
    return {"parameters": parameter_bytes, "gradients": trainable_bytes, "optimizer_state": optimizer_bytes}


def default_loss(output: object) -> torch.Tensor:
    """The output's own `loss` when it carries one (a Hugging Face ModelOutput given labels), else the mean
    square of every floating-point output that depends on a trainable parameter.

    The output may be a tensor or a tuple, list or dict of them (nested too), as models return.
    """
    own = batches.output_loss(output)
    if own is not None and own.requires_grad:
        return own
    parts = [t.float().pow(2).mean() for t in batches.tensors_in(output) if t.is_floating_point() and t.requires_grad]
    if not parts:
        raise ValueError(
            "the model returned no floating-point tensor that depends on a trainable parameter; "
            "pass loss_fn=... to say how to reduce its output to a loss"
        )
    return functools.reduce(operator.add, parts)


def measure(
    model: nn.Module,
    example_input: object,
    optimizer: str = "adam",
    precision: str = "fp32",
    checkpointing: bool = False,
    loss_fn: Callable[[object], torch.Tensor] = default_loss,
    micro_batches: int = 1,
    predictions: Mapping[str, int] | None = None,
    foreach: bool | None = False,
    target: object = None,
) -> Measurement:
    """Two real training steps on a copy of `model`, every category measured.

    `example_input` is a tensor (called as `model(x)`), a tuple or list (`model(*x)`) or a
    dict (`model(**x)`). `loss_fn` reduces the raw output to a scalar loss: `loss_fn(output)`,
    `loss_fn(output, target)` with a `target`, `loss_fn(output, batch)` without (`explorers.batches`);
    the target counts as part of the batch. With
    `micro_batches=k`, each optimizer step follows k forward and backward passes on the
    input (gradient accumulation: the input is one micro-batch). `predictions` (category -> bytes)
    are your own closed forms, kept beside the measured values in `predicted`. `foreach` goes to Adam and
    AdamW: False (the lab's choice) steps one parameter at a time; None is PyTorch's default, which picks
    an implementation by device; `Measurement.optimizer_call` says what ran.
    """
    _check(model, example_input, optimizer, precision, micro_batches)
    batches.warn_module_hooks(model, "measure")
    device = _device(model, example_input)
    private_model, private_input = _private_copy(model), _private_input(example_input)
    with _caller_rng_kept(device):
        return _measure_steps(
            private_model,
            private_input,
            optimizer,
            precision,
            checkpointing,
            loss_fn,
            micro_batches,
            predictions,
            foreach,
            target=_private_input(target),
            estimated=False,
        )


def estimate(build: Callable[[], tuple], **options) -> Measurement:
    """`measure` on fake tensors: `build()` makes the model and input inside FakeTensorMode, so nothing is allocated.

    `build()` returns `(model, batch)` or `(model, batch, target)`; the options are `measure`'s.
    """
    with FakeTensorMode():
        model, example_input, *rest = build()
        if rest:
            options["target"] = rest[0]
        _check(
            model,
            example_input,
            options.get("optimizer", "adam"),
            options.get("precision", "fp32"),
            options.get("micro_batches", 1),
        )
        return _measure_steps(model, example_input, **options, estimated=True)


def estimate_saved(
    build: Callable[[], tuple[nn.Module, object]],
    precision: str = "fp32",
    checkpointing: bool = False,
    loss_fn: Callable[[object], torch.Tensor] = default_loss,
) -> tuple[int, int]:
    """(activations, weight copies) one forward saves for backward, on fake tensors: a cheap part of `estimate`."""
    with FakeTensorMode():
        model, example_input = build()
        _check(model, example_input, "sgd", precision, 1)
        model.train()
        tracker = LiveBytes()
        tracker.add(model.parameters(), "parameters")
        excluded = saved.excluded_storages(model, [example_input])
        settings = _Settings(precision, checkpointing, loss_fn, micro_batches=1)
        with tracker:
            _, found = _forward_saving(model, example_input, settings, tracker, excluded, _device(model, example_input))
            return _activations_and_weight_copies(found, tracker)


# --- Checks and private copies -----------------------------------------------------------


def _check(model: object, example_input: object, optimizer: str, precision: str, micro_batches: int) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("the model has no trainable parameter (requires_grad=True): there is no training step")
    if not batches.tensors_in(example_input):
        raise ValueError("example_input must be a tensor, or a tuple, list or dict holding tensors")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, not {optimizer!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise ValueError(f"micro_batches must be a positive integer, not {micro_batches!r}")


def _device(model: nn.Module, example_input: object) -> torch.device:
    first = next(iter([*model.parameters(), *saved.tensors_in(example_input)]))
    return first.device


def _private_copy(model: nn.Module) -> nn.Module:
    """A deep copy to train (tensor hooks carried over), starting as a loop does after `zero_grad(set_to_none=True)`."""
    private = batches.copy_model(model, "measure")
    for parameter in private.parameters():
        parameter.grad = None
    return private


def _private_input(example_input: object) -> object:
    """The same tensors, copied: a model that works in place on its input must not change the caller's."""
    return batches.fresh_batch(example_input)


def _caller_rng_kept(device: torch.device) -> contextlib.AbstractContextManager:
    """Dropout draws from the global generator: restore the caller's random stream afterwards."""
    accelerator = device.type in ("cuda", "mps")
    devices = [device.index or 0] if accelerator else []
    return torch.random.fork_rng(devices=devices, device_type=device.type if accelerator else "cuda")


# --- The steps -----------------------------------------------------------------------------


def _optimizer(name: str, parameters: list[nn.Parameter], foreach: bool | None = False) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01)
    if name == "sgd_momentum":
        return torch.optim.SGD(parameters, lr=0.01, momentum=0.9)
    # foreach=False by default: the loop over parameters, one at a time (the step's temporaries are measured and
    # set beside the largest parameter). `optimizer_call` says which ran.
    return {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name](parameters, lr=1e-3, foreach=foreach)


def _optimizer_call(optimizer: torch.optim.Optimizer) -> str:
    """The optimizer as it ran, from its own defaults: what a reader needs to reproduce its step's memory."""
    shown = {k: optimizer.defaults[k] for k in ("lr", "momentum", "foreach") if k in optimizer.defaults}
    if not shown.get("momentum"):
        shown.pop("momentum", None)
    return f"{type(optimizer).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


def _autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    if not torch.amp.is_autocast_available(device.type):
        raise ValueError(f"autocast is not available on {device.type}")
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def _forward(model: nn.Module, example_input: object, checkpointing: bool) -> object:
    if checkpointing and (not isinstance(model, nn.Sequential) or not isinstance(example_input, torch.Tensor)):
        raise ValueError("checkpointing is applied per top-level block: the model must be an nn.Sequential of blocks")
    try:
        if not checkpointing:
            return batches.call(model, example_input)
        hidden = example_input
        for block in model:
            hidden = checkpoint(block, hidden, use_reentrant=False)
        return hidden
    except torch.OutOfMemoryError:
        raise
    except Exception as error:  # PyTorch's own message (BatchNorm on one sample) or the user's code, said plainly
        made = batches.describe_call(example_input)
        raise ValueError(f"the model's forward failed on {made}: {type(error).__name__}: {error}") from error


def _loss(settings: _Settings, output: object, example_input: object) -> torch.Tensor:
    loss = batches.loss_of(settings.loss_fn, output, example_input, settings.target)
    if not loss.requires_grad:
        raise ValueError("loss_fn must return a one-element tensor that depends on the model's trainable parameters")
    return loss


def _graph_ops(loss: torch.Tensor) -> tuple[str, ...]:
    """The node types of the graph behind `loss` (names only: nothing saved is unpacked)."""
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(next_node for next_node, _ in node.next_functions)
    return tuple(sorted({node.name() for node in seen}))


def _nbytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]


@dataclass
class _Settings:
    precision: str
    checkpointing: bool
    loss_fn: Callable[[object], torch.Tensor]
    micro_batches: int
    target: object = None
    regions: object = None  # a BlockRegions (explorers.memory.regions): each place in the blocks keeps its own peak


@dataclass
class _Facts:
    """What the first forward and step find: the same in every step."""

    activations: int = 0
    weight_copies: int = 0
    graph_ops: tuple[str, ...] = ()
    gradients: int = 0
    optimizer_state: int = 0


def _measure_steps(
    model: nn.Module,
    example_input: object,
    optimizer: str = "adam",
    precision: str = "fp32",
    checkpointing: bool = False,
    loss_fn: Callable[[object], torch.Tensor] = default_loss,
    micro_batches: int = 1,
    predictions: Mapping[str, int] | None = None,
    foreach: bool | None = False,
    target: object = None,
    *,
    estimated: bool,
    regions=None,
) -> Measurement:
    device = _device(model, example_input)
    opt = _optimizer(optimizer, [p for p in model.parameters() if p.requires_grad], foreach)
    model.train()
    settings = _Settings(precision, checkpointing, loss_fn, micro_batches, target, regions)
    facts = _Facts()
    steps = [_step(model, opt, example_input, settings, facts, device, first=n == 1) for n in range(1, STEPS + 1)]
    cuda = device.type == "cuda" and not estimated
    cuda_peak = _cuda_peak(model, opt, example_input, settings, facts, device) if cuda else None
    seen = (
        None
        if estimated or not allocator.available(device)
        else _allocator_step(model, opt, example_input, settings, facts, device)
    )
    predicted = {**predicted_state(model, optimizer), **(predictions or {})}
    return Measurement(
        parameters=_nbytes(model.parameters()),
        buffers=_nbytes(model.buffers()),
        batch=sum(
            {
                saved.storage_key(t): t.untyped_storage().nbytes() for t in batches.tensors_in([example_input, target])
            }.values()
        ),
        gradients=facts.gradients,
        optimizer_state=facts.optimizer_state,
        activations=facts.activations,
        weight_copies=facts.weight_copies,
        first_step=steps[0],
        steady_step=steps[-1],
        predicted=predicted,
        graph_ops=facts.graph_ops,
        estimated=estimated,
        micro_batches=micro_batches,
        cuda_peak=cuda_peak,
        allocator=seen,
        optimizer_call=_optimizer_call(opt),
        largest_parameter=max(_nbytes([p]) for p in model.parameters() if p.requires_grad),
    )


def _cuda_peak(model, opt, example_input, settings: _Settings, facts: _Facts, device: torch.device) -> int:
    """One more steady step under CUDA's own counter: its highest allocation above what existed before."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step = _step(model, opt, example_input, settings, facts, device, first=False)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before + step.timeline[0][1]


def _allocator_step(model, opt, example_input, settings: _Settings, facts: _Facts, device) -> AllocatorRecord:
    """One more steady step under torch.profiler's memory events: what the allocator saw, kernels' own bytes too."""
    marks = allocator.PhaseMarks()
    with allocator.recording() as events:
        step = _step(model, opt, example_input, settings, facts, device, first=False, marks=marks)
        marks.close()
    return allocator.read(events, before=step.timeline[0][1])


def _forward_saving(
    model, example_input, settings: _Settings, tracker: LiveBytes, excluded: set[int], device: torch.device
) -> tuple[torch.Tensor, dict[int, int]]:
    """The loss, and every storage saved for backward on the way (storage key -> bytes)."""
    found: dict[int, int] = {}
    with _autocast(settings.precision, device), saved.counting(excluded, found):
        loss = _loss(settings, _forward(model, example_input, settings.checkpointing), example_input)
    tracker.label_keys(found, "activations")
    return loss, found


def _activations_and_weight_copies(found: dict[int, int], tracker: LiveBytes) -> tuple[int, int]:
    weight_copies = sum(nbytes for key, nbytes in found.items() if tracker.kind_of(key) == WEIGHT_COPIES)
    return sum(found.values()) - weight_copies, weight_copies


def _backward(loss: torch.Tensor) -> None:
    try:
        loss.backward()
    except torch.OutOfMemoryError:
        raise
    except RuntimeError as error:  # PyTorch's refusal, e.g. a saved tensor changed in place: no step on wrong gradients
        raise ValueError(f"the model's backward failed, so no training step was measured: {error}") from error


def _step(
    model,
    opt,
    example_input,
    settings: _Settings,
    facts: _Facts,
    device: torch.device,
    *,
    first: bool,
    marks: allocator.PhaseMarks | None = None,
) -> StepMemory:
    """One training step under the tracker: micro-batch passes, then the optimizer step and zero_grad.

    The first pass of the first step records what every pass saves for backward into `facts`.
    """
    tracker = LiveBytes()
    tracker.add(model.parameters(), "parameters")
    tracker.add(model.buffers(), "buffers")
    tracker.add(batches.tensors_in([example_input, settings.target]), "batch")
    tracker.add(_state_tensors(opt), "optimizer state")
    excluded = saved.excluded_storages(model, batches.tensors_in([example_input, settings.target]))
    timeline = [("start", tracker.total)]
    trainable = [p for p in model.parameters() if p.requires_grad]
    places = settings.regions or contextlib.nullcontext()
    if settings.regions:
        settings.regions.tracker = tracker

    def start(phase: str) -> None:
        if settings.regions:  # the place first: the phase's first moment is already in it
            settings.regions.start(tracker, phase)
        if marks:
            marks.start(phase)
        tracker.start(phase)

    with tracker, places:
        for micro in range(1, settings.micro_batches + 1):
            suffix = f" {micro}" if settings.micro_batches > 1 else ""
            start("forward")
            loss, found = _forward_saving(model, example_input, settings, tracker, excluded, device)
            if first and micro == 1:
                facts.activations, facts.weight_copies = _activations_and_weight_copies(found, tracker)
                facts.graph_ops = _graph_ops(loss)
            timeline.append((f"after forward{suffix}", tracker.total))
            start("backward")
            _backward(loss)
            del loss
            tracker.label([p.grad for p in trainable if p.grad is not None], "gradients")
            timeline.append((f"after backward{suffix}", tracker.total))
        facts.gradients = _nbytes(p.grad for p in trainable if p.grad is not None)
        start("optimizer step")
        opt.step()
        tracker.label(_state_tensors(opt), "optimizer state")
        facts.optimizer_state = _nbytes(_state_tensors(opt))
        timeline.append(("after optimizer step", tracker.total))
        start("zero_grad")
        opt.zero_grad(set_to_none=True)
        timeline.append(("after zero_grad", tracker.total))
    return StepMemory(
        peak=tracker.peak,
        peak_phase=tracker.peak_phase,
        at_peak=tracker.at_peak(),
        phase_peaks=dict(tracker.phase_peaks),
        timeline=tuple(timeline),
        phase_at_peak=tracker.at_phase_peaks(),
        region_peaks=dict(tracker.region_peaks),
        region_at_peak=tracker.at_region_peaks(),
    )
