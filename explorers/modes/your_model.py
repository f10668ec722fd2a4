"""Modes lab: train()/eval() and the grad mode are two independent switches.

`model.train()` / `model.eval()` change what modules do (dropout drops or not,
BatchNorm normalises with the batch's statistics and updates its running ones, or
uses the running ones). `torch.enable_grad` / `no_grad` / `inference_mode` change what
autograd records. Neither switch touches the other's job.

`mode_grid` runs one real forward in each of the six combinations and measures what
happened. What to expect: train + no_grad still drops units and still moves BatchNorm's
running statistics while building no graph; eval + enable_grad still builds a graph;
inference_mode saves nothing, and an output it creates is an inference tensor: a later op
that must save it for backward (`out * s`) raises, one that saves nothing (`out + s`) works.
(A forward that re-enables grad inside `no_grad` records there; the grid measures it.)

From a notebook, on your own model::

    from explorers import modes
    grid = modes.mode_grid(my_model, example_batch)
    grid[("train", "no_grad")].bn_running_stats_changed   # True

`example_batch` follows `explorers.batches`: a tensor is `model(x)`, a tuple or list
`model(*batch)`, a dict (Hugging Face style, `labels` included or not) `model(**batch)`. The
output may be a tensor, a tuple, a dict or a `ModelOutput`; "the output" is every floating-point
tensor in it. Every cell runs a fresh deep copy: module hooks on your model fire on the copies
(a UserWarning says so), tensor hooks are registered again on the copies' parameters.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from explorers import batches, saved
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
    dropout_received: int | None = None  # units the Dropout modules received, zeros (a ReLU's, say) included
    dropout_nonzero: int | None = None  # of those, the non-zero ones: the only ones dropping can change
    dropout_zeroed: int | None = None  # of the non-zero ones, those dropout's output holds as zero
    dropout_calls_differ: bool | None = None  # dropout called twice on the same input gave different outputs
    bn_uses_batch_stats: bool | None = None  # None: no BatchNorm module
    bn_running_stats_changed: bool | None = None  # None: no BatchNorm keeps running statistics
    bn_running_mean_shift: float | None = None  # largest change of any running_mean entry
    saved_bytes: int | None = None  # as defined in explorers.saved (parameters, buffers and the input excluded)
    backward_error: str | None = None  # PyTorch's error for output.sum().backward(), None when it worked
    reuse_add_error: str | None = None  # later, (out + s).sum().backward(): add saves no tensor for backward
    reuse_mul_error: str | None = None  # later, (out * s).sum().backward(): mul saves out to compute s's gradient
    is_inference_tensor: bool | None = None
    # A second forward from the same weights and buffers under another seed gave a different output.
    output_random: bool | None = None
    buffers_moved: tuple[str, ...] | None = None  # the buffers (any module's) whose values this forward changed
    reuse_inplace_error: str | None = None  # later, outside any grad-mode block, out.add_(1)

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

    @property
    def reuse_inplace_works(self) -> bool | None:
        return self.reuse_inplace_error is None if self.forward_works else None


@dataclass(frozen=True)
class TrainingReader:
    """A module whose own behaviour measured different between train() and eval() on the same input.

    Each module is replayed alone, on the input it received in a train() forward, from the
    model's starting weights and buffers; a module is listed when its output or its own buffers
    changed and no module inside it accounts for the output change (the innermost such module).
    """

    name: str  # as in model.named_modules(); "" is the model itself
    kind: str  # the module's class name
    train_eval_differ: bool  # train() and eval() gave different outputs on the same input and seed
    random_in_train: bool  # two train() calls on the same input under different seeds differed
    buffers_moved: tuple[str, ...]  # its own buffers that one train() call changed


@dataclass(frozen=True)
class ModeGrid:
    cells: dict[tuple[str, str], Cell]
    readers: tuple[TrainingReader, ...] = ()  # the modules that measured as reading `training`

    def __getitem__(self, key: tuple[str, str]) -> Cell:
        return self.cells[key]

    def __iter__(self) -> Iterator[Cell]:
        return iter(self.cells.values())


class _Probes:
    """Hooks that measure what each Dropout and BatchNorm module actually did."""

    def __init__(self, model: nn.Module):
        self.dropouts = [m for m in model.modules() if isinstance(m, _DropoutNd)]
        self.norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
        self.received = self.seen = self.zeroed = 0  # all units in, the non-zero ones, those dropout zeroed
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
        self.received += received.numel()
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
    return batches.fresh_batch(example_input)


def _copy_of(model: nn.Module) -> nn.Module:
    return batches.copy_model(model, "mode_grid")


def _float_outputs(output) -> list[torch.Tensor]:
    tensors = [t for t in batches.tensors_in(output) if t.is_floating_point()]
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


def _moved_buffers(start: nn.Module, end: nn.Module, recurse: bool = True) -> tuple[str, ...]:
    """Names of the buffers whose values differ between two copies of one module."""
    before = dict(start.named_buffers(recurse=recurse))
    return tuple(
        name
        for name, value in end.named_buffers(recurse=recurse)
        if name in before and not _same_values(before[name], value)
    )


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _same_outputs(first, second) -> bool:
    tensors = [batches.tensors_in(o) for o in (first, second)]
    return len(tensors[0]) == len(tensors[1]) and all(map(_same_values, *tensors))


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
            output = batches.call(twin, inputs)
    except torch.OutOfMemoryError:
        raise
    except Exception as error:  # PyTorch's own refusal is a fact of this cell; one in every cell is raised
        return Cell(behaviour, grad_mode, forward_error=str(error).strip() or type(error).__name__)
    outputs = _float_outputs(output)
    moved, shift = _stats_movement(model, twin)
    again = _second_forward(model, example_input, seed + 1, behaviour, grad_mode)
    has_dropout, has_norm = bool(probes.dropouts), bool(probes.norms)
    scale = torch.ones((), device=outputs[0].device, requires_grad=True)
    return Cell(
        behaviour=behaviour,
        grad_mode=grad_mode,
        builds_graph=any(t.grad_fn is not None for t in outputs),
        dropout_active=probes.zeroed > 0 or probes.calls_differ if has_dropout else None,
        dropout_zeroed_fraction=probes.zeroed / max(probes.seen, 1) if has_dropout else None,
        dropout_received=probes.received if has_dropout else None,
        dropout_nonzero=probes.seen if has_dropout else None,
        dropout_zeroed=probes.zeroed if has_dropout else None,
        dropout_calls_differ=probes.calls_differ if has_dropout else None,
        bn_uses_batch_stats=probes.batch_stats if has_norm else None,
        bn_running_stats_changed=moved,
        bn_running_mean_shift=shift,
        saved_bytes=sum(found.values()),
        backward_error=_error_of(lambda: _total(outputs).backward()),
        reuse_add_error=_error_of(lambda: _total([t.detach() + scale for t in outputs]).backward()),
        reuse_mul_error=_error_of(lambda: _total([t.detach() * scale for t in outputs]).backward()),
        is_inference_tensor=any(t.is_inference() for t in outputs),
        output_random=None if again is None else not _same_outputs(output, again),
        buffers_moved=_moved_buffers(model, twin),
        # Last: it changes the output's values. On the output itself: a view made later (out.detach())
        # escapes PyTorch's in-place check on inference tensors.
        reuse_inplace_error=_error_of(lambda: [t.add_(1) for t in outputs]),
    )


def _second_forward(model: nn.Module, example_input, seed: int, behaviour: str, grad_mode: str):
    """The same forward on fresh copies under another seed: what differs is the forward's own randomness."""
    twin = _copy_of(model).train(behaviour == "train")
    torch.manual_seed(seed)
    try:
        with _GRAD_CONTEXTS[grad_mode]():
            return batches.call(twin, _fresh_input(example_input))
    except Exception:  # the first forward of this cell already recorded the failure
        return None


