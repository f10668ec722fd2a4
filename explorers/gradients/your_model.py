"""Gradients lab: why is a gradient None, zero, vanishing or exploding? A doctor for any model.

`diagnose(model, inputs, targets, loss_fn)` runs one forward and one backward on a private
copy of your model and batch, and reports every parameter's gradient (None, exactly zero,
finite or non-finite, and its norm), the norms per layer in forward order, and findings
with the numbers behind them. Your model, its `.grad` fields, its buffers, its train/eval
modes, your tensors and torch's global random state are left exactly as they were.

    from explorers import gradients
    d = gradients.diagnose(model, inputs, targets, loss_fn)
    d.parameters["0.weight"].status   # "none" | "zero" | "finite" | "nonfinite"
    d.layers                          # forward order: grad norm, weight norm, their ratio
    d.findings                        # each with .kind, .parameters, .observation
    d.verdict                         # "healthy", or one line naming what was found

`inputs` is one tensor (model(x)), a tuple (model(*inputs)) or a dict (model(**inputs));
`loss_fn(output, targets)` gets the model's raw output (a tensor, tuple or dict), or
`loss_fn(output)` when `targets` is None. It must return a scalar tensor.

The two families the lab separates: a broken graph gives None (or exactly 0) however the
weights are scaled, because no path, or a path multiplied by zero, leads from the loss to
the parameter; unstable optimisation gives finite norms that are tiny or huge and move
with depth and initial scale.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from explorers import saved
from explorers.rng import isolated_rng

# --- Thresholds: what counts as a finding. Observations quote the number compared with each. ---
VANISHING_RATIO = 1e-3  # first layer's gradient norm below this fraction of the last layer's
EXPLODING_GROWTH = 1e3  # first layer's gradient norm above this multiple of the last layer's
EXPLODING_NORM = 1e3  # any layer's gradient norm above this (a step at lr 1e-3 moves the weights by > 1)
DEAD_UNITS_FRACTION = 0.5  # more than this share of a ReLU's units zero for every sample (narrow layers of
# healthy He-initialised ReLU stacks reach a half over a batch of 32)
DEAD_UNITS_MIN_SAMPLES = 8  # fewer samples per unit than this say nothing: half of a ReLU's outputs are zero anyway

STATUSES = ("none", "zero", "finite", "nonfinite")
KINDS = {
    "backward_error": "Backward failed",
    "broken_graph": "Broken graph",
    "unused": "Unused parameters",
    "frozen": "Frozen parameters",
    "dead_units": "Dead ReLU units",
    "zero_gradient": "Gradient exactly zero",
    "vanishing": "Vanishing gradients",
    "exploding": "Exploding gradients",
    "nonfinite": "Non-finite gradients",
}

# Functions that look at a tensor's metadata (shape, dtype, device) or make a new tensor of its
# shape, without reading its values: a parameter passed to one of these is not "used".
_METADATA_ONLY = frozenset(
    {
        "dim",
        "size",
        "stride",
        "numel",
        "nelement",
        "element_size",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "storage_offset",
        "data_ptr",
        "__len__",
        "empty_like",
        "zeros_like",
        "ones_like",
        "full_like",
        "rand_like",
        "randn_like",
        "new_empty",
        "new_zeros",
        "new_ones",
        "new_full",
        "requires_grad_",
    }
)
_RELU = frozenset({"relu", "relu_"})


@dataclass(frozen=True)
class ParameterGradient:
    name: str
    layer: str  # the module that owns it ("" for the model itself)
    shape: tuple[int, ...]
    requires_grad: bool
    read_in_forward: bool  # some operation of the forward pass or the loss read its values
    status: str  # "none" | "zero" | "finite" | "nonfinite"
    norm: float  # 0.0 for "none"; inf or nan for "nonfinite"
    weight_norm: float


@dataclass(frozen=True)
class LayerGradient:
    """The parameters one module owns directly, as one row of the per-layer table."""

    name: str  # module name, "" for parameters of the model itself
    parameters: tuple[str, ...]
    status: str  # "none" when no parameter got a gradient, else the worst of "nonfinite" > "zero"/"finite"
    grad_norm: float  # over the parameters that got a gradient (0.0 when none did)
    weight_norm: float
    ratio: float | None  # grad_norm / weight_norm, None when the weights are all zero
    is_matrix_layer: bool  # owns a parameter with 2+ dimensions (Linear, Conv, Embedding, RNN)

    @property
    def label(self) -> str:
        return self.name or "(model)"


@dataclass(frozen=True)
class DeadUnits:
    where: str  # the module running the ReLU (its name, or "<module>: relu" for a functional call)
    dead: int
    units: int
    samples: int  # values per unit that were all zero (batch x spatial positions)


@dataclass(frozen=True)
class Finding:
    kind: str
    parameters: tuple[str, ...]
    observation: str  # plain words with the measured numbers and the threshold they were compared with
    modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Diagnosis:
    parameters: dict[str, ParameterGradient]
    layers: tuple[LayerGradient, ...]  # forward order (the order their parameters were first read)
    findings: tuple[Finding, ...]
    verdict: str
    loss: float | None
    backward_error: str | None  # PyTorch's own message, when backward raised
    cuts: tuple[tuple[str, int], ...]  # operations that took a tensor requiring grad and returned one that did not
    dead_units: tuple[DeadUnits, ...]

    def finding(self, kind: str) -> Finding | None:
        return next((f for f in self.findings if f.kind == kind), None)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(f.kind for f in self.findings)

    def with_status(self, status: str) -> tuple[str, ...]:
        return tuple(name for name, p in self.parameters.items() if p.status == status)


class _Watch(TorchFunctionMode):
    """Sees every torch function the forward pass and the loss call, at the Python level.

    Why this and not forward hooks on the owning modules: a hook only says that a module
    ran, not which of its parameters it read (a module may ignore one of its own, and
    parameters held by the model itself have no module of their own to hook). Here each
    call's tensor arguments are matched to the parameters by storage, so `w.T`, `w[0]`,
    `w.detach()` and `w.data` all count as reading `w`, and nothing else does.

    It also records, at the same point:
    - the "cuts": calls that took a tensor requiring grad and returned tensors that do not
      (argmax, an integer cast, detach, anything under no_grad), where a path can end;
    - every ReLU's output, reduced at once to which units were non-zero for some sample.
    """

    def __init__(self, storages: dict[int, list[tuple[str, int, int]]], module_stack: list[str]):
        super().__init__()
        self.storages = storages
        self.first_read: dict[str, int] = {}
        self.cuts: Counter[str] = Counter()
        self.relus: list[DeadUnits] = []
        self.module_stack = module_stack

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in _METADATA_ONLY:
            return result
        inputs = list(saved.tensors_in((args, kwargs)))
        getter = name == "__get__"  # an attribute such as .data, .T or .shape: reads nothing by itself
        for tensor in () if getter else inputs:
            for owner in self._owners(tensor):
                if owner not in self.first_read:
                    self.first_read[owner] = len(self.first_read)
        outputs = list(saved.tensors_in(result))
        if outputs and any(t.requires_grad for t in inputs) and not any(t.requires_grad for t in outputs):
            label = getattr(getattr(func, "__self__", None), "__name__", name) if getter else name
            self.cuts[label if torch.is_grad_enabled() else f"{label} under no_grad"] += 1
        if name in _RELU and torch.is_tensor(result):
            self._record_relu(result)
        return result

    def _owners(self, tensor: torch.Tensor) -> list[str]:
        """The parameters whose memory this tensor reads: by storage, then by byte range when a storage is shared.

        Parameters may be views into one flat buffer (cuDNN's RNN weights): there the storage alone
        would call every one of them read.
        """
        candidates = self.storages.get(_storage_key(tensor), [])
        if len(candidates) <= 1:
            return [name for name, _, _ in candidates]
        start, end = _byte_range(tensor)
        return [name for name, low, high in candidates if start < high and low < end]

    def _record_relu(self, output: torch.Tensor) -> None:
        if output.dim() >= 2:  # units along dim 1: a Linear's features, a convolution's channels
            alive = (output.detach() != 0).transpose(0, 1).reshape(output.shape[1], -1).any(dim=1)
        else:
            alive = output.detach() != 0
        units = alive.numel()
        where = self.module_stack[-1] if self.module_stack else ""
        self.relus.append(DeadUnits(where or "(model)", int(units - alive.sum()), units, output.numel() // units))


def _byte_range(tensor: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte) that a tensor, possibly a strided view, can touch."""
    start = tensor.data_ptr()
    if tensor.numel() == 0:
        return start, start
    span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
    return start, start + span * tensor.element_size()


def _storage_key(tensor: torch.Tensor) -> int | None:
    try:
        return saved.storage_key(tensor)
    except (RuntimeError, NotImplementedError):  # tensors without storage (some subclasses)
        return None


def _private_copy(value: object) -> object:
    """The same nesting of tuples, lists and dicts with every tensor cloned (requires_grad kept)."""
    if torch.is_tensor(value):
        copied = value.detach().clone()
        return copied.requires_grad_(True) if value.requires_grad and copied.is_floating_point() else copied
    if isinstance(value, dict):
        return type(value)((key, _private_copy(item)) for key, item in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_private_copy(item) for item in value))
    if isinstance(value, list | tuple):
        return type(value)(_private_copy(item) for item in value)
    return value


