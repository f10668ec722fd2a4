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

`inputs` is a batch as every notebook API takes one (`explorers.batches`): a tensor is
`model(x)`, a tuple or list `model(*inputs)`, a dict `model(**inputs)`. `targets` is optional:
`loss_fn(output, targets)` with one, `loss_fn(output, inputs)` without (so
`loss_fn=lambda out, batch: out.loss` fits a Hugging Face model given `labels`), `loss_fn(output)`
for a one-argument loss; the output is passed as the model returned it. With no `loss_fn`, the
output's own `loss` is used. It must be a scalar tensor.

Hooks: the copy keeps your module hooks (they fire on it; a UserWarning says so) and gets your
parameters' tensor hooks registered again (`register_hook`, post-accumulate-grad hooks), so a
gradient your hooks change is diagnosed as your training would get it.

The two families the lab separates: a broken graph gives None (or exactly 0) however the
weights are scaled, because no path, or a path multiplied by zero, leads from the loss to
the parameter; unstable optimisation gives finite norms that are tiny or huge and move
with depth and initial scale.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from explorers import batches, saved
from explorers.rng import isolated_rng

# --- Thresholds: what counts as a finding. Observations quote the number compared with each. ---
# Vanishing and exploding compare comparable trainable layers through depth: the same role in every block
# (`encoder.layer.*.attention.self.query`), else layers of one type; never attention Q/K against an MLP.
VANISHING_RATIO = 1e-3  # first compared layer's gradient norm below this fraction of the last one's
EXPLODING_GROWTH = 1e3  # first compared layer's gradient norm above this multiple of the last one's
WEIGHT_SCALE_OUTLIER = 100.0  # a layer's weight RMS above this multiple of the median of the other matrix layers
EXPLODING_NORM = 1e3  # any layer's gradient norm above this (a step at lr 1e-3 moves the weights by > 1)
DEAD_UNITS_FRACTION = 0.5  # more than this share of a ReLU's units zero for every sample (narrow layers of
# healthy He-initialised ReLU stacks reach a half over a batch of 32)
DEAD_UNITS_MIN_SAMPLES = 8  # fewer samples per unit than this say nothing: half of a ReLU's outputs are zero anyway