def _inputs_by_module(model: nn.Module, example_input, seed: int) -> dict[str, tuple[tuple, dict]]:
    """What each module received (args, kwargs) on its first call, in one train() forward under no_grad."""
    twin = _copy_of(model).train()
    received: dict[str, tuple[tuple, dict]] = {}

    def recorder(name: str):
        def hook(module, args, kwargs):
            received.setdefault(name, _fresh_input((args, kwargs)))

        return hook

    handles = [m.register_forward_pre_hook(recorder(name), with_kwargs=True) for name, m in twin.named_modules()]
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            batches.call(twin, _fresh_input(example_input))
    except Exception:  # noqa: BLE001
        pass  # the modules reached before the failure were still recorded
    finally:
        for handle in handles:
            handle.remove()
    return received


def _replay(module: nn.Module, received: tuple[tuple, dict], seed: int, train: bool):
    """One call of a fresh copy of the module on a copy of what it received: (output, the copy after it)."""
    twin = copy.deepcopy(module).train(train)
    args, kwargs = _fresh_input(received)
    torch.manual_seed(seed)
    with torch.no_grad():
        return twin(*args, **kwargs), twin


def _measure_module(name: str, module: nn.Module, received, seed: int) -> TrainingReader | None:
    try:
        trained, after = _replay(module, received, seed, train=True)
        reseeded, _ = _replay(module, received, seed + 1, train=True)
        evaluated, _ = _replay(module, received, seed, train=False)
    except (RuntimeError, ValueError, TypeError):  # a module that cannot be called alone is not measured
        return None
    return TrainingReader(
        name=name,
        kind=type(module).__name__,
        train_eval_differ=not _same_outputs(trained, evaluated),
        random_in_train=not _same_outputs(trained, reseeded),
        buffers_moved=_moved_buffers(module, after, recurse=False),
    )