def _call(model: nn.Module, inputs: object) -> object:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


def _module_names(model: nn.Module) -> tuple[list[str], Callable[[], None]]:
    """Hooks that keep the name of the innermost running module on a stack; returns their remover."""
    stack: list[str] = []
    handles = []

    def leave(module: nn.Module, args: tuple, output: object) -> None:
        # Returns None on purpose: a forward hook that returns a value replaces the module's output.
        if stack:
            stack.pop()

    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(lambda module, args, name=name: stack.append(name)))
        handles.append(module.register_forward_hook(leave))

    def remove() -> None:
        for handle in handles:
            handle.remove()

    return stack, remove


def _status(grad: torch.Tensor | None) -> tuple[str, float]:
    if grad is None:
        return "none", 0.0
    norm = float(grad.detach().double().norm())
    if not bool(torch.isfinite(grad).all()):
        return "nonfinite", norm if not math.isfinite(norm) else math.inf
    return ("zero", 0.0) if not bool(grad.any()) else ("finite", norm)


def _combined(norms: list[float]) -> float:
    return math.sqrt(sum(n * n for n in norms))


def _names(names: tuple[str, ...] | list[str], shown: int = 3) -> str:
    quoted = [f"`{n}`" for n in names[:shown]]
    more = len(names) - shown
    return ", ".join(quoted) + (f" and {more} more" if more > 0 else "")


