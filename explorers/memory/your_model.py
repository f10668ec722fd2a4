"""Memory lab: where the memory of one training step goes.

`measure` runs one real training step (forward, backward, optimizer step) and reports
bytes for parameters, gradients, optimizer state, activations saved for backward, and
the peak; with the analytic prediction for each category beside it. It works on any
device: on the CPU, which has no allocator counter, the peak and the live timeline come
from `torch.distributed._tools.mem_tracker.MemTracker` (a private API: torch is pinned
and tests check it), and activations from `saved_tensors_hooks`; on CUDA the peak is
cross-checked against `torch.cuda.max_memory_allocated`.

`estimate` runs the same step on fake tensors (`FakeTensorMode`): nothing is allocated,
so a GPU-sized batch can be explored on a laptop.

    from explorers import memory
    m = memory.measure(model, batch, optimizer="adam", precision="bf16", checkpointing=True)
    m.activations, m.peak, m.predicted

What to expect: parameters, gradients and optimizer state do not depend on the batch;
activations grow linearly with it; checkpointing trades most activations for
recomputation; Adam keeps two fp32 states per parameter, plain SGD none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils.checkpoint import checkpoint

OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
PRECISIONS = ("fp32", "bf16", "fp16")
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries")
_TRACKER_CATEGORIES = {  # MemTracker's names -> ours; inputs, buffers and "other" count as temporaries
    "Parameter": "parameters",
    "Gradient": "gradients",
    "Optstate": "optimizer_state",
    "Activation": "activations",
}


@dataclass(frozen=True)
class Measurement:
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int  # saved for backward: distinct storages, parameters and buffers excluded
    peak: int  # the highest live total during the step
    at_peak: dict[str, int]  # what was alive at that moment, by category (sums to peak)
    predicted: dict[str, int]  # analytic values for the same categories (activations where a formula exists)
    timeline: tuple[tuple[str, int], ...]  # (moment, live bytes) through the step
    estimated: bool  # True when run on fake tensors: nothing was allocated
    cuda_peak: int | None = None  # torch.cuda.max_memory_allocated during the step, where CUDA exists
    notes: tuple[str, ...] = field(default=())


def _optimizer(name: str, parameters) -> torch.optim.Optimizer:
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, not {name!r}")
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01)
    if name == "sgd_momentum":
        return torch.optim.SGD(parameters, lr=0.01, momentum=0.9)
    return {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name](parameters, lr=1e-3, foreach=False)


def predicted_state(model: nn.Module, optimizer: str) -> dict[str, int]:
    """Parameters, gradients and optimizer state from the parameter list alone."""
    params = [p for p in model.parameters() if p.requires_grad]
    parameter_bytes = sum(p.numel() * p.element_size() for p in params)
    optimizer_bytes = {
        "sgd": 0,
        "sgd_momentum": parameter_bytes,  # one momentum buffer per parameter
        # exp_avg and exp_avg_sq per parameter, plus a float32 step count per parameter tensor
        "adam": 2 * parameter_bytes + 4 * len(params),
        "adamw": 2 * parameter_bytes + 4 * len(params),
    }[optimizer]
    return {"parameters": parameter_bytes, "gradients": parameter_bytes, "optimizer_state": optimizer_bytes}


def _autocast(precision: str, device: torch.device):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    if not torch.amp.is_autocast_available(device.type):
        raise ValueError(f"autocast is not available on {device.type}")
    return torch.autocast(device.type, dtype=dtype)


def _forward(model: nn.Module, example_input: torch.Tensor, checkpointing: bool) -> torch.Tensor:
    if not checkpointing:
        return model(example_input)
    if not isinstance(model, nn.Sequential):
        raise ValueError("checkpointing is applied per top-level block, so the model must be an nn.Sequential")
    hidden = example_input
    for block in model:
        hidden = checkpoint(block, hidden, use_reentrant=False)
    return hidden


@contextlib.contextmanager
def _saved_bytes(excluded: set[int], found: dict[int, int]) -> Iterator[None]:
    """Count distinct storages saved for backward (by storage identity, which fake tensors have too)."""

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in excluded:
            found[storage._cdata] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield


def _default_loss(output: torch.Tensor) -> torch.Tensor:
    return output.float().pow(2).mean()


def _live(tracker: MemTracker, device: torch.device) -> int:
    snapshot = tracker.get_tracker_snapshot("current")
    return next((stats["Total"] for dev, stats in snapshot.items() if dev.type == device.type), 0)


def measure(
    model: nn.Module,
    example_input: torch.Tensor,
    optimizer: str = "adam",
    precision: str = "fp32",
    checkpointing: bool = False,
    loss_fn: Callable[[torch.Tensor], torch.Tensor] = _default_loss,
    predicted_activations: int | None = None,
) -> Measurement:
    """One real training step on `model` (trained in place), with every category measured."""
    device = example_input.device
    estimated = isinstance(example_input, torch._subclasses.fake_tensor.FakeTensor)
    opt = _optimizer(optimizer, [p for p in model.parameters() if p.requires_grad])
    model.train()
    state = {t.untyped_storage()._cdata for t in [*model.parameters(), *model.buffers()]}
    saved: dict[int, int] = {}
    timeline: list[tuple[str, int]] = []
    tracker = MemTracker()
    tracker.track_external(model, opt, example_input)
    cuda = device.type == "cuda" and not estimated
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    with tracker:
        timeline.append(("start", _live(tracker, device)))
        with _autocast(precision, device), _saved_bytes(state, saved):
            loss = loss_fn(_forward(model, example_input, checkpointing))
        timeline.append(("after forward", _live(tracker, device)))
        loss.backward()
        del loss
        timeline.append(("after backward", _live(tracker, device)))
        gradients = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
        opt.step()
        timeline.append(("after optimizer step", _live(tracker, device)))
        optimizer_state = sum(
            t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t)
        )
        opt.zero_grad(set_to_none=True)
        timeline.append(("after zero_grad", _live(tracker, device)))
    # Everything live on the device at its highest point: in a process holding only this model and
    # batch, the same quantity as the tracker's peak (the allocator rounds blocks up to 512 bytes).
    cuda_peak = torch.cuda.max_memory_allocated(device) if cuda else None
    peak_snapshot = next(
        stats for dev, stats in tracker.get_tracker_snapshot("peak").items() if dev.type == device.type
    )
    at_peak = {name: 0 for name in CATEGORIES}
    for kind, size in peak_snapshot.items():
        if kind != "Total":
            at_peak[_TRACKER_CATEGORIES.get(getattr(kind, "value", str(kind)), "temporaries")] += size
    predicted = predicted_state(model, optimizer)
    if predicted_activations is not None:
        predicted["activations"] = predicted_activations
    return Measurement(
        parameters=sum(p.numel() * p.element_size() for p in model.parameters()),
        gradients=gradients,
        optimizer_state=optimizer_state,
        activations=sum(saved.values()),
        peak=peak_snapshot["Total"],
        at_peak=at_peak,
        predicted=predicted,
        timeline=tuple(timeline),
        estimated=estimated,
        cuda_peak=cuda_peak,
    )


def estimate(build: Callable[[], tuple[nn.Module, torch.Tensor]], **options) -> Measurement:
    """`measure` on fake tensors: `build()` makes the model and input inside FakeTensorMode, so nothing is allocated."""
    with FakeTensorMode():
        model, example_input = build()
        return measure(model, example_input, **options)