STATUSES = ("none", "zero", "finite", "nonfinite")
KINDS = {
    "backward_error": "Backward failed",
    "broken_graph": "Broken graph",
    "none_returned": "No gradient returned",
    "unused": "Unused parameters",
    "frozen": "Frozen parameters",
    "dead_units": "Dead ReLU units",
    "zero_gradient": "Gradient exactly zero",
    "weight_scale": "Weight-scale outlier",
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
    # Whether its AccumulateGrad node is reachable from the loss's grad_fn (a path exists in the graph), and the
    # graph nodes that link to it directly; False and () when the loss has no grad_fn.
    in_graph: bool = False
    linked_from: tuple[str, ...] = ()


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
    kind: str = ""  # the module's class name
    trainable: bool = True  # some parameter of it requires grad
    matrix_rms: float | None = None  # root mean square of its 2+-dimensional parameters' elements
    matrix_grad_norm: float | None = None  # over its 2+-dimensional parameters that got a gradient (None if none)

    @property
    def depth_norm(self) -> float:
        """The norm compared through depth: weights against weights, since a bias's gradient follows other rules."""
        return self.grad_norm if self.matrix_grad_norm is None else self.matrix_grad_norm

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
    # The ReLU calls the rerun with the flagged ReLUs as the identity replaced: None when no rerun ran or it failed.
    relus_replaced: int | None = None

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

    def __init__(
        self, storages: dict[int, list[tuple[str, int, int]]], module_stack: list[str], bypass: frozenset = frozenset()
    ):
        super().__init__()
        self.bypass = bypass  # modules whose ReLUs return their input unchanged (the dead-unit counterfactual)
        self.storages = storages
        self.first_read: dict[str, int] = {}
        self.cuts: Counter[str] = Counter()
        self.relus: list[DeadUnits] = []
        self.replaced = 0  # ReLU calls that returned their input unchanged (in `bypass`)
        self.module_stack = module_stack

    def _where(self) -> str:
        """The label of the module running now: its name, or "(model)" for the model's own forward."""
        return (self.module_stack[-1] if self.module_stack else "") or "(model)"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _RELU and self.bypass and self._where() in self.bypass:
            self.replaced += 1
            return args[0]
        result = func(*args, **kwargs)
        if name in _METADATA_ONLY:
            return result
        inputs = list(saved.tensors_in((args, kwargs)))
        getter = name == "__get__"  # an attribute such as .data, .T or .shape: reads nothing by itself
        for tensor in () if getter else inputs:
            for owner in self._owners(tensor):
                if owner not in self.first_read:
                    self.first_read[owner] = len(self.first_read)
        outputs = list(saved.tensors_in(result))
        cut = outputs and any(t.requires_grad for t in inputs) and not any(t.requires_grad for t in outputs)
        if cut and (torch.is_grad_enabled() or not _in_custom_function_forward()):
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
        self.relus.append(DeadUnits(self._where(), int(units - alive.sum()), units, output.numel() // units))


_FUNCTION_APPLY = torch.autograd.Function.apply.__func__.__code__


def _in_custom_function_forward() -> bool:
    """Whether a custom autograd.Function's forward is running: its grad mode is off, and its node links the path."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code is _FUNCTION_APPLY:
            return True
        frame = frame.f_back
    return False


def _graph_links(loss: torch.Tensor, named: dict[str, torch.Tensor]) -> dict[str, tuple[str, ...]]:
    """Parameters whose AccumulateGrad node the loss's graph reaches, each with the names of the nodes linking to it."""
    names = {id(p): n for n, p in named.items()}
    found: dict[str, list[str]] = {}
    seen, pending = set(), [getattr(loss, "grad_fn", None)]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            variable = getattr(child, "variable", None) if child is not None else None
            if variable is not None and id(variable) in names:
                found.setdefault(names[id(variable)], []).append(node.name())
            pending.append(child)
    return {name: tuple(dict.fromkeys(nodes)) for name, nodes in found.items()}


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


def _forward_backward(copied: nn.Module, named: dict, inputs, targets, loss_fn, seed: int):
    """Forward (watched: which parameters are read, where the graph is cut, dead ReLUs), then backward.

    Returns the loss, each parameter's links in the graph, backward's error message or None, and the watch.
    """
    storages: dict[int, list[tuple[str, int, int]]] = {}
    for name, p in named.items():
        storages.setdefault(saved.storage_key(p), []).append((name, *_byte_range(p)))
    device = next(iter([*copied.parameters(), *copied.buffers()]), torch.empty(0)).device
    x, y = batches.fresh_batch(inputs), batches.fresh_batch(targets)
    stack, remove_hooks = _module_names(copied)
    watch = _Watch(storages, stack)
    backward_error = None
    try:
        with isolated_rng(seed, str(device)), torch.inference_mode(False), torch.enable_grad():
            with watch:
                loss = _forward_and_loss(copied, x, y, loss_fn)
            links = _graph_links(loss, named)
            try:
                loss.backward()
            except Exception as error:  # PyTorch's message is the finding, never raised
                backward_error = str(error).strip() or type(error).__name__
    finally:
        remove_hooks()
    return loss, links, backward_error, watch


def _parameter_gradients(named: dict, first_read, links: dict) -> dict[str, ParameterGradient]:
    parameters = {}
    for name, p in named.items():
        status, norm = _status(p.grad)
        parameters[name] = ParameterGradient(
            name=name,
            layer=name.rpartition(".")[0],
            shape=tuple(p.shape),
            requires_grad=p.requires_grad,
            read_in_forward=name in first_read,
            status=status,
            norm=norm,
            weight_norm=float(p.detach().double().norm()),
            in_graph=name in links,
            linked_from=links.get(name, ()),
        )
    return parameters


def _zeros_behind_relus(model, inputs, targets, loss_fn, seed, parameters, dead) -> tuple[tuple[str, ...], int | None]:
    """Zero gradients that a rerun with the flagged dead ReLUs replaced by identities revives; and how many
    ReLUs that rerun replaced (None when there was nothing to rerun)."""
    zero = [n for n, p in parameters.items() if p.requires_grad and p.status == "zero"]
    flagged = _flagged(dead)
    if not (zero and flagged):
        return (), None
    rerun = _gradients_without_relus(model, inputs, targets, loss_fn, seed, frozenset(d.where for d in flagged))
    if rerun is None:
        return (), None
    revived, replaced = rerun
    return (tuple(n for n in zero if n in revived) if replaced else ()), replaced


def diagnose(
    model: nn.Module,
    inputs: object,
    targets: object = None,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    seed: int = 0,
) -> Diagnosis:
    """One forward and one backward on private copies; every parameter's gradient, the layers and the findings.

    `inputs`, `targets` and `loss_fn` follow `explorers.batches`: `model(x)`, `model(*inputs)` or
    `model(**inputs)`; `loss_fn(output, targets)`, or `loss_fn(output, inputs)` without targets;
    without a `loss_fn`, the output's own `loss`.

    Raises ValueError with a plain reason when the model cannot be run on `inputs` (the forward
    or `loss_fn` raised, naming the call made; the loss is not a scalar tensor; no parameter
    requires grad). An error raised by backward is not raised: it becomes a `backward_error`
    finding carrying PyTorch's own message. Dropout masks follow `seed`; torch's global random
    state is left as it was. Module hooks fire on the copy (a UserWarning says so); tensor hooks
    are registered again on the copy's parameters, so hooked gradients are the ones your training gets.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    batches.check_trainable(model, "gradient to diagnose")
    batches.warn_module_hooks(model, "diagnose")
    copied = batches.copy_model(model, "diagnose")
    for parameter in copied.parameters():
        parameter.grad = None
    named = dict(copied.named_parameters())
    kinds = {name: type(module).__name__ for name, module in copied.named_modules()}
    loss, links, backward_error, watch = _forward_backward(copied, named, inputs, targets, loss_fn, seed)
    parameters = _parameter_gradients(named, watch.first_read, links)
    rms = {name: _rms([p for n, p in named.items() if n.rpartition(".")[0] == name and p.dim() >= 2]) for name in kinds}
    layers = _layers(parameters, watch.first_read, kinds, rms)
    loss_value = float(loss.detach().float().reshape(()))
    cuts = tuple(sorted(watch.cuts.items(), key=lambda item: -item[1]))
    dead = tuple(watch.relus)
    behind_relus, replaced = (), None
    if backward_error is None:
        behind_relus, replaced = _zeros_behind_relus(model, inputs, targets, loss_fn, seed, parameters, dead)
    findings = _findings(
        parameters, layers, loss_value, backward_error, loss.requires_grad, cuts, dead, behind_relus, replaced
    )
    return Diagnosis(
        parameters=parameters,
        layers=layers,
        findings=findings,
        verdict=_verdict(findings),
        loss=loss_value,
        backward_error=backward_error,
        cuts=cuts,
        dead_units=dead,
        relus_replaced=replaced,
    )


def _flagged(dead: tuple[DeadUnits, ...]) -> list[DeadUnits]:
    return [d for d in dead if d.samples >= DEAD_UNITS_MIN_SAMPLES and d.dead > DEAD_UNITS_FRACTION * d.units]


def _gradients_without_relus(
    model: nn.Module, inputs: object, targets: object, loss_fn: Callable | None, seed: int, where: frozenset
) -> tuple[set[str], int] | None:
    """The parameters with a non-zero gradient when the ReLUs in `where` pass their input through unchanged.

    The same forward and backward on a fresh copy, same batch and dropout masks: a parameter whose exact zero
    turns non-zero here got its zero from those ReLUs; one that stays zero got it from something else. Returns
    them with the number of ReLU calls replaced (module or functional), or None when the rerun failed.
    """
    copied = batches.copy_model(model, "diagnose")
    for parameter in copied.parameters():
        parameter.grad = None
    named = dict(copied.named_parameters())
    storages: dict[int, list[tuple[str, int, int]]] = {}
    for name, p in named.items():
        storages.setdefault(saved.storage_key(p), []).append((name, *_byte_range(p)))
    device = next(iter([*copied.parameters(), *copied.buffers()]), torch.empty(0)).device
    stack, remove_hooks = _module_names(copied)
    try:
        with isolated_rng(seed, str(device)), torch.inference_mode(False), torch.enable_grad():
            with _Watch(storages, stack, bypass=where) as watch:
                loss = _forward_and_loss(copied, batches.fresh_batch(inputs), batches.fresh_batch(targets), loss_fn)
            loss.backward()
    except Exception:  # the counterfactual failed: attribute nothing to the ReLUs
        return None
    finally:
        remove_hooks()
    return {n for n, p in named.items() if p.grad is not None and bool(p.grad.ne(0).any())}, watch.replaced


def _rms(matrices: list[torch.Tensor]) -> float | None:
    count = sum(p.numel() for p in matrices)
    if not count:
        return None
    return math.sqrt(sum(float(p.detach().double().pow(2).sum()) for p in matrices) / count)


def _forward_and_loss(model: nn.Module, x: object, y: object, loss_fn: Callable | None) -> torch.Tensor:
    output = batches.forward(model, x)
    if loss_fn is not None:
        return batches.loss_of(loss_fn, output, x, y)
    own = batches.output_loss(output)
    if own is not None:
        return batches.checked_loss(own, "the output's own loss")
    if y is None:
        raise ValueError(
            "diagnose needs a loss: the output carries no `loss`; pass loss_fn=... "
            "(loss_fn(output, batch) without a target, loss_fn(output, target) with one)"
        )
    mismatch = batches.target_mismatch(batches.first_float(output), y)
    if mismatch:
        raise ValueError(f"with no loss_fn, diagnose uses mse_loss, and {mismatch}")
    return batches.loss_of(nn.functional.mse_loss, batches.first_float(output), x, y)


def _layers(
    parameters: dict[str, ParameterGradient],
    first_read: dict[str, int],
    kinds: dict[str, str] | None = None,
    rms: dict[str, float | None] | None = None,
) -> tuple[LayerGradient, ...]:
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
        matrices = [p.norm for p in got if len(p.shape) >= 2]
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
                kind=(kinds or {}).get(name, ""),
                trainable=any(p.requires_grad for p in members),
                matrix_rms=(rms or {}).get(name),
                matrix_grad_norm=_combined(matrices) if matrices else None,
            )
        )
    return tuple(layers)


def role(name: str) -> str:
    """A layer's place in its block: the name with every block index replaced by `*` (`h.*.attn.c_attn`)."""
    return ".".join("*" if part.isdigit() else part for part in name.split("."))


def comparable_groups(layers: tuple[LayerGradient, ...]) -> list[list[LayerGradient]]:
    """Trainable matrix layers with finite gradients, grouped by role; by module type when no role repeats.

    Each group is in forward order. Attention projections, MLP layers and embeddings have gradients of
    different sizes at any depth, so only layers of one group are compared with each other.
    """
    finite = [layer for layer in layers if layer.status == "finite" and layer.trainable]
    matrices = [layer for layer in finite if layer.is_matrix_layer] or finite
    for key in (lambda layer: (layer.kind, role(layer.name)), lambda layer: layer.kind):
        groups: dict[object, list[LayerGradient]] = {}
        for layer in matrices:
            groups.setdefault(key(layer), []).append(layer)
        repeated = [group for group in groups.values() if len(group) >= 2]
        if repeated:
            return repeated
    return []


def _spread(group: list[LayerGradient]) -> float:
    first, last = group[0].depth_norm, group[-1].depth_norm
    return abs(math.log(first / last)) if first > 0 and last > 0 else 0.0


def depth_layers(layers: tuple[LayerGradient, ...]) -> list[LayerGradient]:
    """The layers compared through depth: of the comparable groups, the one whose first and last differ most.

    Norm layers (BatchNorm, LayerNorm) hold vectors whose gradients follow other rules; frozen layers
    get none. In a plain stack every Linear is one group, so this is its first and last Linear.
    """
    groups = comparable_groups(layers)
    if not groups:
        return []
    return max(groups, key=lambda group: (_spread(group), len(group)))


def largest_step(group: list[LayerGradient]) -> tuple[LayerGradient, LayerGradient, float] | None:
    """The neighbours in a compared group between which the gradient norm changes most (later / earlier)."""
    steps = [
        (earlier, later, later.depth_norm / earlier.depth_norm)
        for earlier, later in zip(group, group[1:], strict=False)
        if earlier.depth_norm > 0 and later.depth_norm > 0
    ]
    return max(steps, key=lambda step: abs(math.log(step[2])), default=None)


def weight_scale_outliers(layers: tuple[LayerGradient, ...]) -> list[tuple[LayerGradient, float, float, int]]:
    """(layer, its weight RMS over the median of the other matrix layers', that median, how many others)."""
    measured = [layer for layer in layers if layer.matrix_rms is not None and layer.matrix_rms > 0]
    found = []
    for layer in measured:
        others = [other.matrix_rms for other in measured if other is not layer]
        if not others:
            continue
        median = statistics.median(others)
        if median > 0 and layer.matrix_rms > WEIGHT_SCALE_OUTLIER * median:
            found.append((layer, layer.matrix_rms / median, median, len(others)))
    return found


def _findings(
    parameters: dict[str, ParameterGradient],
    layers: tuple[LayerGradient, ...],
    loss: float,
    backward_error: str | None,
    loss_requires_grad: bool,
    cuts: tuple[tuple[str, int], ...],
    dead: tuple[DeadUnits, ...],
    behind_relus: tuple[str, ...] = (),
    replaced: int | None = None,
) -> tuple[Finding, ...]:
    """Every finding the measurements support, in the order a reader should check them: missing, zero, scale."""
    findings = []
    if backward_error is not None:
        findings.append(Finding("backward_error", (), f"backward raised: {backward_error}"))
    backward_ran = backward_error is None
    findings += _none_findings(parameters, backward_ran, loss_requires_grad, cuts)
    findings += _zero_findings(parameters, backward_ran, dead, behind_relus, replaced)
    findings += _scale_findings(parameters, layers, loss)
    if backward_ran:
        findings += _depth_findings(layers)
    return tuple(findings)


def _none_findings(
    parameters: dict[str, ParameterGradient],
    backward_ran: bool,
    loss_requires_grad: bool,
    cuts: tuple[tuple[str, int], ...],
) -> list[Finding]:
    """Parameters whose .grad is None: returned none, cut off from the loss, never read, or frozen."""
    findings = []
    frozen = tuple(n for n, p in parameters.items() if not p.requires_grad)
    trainable = [p for p in parameters.values() if p.requires_grad]
    cut_text = ", ".join(f"`{name}` ×{count}" for name, count in cuts[:4])
    none = [p for p in trainable if p.read_in_forward and p.status == "none"]
    returned = tuple(p.name for p in none if p.in_graph) if backward_ran and loss_requires_grad else ()
    if returned:
        nodes = list(dict.fromkeys(node for name in returned for node in parameters[name].linked_from))
        findings.append(
            Finding(
                "none_returned",
                returned,
                f"{len(returned)} trainable parameter(s) ({_names(returned)}) are in the graph (the loss's grad_fn "
                f"reaches their AccumulateGrad node, linked from {_names(nodes)}), yet their .grad is None after "
                "backward: a backward function on the way returned no gradient for them.",
            )
        )
    broken = tuple(p.name for p in none if p.name not in returned)
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
    return findings


def _zero_findings(
    parameters: dict[str, ParameterGradient],
    backward_ran: bool,
    dead: tuple[DeadUnits, ...],
    behind_relus: tuple[str, ...],
    replaced: int | None,
) -> list[Finding]:
    """Gradients of exactly zero: behind dead ReLUs (the rerun without them says which), or on a zero path."""
    findings = []
    trainable = [p for p in parameters.values() if p.requires_grad]
    dead_layers = _flagged(dead)
    zero = tuple(p.name for p in trainable if p.status == "zero") if backward_ran else ()
    by_relus = tuple(n for n in zero if n in behind_relus)
    if dead_layers:
        parts = [f"`{d.where}`: {d.dead} of {d.units} units zero for all {d.samples} samples" for d in dead_layers]
        findings.append(
            Finding(
                "dead_units",
                by_relus,
                "; ".join(parts)
                + f" (flagged above {DEAD_UNITS_FRACTION:.0%} of a layer's units)."
                + (
                    f" Parameters whose gradient is exactly zero, and non-zero with these ReLUs replaced by the "
                    f"identity: {_names(by_relus)}."
                    if by_relus
                    else ""
                ),
                tuple(d.where for d in dead_layers),
            )
        )
    other_zero = tuple(n for n in zero if n not in by_relus)
    if other_zero:
        findings.append(
            Finding(
                "zero_gradient",
                other_zero,
                f"{len(other_zero)} parameter(s) ({_names(other_zero)}) got a gradient of exactly zero: a path "
                "exists, and it carries zero for this batch" + (_rerun_note(replaced) if dead_layers else "."),
            )
        )
    return findings


def _scale_findings(
    parameters: dict[str, ParameterGradient], layers: tuple[LayerGradient, ...], loss: float
) -> list[Finding]:
    """A layer whose weights stand far from the others' scale, and inf or nan in the loss or a gradient."""
    findings = []
    for layer, ratio, median, others in weight_scale_outliers(layers):
        findings.append(
            Finding(
                "weight_scale",
                tuple(n for n in layer.parameters if len(parameters[n].shape) >= 2),
                f"`{layer.label}` has a weight RMS (norm / √elements) of {_sci(layer.matrix_rms)}, {_sci(ratio)} "
                f"times the median of the other {others} matrix layers ({_sci(median)}); flagged above "
                f"{WEIGHT_SCALE_OUTLIER:.0f} times.",
                (layer.name,),
            )
        )
    nonfinite = tuple(p.name for p in parameters.values() if p.requires_grad and p.status == "nonfinite")
    if nonfinite or not math.isfinite(loss):
        observation = f"the loss is {loss}. " if not math.isfinite(loss) else ""
        if nonfinite:
            observation += f"{len(nonfinite)} parameter(s) ({_names(nonfinite)}) have inf or nan in their gradient."
        findings.append(Finding("nonfinite", nonfinite, observation.strip()))
    return findings


def _rerun_note(replaced: int | None) -> str:
    """What the rerun with the flagged ReLUs as the identity showed about a zero that is not theirs."""
    if replaced:
        return f" (it stays zero in a rerun with the flagged ReLUs' {replaced} call(s) replaced by the identity)."
    return (
        " (a rerun with the flagged ReLUs replaced by the identity "
        + ("replaced none of their calls" if replaced == 0 else "failed")
        + ", so this run does not tell whether they are behind it)."
    )


def _depth_findings(layers: tuple[LayerGradient, ...]) -> list[Finding]:
    findings = []
    compared = depth_layers(layers)
    if len(compared) >= 2:
        first, last = compared[0], compared[-1]
        if last.depth_norm > 0 and first.depth_norm > 0:
            ratio = first.depth_norm / last.depth_norm
            step = largest_step(compared)
            jump = (
                f" The largest change between neighbours is from `{step[0].label}` to `{step[1].label}` "
                f"(×{_sci(step[2])})."
                if step is not None and len(compared) > 2
                else ""
            )
            kind = first.kind or "any type"
            among = f"{len(compared)} comparable layers (role `{role(first.name) or first.label}`, {kind})"
            if ratio < VANISHING_RATIO:
                small = tuple(
                    n
                    for layer in compared
                    if layer.depth_norm < VANISHING_RATIO * last.depth_norm
                    for n in layer.parameters
                )
                findings.append(
                    Finding(
                        "vanishing",
                        small,
                        f"first layer's (`{first.label}`) weight gradient norm is {_sci(first.depth_norm)}, "
                        f"{_sci(ratio)} of the last layer's (`{last.label}`, {_sci(last.depth_norm)}) among {among}; "
                        f"flagged below {VANISHING_RATIO:.0e}.{jump}",
                        (first.name, last.name),
                    )
                )
            elif ratio > EXPLODING_GROWTH:
                findings.append(
                    Finding(
                        "exploding",
                        first.parameters,
                        f"first layer's (`{first.label}`) weight gradient norm is {_sci(first.depth_norm)}, "
                        f"{_sci(ratio)} times the last layer's (`{last.label}`, {_sci(last.depth_norm)}) among "
                        f"{among}; flagged above {EXPLODING_GROWTH:.0e}.{jump}",
                        (first.name, last.name),
                    )
                )
                return findings
    large = [
        layer for layer in layers if layer.status == "finite" and layer.trainable and layer.grad_norm > EXPLODING_NORM
    ]
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