def _sci(x: float) -> str:
    return f"{x:.1e}" if math.isfinite(x) else str(x)


def diagnose(
    model: nn.Module, inputs: object, targets: object, loss_fn: Callable[..., torch.Tensor], seed: int = 0
) -> Diagnosis:
    """One forward and one backward on private copies; every parameter's gradient, the layers and the findings.

    Raises ValueError with a plain reason when the model cannot be run on `inputs` (the forward
    or `loss_fn` raised, or the loss is not a scalar tensor). An error raised by backward is not
    raised: it becomes a `backward_error` finding carrying PyTorch's own message. Dropout masks
    follow `seed`; torch's global random state is left as it was.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    try:
        copied = copy.deepcopy(model)
    except Exception as error:  # any reason a model cannot be copied is the user's to read
        raise ValueError(f"diagnose works on a copy of the model, and copy.deepcopy(model) failed: {error}") from error
    for parameter in copied.parameters():
        parameter.grad = None
    x, y = _private_copy(inputs), _private_copy(targets)
    named = dict(copied.named_parameters())
    storages: dict[int, list[tuple[str, int, int]]] = {}
    for name, p in named.items():
        storages.setdefault(saved.storage_key(p), []).append((name, *_byte_range(p)))
    device = next(iter([*copied.parameters(), *copied.buffers()]), torch.empty(0)).device
    stack, remove_hooks = _module_names(copied)
    watch = _Watch(storages, stack)
    try:
        with isolated_rng(seed, str(device)), torch.inference_mode(False), torch.enable_grad():
            with watch:
                loss = _forward_and_loss(copied, x, y, loss_fn)
            backward_error = None
            try:
                loss.backward()
            except Exception as error:  # PyTorch's message is the finding, never raised
                backward_error = str(error).strip() or type(error).__name__
    finally:
        remove_hooks()
    parameters = {}
    for name, p in named.items():
        status, norm = _status(p.grad)
        parameters[name] = ParameterGradient(
            name=name,
            layer=name.rpartition(".")[0],
            shape=tuple(p.shape),
            requires_grad=p.requires_grad,
            read_in_forward=name in watch.first_read,
            status=status,
            norm=norm,
            weight_norm=float(p.detach().double().norm()),
        )
    layers = _layers(parameters, watch.first_read)
    loss_value = float(loss.detach().float().reshape(()))
    cuts = tuple(sorted(watch.cuts.items(), key=lambda item: -item[1]))
    dead = tuple(watch.relus)
    findings = _findings(parameters, layers, loss_value, backward_error, loss.requires_grad, cuts, dead)
    return Diagnosis(
        parameters=parameters,
        layers=layers,
        findings=findings,
        verdict=_verdict(findings),
        loss=loss_value,
        backward_error=backward_error,
        cuts=cuts,
        dead_units=dead,
    )


def _forward_and_loss(model: nn.Module, x: object, y: object, loss_fn: Callable) -> torch.Tensor:
    try:
        output = _call(model, x)
    except Exception as error:  # whatever the user's code raised, said plainly
        raise ValueError(f"the model's forward pass failed on these inputs: {type(error).__name__}: {error}") from error
    try:
        loss = loss_fn(output) if y is None else loss_fn(output, y)
    except Exception as error:  # whatever the user's code raised, said plainly
        raise ValueError(f"loss_fn failed on the model's output: {type(error).__name__}: {error}") from error
    if not torch.is_tensor(loss):
        raise ValueError(f"loss_fn must return a scalar tensor; it returned {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(
            f"loss_fn must return a scalar tensor; it returned one of shape {tuple(loss.shape)}: "
            "reduce it (for example with .mean()) before backward"
        )
    if not loss.is_floating_point():
        raise ValueError(f"loss_fn must return a floating-point scalar; it returned {loss.dtype}")
    return loss.reshape(())


def _layers(parameters: dict[str, ParameterGradient], first_read: dict[str, int]) -> tuple[LayerGradient, ...]:
    grouped: dict[str, list[ParameterGradient]] = {}
    for p in parameters.values():
        grouped.setdefault(p.layer, []).append(p)
    unread = len(parameters)  # layers no operation read go last, in registration order

    def order(item: tuple[int, tuple[str, list[ParameterGradient]]]) -> tuple[int, int]:
        index, (_, members) = item
        return min((first_read.get(p.name, unread) for p in members), default=unread), index

    layers = []
    for _, (name, members) in sorted(enumerate(grouped.items()), key=order):
        statuses = {p.status for p in members}
        got = [p for p in members if p.status != "none"]
        if not got:
            status = "none"
        elif "nonfinite" in statuses:
            status = "nonfinite"
        elif "finite" in statuses:
            status = "finite"
        else:
            status = "zero"
        grad_norm = _combined([p.norm for p in got])
        weight_norm = _combined([p.weight_norm for p in members])
        layers.append(
            LayerGradient(
                name=name,
                parameters=tuple(p.name for p in members),
                status=status,
                grad_norm=grad_norm,
                weight_norm=weight_norm,
                ratio=grad_norm / weight_norm if weight_norm > 0 and got else None,
                is_matrix_layer=any(len(p.shape) >= 2 for p in members),
            )
        )
    return tuple(layers)


def depth_layers(layers: tuple[LayerGradient, ...]) -> list[LayerGradient]:
    """The layers compared through depth: finite gradients, and matrix layers when there are two or more.

    Norm layers (BatchNorm, LayerNorm) hold vectors whose gradients follow other rules; comparing
    the first and last Linear/Conv layers is what "through depth" means.
    """
    finite = [layer for layer in layers if layer.status == "finite"]
    matrices = [layer for layer in finite if layer.is_matrix_layer]
    return matrices if len(matrices) >= 2 else finite


def _findings(
    parameters: dict[str, ParameterGradient],
    layers: tuple[LayerGradient, ...],
    loss: float,
    backward_error: str | None,
    loss_requires_grad: bool,
    cuts: tuple[tuple[str, int], ...],
    dead: tuple[DeadUnits, ...],
) -> tuple[Finding, ...]:
    findings = []
    frozen = tuple(n for n, p in parameters.items() if not p.requires_grad)
    trainable = [p for p in parameters.values() if p.requires_grad]
    if backward_error is not None:
        findings.append(Finding("backward_error", (), f"backward raised: {backward_error}"))
    backward_ran = backward_error is None
    cut_text = ", ".join(f"`{name}` ×{count}" for name, count in cuts[:4])
    broken = tuple(p.name for p in trainable if p.read_in_forward and p.status == "none")
    if broken and (backward_ran or not loss_requires_grad):
        where = (
            "the loss itself has no grad_fn, so backward has nowhere to start"
            if not loss_requires_grad
            else "no path leads from the loss back to them"
        )
        findings.append(
            Finding(
                "broken_graph",
                broken,
                f"{len(broken)} trainable parameter(s) ({_names(broken)}) were read by the forward pass, yet their "
                f".grad is None after backward: {where}."
                + (f" Operations where a tensor requiring grad went in and none came out: {cut_text}." if cuts else ""),
            )
        )
    unused = tuple(p.name for p in trainable if not p.read_in_forward and p.status == "none")
    if unused and backward_ran:
        findings.append(
            Finding(
                "unused",
                unused,
                f"{len(unused)} trainable parameter(s) ({_names(unused)}) were not read by the forward pass or "
                "the loss: nothing connects them to the loss, so their .grad stays None.",
            )
        )
    if frozen:
        read = sum(parameters[n].read_in_forward for n in frozen)
        findings.append(
            Finding(
                "frozen",
                frozen,
                f"{len(frozen)} parameter(s) ({_names(frozen)}) have requires_grad=False ({read} of them read by the "
                "forward pass): autograd records no path to them by design, and their .grad stays None.",
            )
        )
    dead_layers = [d for d in dead if d.samples >= DEAD_UNITS_MIN_SAMPLES and d.dead > DEAD_UNITS_FRACTION * d.units]
    zero = tuple(p.name for p in trainable if p.status == "zero")
    if dead_layers:
        parts = [f"`{d.where}`: {d.dead} of {d.units} units zero for all {d.samples} samples" for d in dead_layers]
        findings.append(
            Finding(
                "dead_units",
                zero if backward_ran else (),
                "; ".join(parts)
                + f" (flagged above {DEAD_UNITS_FRACTION:.0%} of a layer's units)."
                + (
                    f" Parameters whose gradient is exactly zero: {_names(zero)}: ReLU passes no gradient "
                    "where its output is zero."
                    if zero and backward_ran
                    else ""
                ),
                tuple(d.where for d in dead_layers),
            )
        )
    elif zero and backward_ran:
        findings.append(
            Finding(
                "zero_gradient",
                zero,
                f"{len(zero)} parameter(s) ({_names(zero)}) got a gradient of exactly zero: a path exists, "
                "but something on it multiplies by zero for this batch (a mask, a saturated or dead unit).",
            )
        )
    nonfinite = tuple(p.name for p in trainable if p.status == "nonfinite")
    if nonfinite or not math.isfinite(loss):
        observation = f"the loss is {loss}. " if not math.isfinite(loss) else ""
        if nonfinite:
            observation += f"{len(nonfinite)} parameter(s) ({_names(nonfinite)}) have inf or nan in their gradient."
        findings.append(Finding("nonfinite", nonfinite, observation.strip()))
    if backward_ran:
        findings += _depth_findings(layers)
    return tuple(findings)


def _depth_findings(layers: tuple[LayerGradient, ...]) -> list[Finding]:
    findings = []
    compared = depth_layers(layers)
    if len(compared) >= 2:
        first, last = compared[0], compared[-1]
        if last.grad_norm > 0 and first.grad_norm > 0:
            ratio = first.grad_norm / last.grad_norm
            if ratio < VANISHING_RATIO:
                small = tuple(
                    n
                    for layer in compared
                    if layer.grad_norm < VANISHING_RATIO * last.grad_norm
                    for n in layer.parameters
                )
                findings.append(
                    Finding(
                        "vanishing",
                        small,
                        f"first layer (`{first.label}`) gradient norm is {_sci(first.grad_norm)}, {_sci(ratio)} of the "
                        f"last layer's (`{last.label}`, {_sci(last.grad_norm)}); flagged below {VANISHING_RATIO:.0e}.",
                        (first.name, last.name),
                    )
                )
            elif ratio > EXPLODING_GROWTH:
                findings.append(
                    Finding(
                        "exploding",
                        first.parameters,
                        f"first layer (`{first.label}`) gradient norm is {_sci(first.grad_norm)}, {_sci(ratio)} "
                        f"times the last layer's (`{last.label}`, {_sci(last.grad_norm)}); flagged above "
                        f"{EXPLODING_GROWTH:.0e}.",
                        (first.name, last.name),
                    )
                )
                return findings
    large = [layer for layer in layers if layer.status == "finite" and layer.grad_norm > EXPLODING_NORM]
    if large:
        top = max(large, key=lambda layer: layer.grad_norm)
        ratio = f", {_sci(top.ratio)} times its weight norm" if top.ratio is not None else ""
        findings.append(
            Finding(
                "exploding",
                tuple(n for layer in large for n in layer.parameters),
                f"{len(large)} layer(s) have a gradient norm above {EXPLODING_NORM:.0e}; the largest, `{top.label}`, "
                f"is {_sci(top.grad_norm)}{ratio}.",
                tuple(layer.name for layer in large),
            )
        )
    return findings


def _verdict(findings: tuple[Finding, ...]) -> str:
    if not findings:
        return "healthy"
    parts = []
    for finding in findings:
        if finding.kind == "backward_error":
            message = finding.observation.removeprefix("backward raised: ").split("\n")[0]
            parts.append(f"{KINDS[finding.kind]} ({message[:80]}{'…' * (len(message) > 80)})")
        elif finding.parameters:
            parts.append(
                f"{KINDS[finding.kind]}: {', '.join(finding.parameters[:2])}{'…' * (len(finding.parameters) > 2)}"
            )
        else:
            parts.append(KINDS[finding.kind])
    return "; ".join(parts)