def training_readers(model: nn.Module, example_input, seed: int = 0) -> tuple[TrainingReader, ...]:
    """The modules whose own output or buffers measured different under train() than under eval().

    Measured on every module, whatever its type: RReLU, an LSTM's inter-layer dropout, or a
    custom forward that reads `self.training` are found like Dropout and BatchNorm are.
    """
    modules = dict(model.named_modules())
    measured = [
        _measure_module(name, modules[name], received, seed)
        for name, received in _inputs_by_module(model, example_input, seed).items()
    ]
    changed = [r for r in measured if r and (r.train_eval_differ or r.random_in_train or r.buffers_moved)]
    output_changed = {r.name for r in changed if r.train_eval_differ or r.random_in_train}

    def inside(inner: str, outer: str) -> bool:
        return inner != outer and (outer == "" or inner.startswith(outer + "."))

    return tuple(r for r in changed if r.buffers_moved or not any(inside(other, r.name) for other in output_changed))


def _device_of(model: nn.Module, example_input) -> torch.device:
    tensors = [*model.parameters(), *model.buffers(), *batches.tensors_in(example_input)]
    return next((t.device for t in tensors if torch.is_tensor(t)), torch.device("cpu"))


def mode_grid(model: nn.Module, example_input, seed: int = 0) -> ModeGrid:
    """One real forward in each {train, eval} x {enable_grad, no_grad, inference_mode} combination.

    `model(example_input)` (`model(*batch)` for a tuple, `model(**batch)` for a dict: `explorers.batches`)
    runs on a fresh deep copy of the model and of the input in every
    cell, so each cell starts from the same weights, buffers and random state (dropout masks
    follow `seed`), and the caller's model, buffers, gradients and input are never touched.
    A forward that PyTorch refuses in some cells is recorded there; one that fails in every
    cell is a ValueError.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"mode_grid needs a torch.nn.Module, not {type(model).__name__}")
    batches.warn_module_hooks(model, "mode_grid")
    with isolated_rng(seed, str(_device_of(model, example_input))):
        cells = {(b, g): _run_cell(model, example_input, seed, b, g) for b in BEHAVIOURS for g in GRAD_MODES}
        if not any(cell.forward_works for cell in cells.values()):
            raise ValueError(
                f"The model's forward failed on {batches.describe_call(example_input)} in every mode: "
                f"{cells['eval', 'no_grad'].forward_error}"
            )
        readers = training_readers(model, example_input, seed)
    return ModeGrid(cells, readers)
