"""Modes lab: train()/eval() and the grad mode are two independent switches.

`model.train()` / `model.eval()` change what modules do (dropout drops or not,
BatchNorm normalises with the batch's statistics and updates its running ones, or
uses the running ones). `torch.enable_grad` / `no_grad` / `inference_mode` change what
autograd records. Neither switch touches the other's job.

`mode_grid` runs one real forward in each of the six combinations and measures what
happened. What to expect: train + no_grad still drops units and still moves BatchNorm's
running statistics while building no graph; eval + enable_grad still builds a graph;
inference_mode saves nothing, and its output is an inference tensor: a later op that
must save it for backward (`out * s`) raises, one that saves nothing (`out + s`) works.

From a notebook, on your own model::

    from explorers import modes
    grid = modes.mode_grid(my_model, example_batch)
    grid[("train", "no_grad")].bn_running_stats_changed   # True
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from explorers import saved
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
    """What one forward did in one (behaviour, grad mode) combination, measured.

    When the forward itself raised (BatchNorm in train() on a batch of one), `forward_error`
    holds PyTorch's message and every measurement is None. "The output" is every
    floating-point tensor the model returned.
    """

    behaviour: str
    grad_mode: str
    forward_error: str | None = None
    builds_graph: bool | None = None  # some output has a grad_fn
    dropout_active: bool | None = None  # None: no Dropout module (or the forward failed)
    dropout_zeroed_fraction: float | None = None  # of the non-zero units dropout received, the share it zeroed
    dropout_calls_differ: bool | None = None  # dropout called twice on the same input gave different outputs
    bn_uses_batch_stats: bool | None = None  # None: no BatchNorm module
    bn_running_stats_changed: bool | None = None  # None: no BatchNorm keeps running statistics
    bn_running_mean_shift: float | None = None  # largest change of any running_mean entry
    saved_bytes: int | None = None  # as defined in explorers.saved (parameters, buffers and the input excluded)
    backward_error: str | None = None  # PyTorch's error for output.sum().backward(), None when it worked
    reuse_add_error: str | None = None  # later, (out + s).sum().backward(): add saves no tensor for backward
    reuse_mul_error: str | None = None  # later, (out * s).sum().backward(): mul saves out to compute s's gradient
    is_inference_tensor: bool | None = None

    @property
    def forward_works(self) -> bool:
        return self.forward_error is None

    @property
    def backward_works(self) -> bool | None:
        return self.backward_error is None if self.forward_works else None

    @property
    def reuse_add_works(self) -> bool | None:
        return self.reuse_add_error is None if self.forward_works else None

    @property
    def reuse_mul_works(self) -> bool | None:
        return self.reuse_mul_error is None if self.forward_works else None


@dataclass(frozen=True)
class ModeGrid:
    cells: dict[tuple[str, str], Cell]

    def __getitem__(self, key: tuple[str, str]) -> Cell:
        return self.cells[key]

    def __iter__(self) -> Iterator[Cell]:
        return iter(self.cells.values())


class _Probes:
    """Hooks that measure what each Dropout and BatchNorm module actually did."""

    def __init__(self, model: nn.Module):
        self.dropouts = [m for m in model.modules() if isinstance(m, _DropoutNd)]
        self.norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
        self.seen = self.zeroed = 0
        self.calls_differ = False
        self.batch_stats = False
        self._received: dict[int, torch.Tensor] = {}
        self._before: dict[int, tuple[torch.Tensor | None, torch.Tensor | None]] = {}
        self._handles = []

    def __enter__(self) -> _Probes:
        for m in self.dropouts:
            self._handles.append(m.register_forward_pre_hook(self._dropout_pre_hook))
            self._handles.append(m.register_forward_hook(self._dropout_hook))
        for m in self.norms:
            self._handles.append(m.register_forward_pre_hook(self._norm_pre_hook))
            self._handles.append(m.register_forward_hook(self._norm_hook))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    def _dropout_pre_hook(self, module: nn.Module, inputs: tuple) -> None:
        # A copy: an in-place dropout overwrites its input with its output.
        self._received[id(module)] = inputs[0].detach().clone()

    def _dropout_hook(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        received = self._received.pop(id(module))
        nonzero = received != 0
        self.seen += int(nonzero.sum())
        self.zeroed += int((nonzero & (output == 0)).sum())
        with torch.no_grad():  # a second call on the copy (forward() itself, so no hook recursion)
            again = module.forward(received)
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


def _error_of(action: Callable[[], object]) -> str | None:
    try:
        action()
    except RuntimeError as error:
        return str(error).strip()
    return None


def _fresh_input(example_input):
    """The input with every tensor replaced by a new leaf holding the same values.

    The model may then change it in place, and backward fill its .grad, without touching
    the caller's tensors; a tensor that required grad still does, so the graph is the same.
    """
    return pytree.tree_map_only(
        torch.Tensor, lambda t: t.detach().clone().requires_grad_(t.requires_grad), example_input
    )


def _copy_of(model: nn.Module) -> nn.Module:
    try:
        return copy.deepcopy(model)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"mode_grid measures a deep copy of the model, so that yours is never changed, and this one "
            f"cannot be copied: {error}"
        ) from error


def _float_outputs(output) -> list[torch.Tensor]:
    tensors = [t for t in pytree.tree_leaves(output) if torch.is_tensor(t) and t.is_floating_point()]
    if not tensors:
        raise ValueError(
            f"mode_grid needs a model whose output holds a floating-point tensor; it returned {type(output).__name__}"
        )
    return tensors


def _total(tensors: list[torch.Tensor]) -> torch.Tensor:
    return sum(t.sum() for t in tensors)


def _running_stats(model: nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    return {
        name: (m.running_mean, m.running_var)
        for name, m in model.named_modules()
        if isinstance(m, _BatchNorm) and m.running_mean is not None
    }


def _stats_movement(model: nn.Module, twin: nn.Module) -> tuple[bool | None, float | None]:
    """Whether any BatchNorm running statistic moved, and the largest running_mean change; None without any."""
    start, end = _running_stats(model), _running_stats(twin)  # the caller's model still holds the start
    if not start:
        return None, None
    moved = any(not torch.equal(end[name][i], stats[i]) for name, stats in start.items() for i in (0, 1))
    return moved, max(float((end[name][0] - mean).abs().max()) for name, (mean, _) in start.items())


def _run_cell(model: nn.Module, example_input, seed: int, behaviour: str, grad_mode: str) -> Cell:
    """One forward on fresh copies of the model and the input, from the same random state as every other cell."""
    twin = _copy_of(model).train(behaviour == "train")
    inputs = _fresh_input(example_input)
    found: dict[int, int] = {}
    excluded = saved.excluded_storages(twin, [inputs])
    torch.manual_seed(seed)  # every cell draws the same dropout masks
    try:
        with _Probes(twin) as probes, saved.counting(excluded, found), _GRAD_CONTEXTS[grad_mode]():
            output = twin(inputs)
    except (RuntimeError, ValueError) as error:  # PyTorch's own refusal is a fact of this cell
        return Cell(behaviour, grad_mode, forward_error=str(error).strip())
    outputs = _float_outputs(output)
    moved, shift = _stats_movement(model, twin)
    has_dropout, has_norm = bool(probes.dropouts), bool(probes.norms)
    scale = torch.ones((), device=outputs[0].device, requires_grad=True)
    return Cell(
        behaviour=behaviour,
        grad_mode=grad_mode,
        builds_graph=any(t.grad_fn is not None for t in outputs),
        dropout_active=probes.zeroed > 0 or probes.calls_differ if has_dropout else None,
        dropout_zeroed_fraction=probes.zeroed / max(probes.seen, 1) if has_dropout else None,
        dropout_calls_differ=probes.calls_differ if has_dropout else None,
        bn_uses_batch_stats=probes.batch_stats if has_norm else None,
        bn_running_stats_changed=moved,
        bn_running_mean_shift=shift,
        saved_bytes=sum(found.values()),
        backward_error=_error_of(lambda: _total(outputs).backward()),
        reuse_add_error=_error_of(lambda: _total([t.detach() + scale for t in outputs]).backward()),
        reuse_mul_error=_error_of(lambda: _total([t.detach() * scale for t in outputs]).backward()),
        is_inference_tensor=any(t.is_inference() for t in outputs),
    )


def _device_of(model: nn.Module, example_input) -> torch.device:
    tensors = [*model.parameters(), *model.buffers(), *pytree.tree_leaves(example_input)]
    return next((t.device for t in tensors if torch.is_tensor(t)), torch.device("cpu"))


def mode_grid(model: nn.Module, example_input, seed: int = 0) -> ModeGrid:
    """One real forward in each {train, eval} x {enable_grad, no_grad, inference_mode} combination.

    `model(example_input)` runs on a fresh deep copy of the model and of the input in every
    cell, so each cell starts from the same weights, buffers and random state (dropout masks
    follow `seed`), and the caller's model, buffers, gradients and input are never touched.
    A forward that PyTorch refuses in some cells is recorded there; one that fails in every
    cell is a ValueError.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"mode_grid needs a torch.nn.Module, not {type(model).__name__}")
    with isolated_rng(seed, str(_device_of(model, example_input))):
        cells = {(b, g): _run_cell(model, example_input, seed, b, g) for b in BEHAVIOURS for g in GRAD_MODES}
    if not any(cell.forward_works for cell in cells.values()):
        raise ValueError(
            f"The model's forward failed on example_input in every mode: {cells['eval', 'no_grad'].forward_error}"
        )
    return ModeGrid(cells)
