"""Modes lab: train()/eval() and the grad mode are two independent switches.

`model.train()` / `model.eval()` change what modules do (dropout drops or not,
BatchNorm normalises with the batch's statistics and updates its running ones, or
uses the running ones). `torch.enable_grad` / `no_grad` / `inference_mode` change what
autograd records. Neither switch touches the other's job.

`mode_grid` runs one real forward in each of the six combinations, from the same
starting state, and measures what happened. What to expect: train + no_grad still
drops units and still moves BatchNorm's running statistics while building no graph;
eval + enable_grad still builds a graph; inference_mode saves nothing, and its outputs
cannot enter autograd later.

From a notebook, on your own model::

    from explorers import modes
    grid = modes.mode_grid(my_model, example_batch)
    grid[("train", "no_grad")].bn_running_stats_changed   # True
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from explorers.rng import isolated_rng

BEHAVIOURS = ("train", "eval")
GRAD_MODES = ("enable_grad", "no_grad", "inference_mode")
_GRAD_CONTEXTS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "enable_grad": torch.enable_grad,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}


@dataclass(frozen=True)
class Cell:
    """What one forward did in one (behaviour, grad mode) combination, measured."""

    behaviour: str
    grad_mode: str
    builds_graph: bool  # the output has a grad_fn
    dropout_active: bool | None  # None: the model has no dropout
    dropout_zeroed_fraction: float | None  # of the units dropout received, the share it zeroed
    dropout_calls_differ: bool | None  # dropout called twice on the same input gave different outputs
    bn_uses_batch_stats: bool | None  # None: the model has no BatchNorm
    bn_running_stats_changed: bool | None
    bn_running_mean_shift: float | None  # largest change of any running_mean entry
    saved_bytes: int  # distinct storages saved for backward, parameters and buffers excluded
    backward_error: str | None  # PyTorch's error for output.sum().backward(), None when it worked
    reuse_error: str | None  # PyTorch's error when the output later enters autograd as a constant
    is_inference_tensor: bool

    @property
    def backward_works(self) -> bool:
        return self.backward_error is None

    @property
    def reusable_in_autograd(self) -> bool:
        return self.reuse_error is None


@dataclass(frozen=True)
class ModeGrid:
    cells: dict[tuple[str, str], Cell]

    def __getitem__(self, key: tuple[str, str]) -> Cell:
        return self.cells[key]

    def __iter__(self) -> Iterator[Cell]:
        return iter(self.cells.values())


class _ModelState:
    """Module modes, buffers and parameter gradients, saved once and put back on demand."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.training = {name: m.training for name, m in model.named_modules()}
        self.buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
        self.grads = {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
        tensors = [*model.parameters(), *model.buffers()]
        self.storages = {t.untyped_storage().data_ptr() for t in tensors}

    def restore(self) -> None:
        modules = dict(self.model.named_modules())
        for name, training in self.training.items():
            modules[name].training = training
        with torch.no_grad():
            for name, buffer in self.model.named_buffers():
                buffer.copy_(self.buffers[name])
        for name, p in self.model.named_parameters():
            p.grad = None if self.grads[name] is None else self.grads[name].clone()


class _Probes:
    """Forward hooks that measure what each Dropout and BatchNorm module actually did."""

    def __init__(self, model: nn.Module):
        self.dropouts = [m for m in model.modules() if isinstance(m, _DropoutNd)]
        self.norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
        self.kept = self.seen = 0
        self.zeroed = 0
        self.calls_differ = False
        self.batch_stats = False
        self._before: dict[int, tuple[torch.Tensor | None, torch.Tensor | None]] = {}
        self._handles = []

    def __enter__(self) -> _Probes:
        for m in self.dropouts:
            self._handles.append(m.register_forward_hook(self._dropout_hook))
        for m in self.norms:
            self._handles.append(m.register_forward_pre_hook(self._norm_pre_hook))
            self._handles.append(m.register_forward_hook(self._norm_hook))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    def _dropout_hook(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        received = inputs[0] != 0
        self.seen += int(received.sum())
        self.zeroed += int((received & (output == 0)).sum())
        with torch.no_grad():  # a second call on the same input (forward() itself, so no hook recursion)
            again = module.forward(inputs[0])
        self.calls_differ |= not torch.equal(again, output)

    def _norm_pre_hook(self, module: _BatchNorm, inputs: tuple) -> None:
        stats = (module.running_mean, module.running_var)
        self._before[id(module)] = tuple(None if s is None else s.detach().clone() for s in stats)

    def _norm_hook(self, module: _BatchNorm, inputs: tuple, output: torch.Tensor) -> None:
        mean, var = self._before.pop(id(module))
        if mean is None:  # track_running_stats=False: batch statistics are all it has
            self.batch_stats = True
            return
        with torch.no_grad():
            with_running = nn.functional.batch_norm(
                inputs[0], mean, var, module.weight, module.bias, False, 0.0, module.eps
            )
        self.batch_stats |= not torch.allclose(with_running, output, rtol=1e-4, atol=1e-5)


def _saved_bytes_hooks(excluded: set[int], found: dict[int, int]):
    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded:
            found[storage.data_ptr()] = storage.nbytes()
        return tensor

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)


def _error_of(action: Callable[[], object]) -> str | None:
    try:
        action()
    except RuntimeError as error:
        return str(error).strip()
    return None


def _first_tensor(output) -> torch.Tensor:
    if torch.is_tensor(output):
        return output
    values = output.values() if isinstance(output, dict) else output
    return next(v for v in values if torch.is_tensor(v))


def _bn_shift(state: _ModelState, model: nn.Module) -> float:
    shifts = [
        float((buffer - state.buffers[name]).abs().max())
        for name, buffer in model.named_buffers()
        if name.endswith("running_mean")
    ]
    return max(shifts, default=0.0)


def _run_cell(model: nn.Module, example_input, state: _ModelState, behaviour: str, grad_mode: str) -> Cell:
    state.restore()
    model.train(behaviour == "train")
    saved: dict[int, int] = {}
    with _Probes(model) as probes, _saved_bytes_hooks(state.storages, saved), _GRAD_CONTEXTS[grad_mode]():
        output = _first_tensor(model(example_input))
    buffers_changed = any(not torch.equal(b, state.buffers[n]) for n, b in model.named_buffers())
    has_dropout, has_norm = bool(probes.dropouts), bool(probes.norms)
    scale = torch.ones((), device=output.device, requires_grad=True)
    return Cell(
        behaviour=behaviour,
        grad_mode=grad_mode,
        builds_graph=output.grad_fn is not None,
        dropout_active=probes.zeroed > 0 or probes.calls_differ if has_dropout else None,
        dropout_zeroed_fraction=probes.zeroed / max(probes.seen, 1) if has_dropout else None,
        dropout_calls_differ=probes.calls_differ if has_dropout else None,
        bn_uses_batch_stats=probes.batch_stats if has_norm else None,
        bn_running_stats_changed=buffers_changed if has_norm else None,
        bn_running_mean_shift=_bn_shift(state, model) if has_norm else None,
        saved_bytes=sum(saved.values()),
        backward_error=_error_of(lambda: output.float().sum().backward()),
        reuse_error=_error_of(lambda: (output.detach() * scale).sum().backward()),
        is_inference_tensor=output.is_inference(),
    )


def mode_grid(model: nn.Module, example_input, seed: int = 0) -> ModeGrid:
    """One real forward in each {train, eval} x {enable_grad, no_grad, inference_mode} combination.

    Every cell starts from the model's state on entry (modes, buffers, gradients), and
    the model is left exactly as it was found. Dropout masks follow `seed`.
    """
    state = _ModelState(model)
    device = next(iter([*model.parameters(), *model.buffers()]), torch.empty(0)).device
    try:
        with isolated_rng(seed, str(device)):
            cells = {(b, g): _run_cell(model, example_input, state, b, g) for b in BEHAVIOURS for g in GRAD_MODES}
    finally:
        state.restore()
    return ModeGrid(cells)
