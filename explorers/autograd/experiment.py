"""Autograd lab: what does autograd track?

Build a tiny preset model, then step through its lifecycle (forward, backward,
backward again with or without `retain_graph`, `zero_grad`, an optimizer step, a
forward under `no_grad`) and look at the real state after every step:

- the autograd graph torchviz draws from the loss's `grad_fn`: leaves, grad_fn nodes,
  AccumulateGrad nodes and, optionally, the tensors saved for backward;
- a table of every tensor in play: shape, is_leaf, requires_grad, grad_fn, gradient
  norm and version counter;
- the bytes the graph holds for backward, read from the graph's own saved tensors.

What to expect: `backward()` drops the graph's references to its saved tensors (their
memory comes back once nothing else holds them), and a second one fails with PyTorch's own
error when a node had saved something; `retain_graph=True` keeps them, and a second pass
doubles every leaf's gradient exactly; `no_grad` builds no graph at all.

From a notebook::

    from explorers import autograd
    run = autograd.run(autograd.AutogradOptions(), ["forward", "backward_retain", "backward_retain"])
    run.final.saved_bytes, run.final.tensors, run.graph_source

The page runs `replay(Replay(options, steps))` on the run engine (`explorers.engine`): the
presets draw their weights and dropout masks from torch's global RNG.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torchviz
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

import explorers.autograd.your_model as your_model
from explorers import batches, bounds, graphs, saved
from explorers.autograd.your_model import UserModel, YourModel
from explorers.rng import isolated_rng

PRESETS = {
    "scalar": "Scalar neuron: act(w·x + b)",
    "mlp": "MLP",
    "mlp_bn_dropout": "MLP with BatchNorm and Dropout",
    "residual": "Residual blocks",
}
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "sigmoid": nn.Sigmoid}
ACTIONS = {
    "forward": "forward",
    "forward_no_grad": "forward under no_grad",
    "backward": "backward()",
    "backward_retain": "backward(retain_graph=True)",
    "zero_grad_none": "zero_grad(set_to_none=True)",
    "zero_grad_zeros": "zero_grad(set_to_none=False)",
    "sgd_step": "optimizer.step()",
}
DEPTH_RANGE = (1, 6)
WIDTH_RANGE = (1, 64)
BATCH_RANGE = (1, 64)
SEED_RANGE = (0, 99_999)
MAX_STEPS = 12  # a lifecycle longer than this teaches nothing new and bloats the link
MAX_GRAPH_NODES = 120  # past this a drawn graph stops being readable
IN_FEATURES = 3
DROPOUT_P = 0.5
LEARNING_RATE = 0.1
RATIO_LABEL = "‖grad‖ / ‖latest pass‖"  # the table's column: a ratio of norms, not a count of passes


@dataclass(frozen=True)
class AutogradOptions:
    preset: str = "mlp"
    depth: int = 2
    width: int = 4
    activation: str = "tanh"
    batch_size: int = 1
    input_requires_grad: bool = False
    show_saved: bool = False  # off by default: the graph stays readable; the saved-tensor table lists them
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"preset": PRESETS, "activation": ACTIVATIONS})
        bounds.check_ints(
            self, {"depth": DEPTH_RANGE, "width": WIDTH_RANGE, "batch_size": BATCH_RANGE, "seed": SEED_RANGE}
        )


@dataclass(frozen=True)
class TensorRow:
    """One tensor in play, as the table shows it."""

    name: str
    role: str  # "input", "parameter", "intermediate" or "loss"
    shape: tuple[int, ...]
    is_leaf: bool
    requires_grad: bool
    grad_fn: str | None
    grad: str  # "None", "zeros", "values", or "not kept" for non-leaves
    grad_norm: float | None
    grad_vs_one_pass: float | None  # ‖.grad‖ / ‖what the latest backward pass added‖ (a ratio of norms)
    version: int
    passes: int = 0  # backward passes that added into .grad since it was last cleared
    passes_equal: bool | None = None  # whether those passes added identical gradients (None below two passes)
    # The steps that ran between those passes (their ACTIONS labels, in order, repeats kept once): what could differ.
    between: tuple[str, ...] = ()
    passes_max_difference: float | None = None  # max |pass_i - pass_1| / max |pass_1| over the passes (None below two)


@dataclass(frozen=True)
class SavedTensor:
    """A tensor some grad_fn node saved for backward."""

    node: str
    attribute: str
    shape: tuple[int, ...]
    dtype: str
    storage_bytes: int
    owner: str  # the parameter, buffer, "input x" or "target" it shares storage with, or "activation"


@dataclass(frozen=True)
class Snapshot:
    """The state after one lifecycle step."""

    action: str
    error: str | None
    tensors: tuple[TensorRow, ...]
    saved_bytes: int  # saved for backward, as explorers.saved.DEFINITION counts it
    saved_count: int
    has_graph: bool  # the latest loss has a grad_fn (its saved tensors may be released: see saved_bytes)
    error_from_pytorch: bool = True  # False when the lab refused the step itself (e.g. no optimizer to call)
    # Storages the latest graph-building forward saved (as saved_bytes counts them) that are still in memory,
    # whoever holds them: after backward the graph holds none, yet a tensor kept elsewhere keeps its storage.
    saved_alive_bytes: int = 0
    saved_alive_count: int = 0
    values_changed: tuple[str, ...] = ()  # parameters whose values differ from the previous snapshot's
    forward_grad_mode: bool | None = None  # torch.is_grad_enabled() during the latest forward; None before one
    loss_dtype: str | None = None

    def row(self, name: str) -> TensorRow:
        return next(r for r in self.tensors if r.name == name)


@dataclass(frozen=True)
class AutogradRun:
    options: AutogradOptions
    snapshots: tuple[Snapshot, ...]  # the first one is the state before any step
    saved_tensors: tuple[SavedTensor, ...]  # saved by the latest graph-building forward (held or not)
    graph_source: str | None  # DOT from torchviz, None when there is no graph to draw
    graph_nodes: int
    graph_note: str  # what the graph shows, or why none is drawn
    loss_expression: str
    notes: tuple[str, ...]  # adjustments made to the options, stated plainly
    final_grads: dict[str, torch.Tensor | None] = field(repr=False)
    batch_size: int | None = None  # the batch that ran (BatchNorm's preset raises 1 to 2); None for the scalar neuron
    actions: tuple[str, ...] = ()  # the steps this run was given, in order
    saved_held: tuple[SavedTensor, ...] = ()  # what the latest loss's graph still holds for backward at the end
    saved_at_step: int | None = None  # the step (1-based) whose forward saved `saved_tensors`; None before one

    @property
    def final(self) -> Snapshot:
        return self.snapshots[-1]

    @property
    def steps(self) -> tuple[Snapshot, ...]:
        return self.snapshots[1:]


class _Stack(nn.Module):
    """Named blocks applied in order; forward also returns each block's output."""

    def __init__(self, blocks: Sequence[tuple[str, nn.Module]], residual: Sequence[str] = ()):
        super().__init__()
        for name, block in blocks:
            self.add_module(name, block)
        self.residual = set(residual)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[tuple[str, torch.Tensor]]]:
        outputs = []
        for name, block in self.named_children():
            x = x + block(x) if name in self.residual else block(x)
            outputs.append((f"{name} out", x))
        return x, outputs[:-1]


class _ScalarNeuron(nn.Module):
    def __init__(self, activation: type[nn.Module]):
        super().__init__()
        self.w = nn.Parameter(torch.randn(()))
        self.b = nn.Parameter(torch.randn(()))
        self.act = activation()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[tuple[str, torch.Tensor]]]:
        z = self.w * x + self.b
        return self.act(z), [("w·x + b", z)]


def build_model(options: AutogradOptions) -> nn.Module:
    """The preset model; call inside `isolated_rng` so its initial weights follow the seed."""
    act = ACTIVATIONS[options.activation]
    if options.preset == "scalar":
        return _ScalarNeuron(act)
    width, depth = options.width, options.depth
    if options.preset == "residual":
        blocks = [("inp", nn.Linear(IN_FEATURES, width))]
        for i in range(1, depth + 1):
            layers = OrderedDict(fc1=nn.Linear(width, width), act=act(), fc2=nn.Linear(width, width))
            blocks.append((f"block{i}", nn.Sequential(layers)))
        blocks.append(("head", nn.Linear(width, 1)))
        return _Stack(blocks, residual=[f"block{i}" for i in range(1, depth + 1)])
    blocks = []
    for i in range(1, depth + 1):
        layers = OrderedDict(fc=nn.Linear(IN_FEATURES if i == 1 else width, width))
        if options.preset == "mlp_bn_dropout":
            layers["bn"] = nn.BatchNorm1d(width)
        layers["act"] = act()
        if options.preset == "mlp_bn_dropout":
            layers["drop"] = nn.Dropout(DROPOUT_P)
        blocks.append((f"block{i}", nn.Sequential(layers)))
    blocks.append(("head", nn.Linear(width, 1)))
    return _Stack(blocks)


class LabRefusal(Exception):
    """A step the lab does not run, with the reason in words (not an error PyTorch raised)."""


NO_OPTIMIZER = (
    "No parameter of this model requires grad, so there is no optimizer: torch.optim refuses an empty "
    'parameter list ("optimizer got an empty parameter list").'
)


class _Lifecycle:
    """One model, its input and its latest loss, driven step by step."""

    def __init__(self, options: AutogradOptions, yours: YourModel | None = None):
        self.options = options
        self.notes: list[str] = []
        device = torch.device(options.device)
        if yours is None:
            batch = options.batch_size
            if options.preset == "mlp_bn_dropout" and batch < 2:
                batch = 2
                self.notes.append("BatchNorm needs at least 2 samples per batch in train mode, so the batch size is 2.")
            self.model = build_model(options).to(device).train()
            shape = () if options.preset == "scalar" else (batch, IN_FEATURES)
            self.x = torch.randn(shape).to(device).requires_grad_(options.input_requires_grad)
            self.target = None if options.preset == "scalar" else torch.randn(batch, 1).to(device)
            self.loss_fn = None if self.target is None else nn.functional.mse_loss
            self.loss_expression = "loss = y" if self.target is None else "loss = mse(model(x), target)"
            self.batch, self.inputs = self.x, {"x": self.x}
            self.batch_size = None if options.preset == "scalar" else batch
        else:  # private copies: the caller's model, gradients and tensors stay exactly as they were
            batches.warn_module_hooks(yours.model, "autograd.run")
            self.model = UserModel(batches.copy_model(yours.model, "autograd.run"))
            self.batch = batches.fresh_batch(yours.example_input)
            self.inputs = your_model.named_inputs(self.batch)
            self.x = next(iter(self.inputs.values()), None)
            self.target = batches.fresh_batch(yours.target)
            self.loss_fn = yours.loss_fn
            self.loss_expression = yours.loss_expression
            self.batch_size = _batch_size(self.x)
        self.yours = yours
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.SGD(trainable, lr=LEARNING_RATE) if trainable else None
        if not trainable:
            self.notes.append(NO_OPTIMIZER)
        self.parameters = {name.removeprefix("inner."): p for name, p in self.model.named_parameters()}
        self.loss: torch.Tensor | None = None
        self.forward_grad_mode: bool | None = None
        self.intermediates: list[tuple[str, torch.Tensor]] = []
        self.saved_tensors: tuple[SavedTensor, ...] = ()
        self.step = 0  # the step running now, 1-based
        self.saved_step: int | None = None  # the step whose forward saved `saved_tensors`
        self.saved_refs: dict[int, tuple[StorageWeakRef, int]] = {}  # what the latest graph saved: key -> (ref, bytes)
        self.graph_freed = False
        self.released_count = 0  # saved tensors the graph held when backward released them
        self.added: dict[str, list[torch.Tensor]] = {}  # per leaf, what each backward added since .grad was cleared
        self.between: dict[str, list[str]] = {}  # per leaf, the steps that ran between those passes
        self.pending: dict[str, list[str]] = {}  # per leaf, the steps since its latest counted pass
        self.last_values = self._values()

    @property
    def leaves(self) -> dict[str, torch.Tensor]:
        named = {name: t for name, t in self.inputs.items() if t.requires_grad}
        return named | self.parameters

    def apply(self, action: str) -> tuple[str | None, bool]:
        """Run one step; return (the error message, whether PyTorch raised it) or (None, True)."""
        try:
            getattr(self, f"_{action}")()
        except RuntimeError as error:
            return str(error).strip(), True
        except LabRefusal as refusal:
            return str(refusal), False
        if not action.startswith("backward"):
            for name in self.added:
                self.pending.setdefault(name, []).append(ACTIONS[action])
        return None, True

    def _values(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in self.parameters.items()}

    def _forward(self) -> None:
        self._run_model()
        found = self._saved_in_graph()
        self.saved_tensors = tuple(record for record, _ in found)
        self.saved_step = self.step
        self.saved_refs = {
            key: (StorageWeakRef(tensor.untyped_storage()), record.storage_bytes)
            for record, key, tensor in self._saved_with_tensors()
            if record.owner == "activation"
        }

    def _forward_no_grad(self) -> None:
        with torch.no_grad():
            self._run_model()

    def _run_model(self) -> None:
        self.forward_grad_mode = torch.is_grad_enabled()
        if self.yours is not None:  # a failing forward or loss is the caller's ValueError, not a step's error
            output, intermediates = self.model(self.batch)
            self.loss = your_model.loss_of(self.yours, output, self.batch, self.target)
            first = batches.first_float(output)
            shown = [("model out", first)] if self.target is not None and first is not None else []
            self.intermediates = [*intermediates, *shown]
            self.graph_freed = False
            return
        output, intermediates = self.model(self.x)
        if self.loss_fn is None:  # the scalar neuron's output is its loss; a user's output without a loss is summed
            self.loss = output if output.dim() == 0 else output.sum()
        else:
            self.loss = self.loss_fn(output) if self.target is None else self.loss_fn(output, self.target)
        self.intermediates = [*intermediates, ("model out", output)] if self.target is not None else intermediates
        self.graph_freed = False

    def _backward(self, retain_graph: bool = False) -> None:
        if self.loss is None:
            raise LabRefusal("There is no loss yet: run a forward first.")
        arrived: dict[str, torch.Tensor] = {}  # each leaf's gradient from this pass, as it reaches AccumulateGrad
        handles = [
            t.register_hook(lambda grad, name=name: arrived.__setitem__(name, grad.detach().clone()))
            for name, t in self.leaves.items()
            if t.requires_grad
        ]  # registered last, so they see the gradient after the caller's own hooks
        held = self._held_bytes()[1]
        try:
            self.loss.backward(retain_graph=retain_graph)
        finally:
            for handle in handles:
                handle.remove()
        for name, t in self.leaves.items():
            if name in self.added:
                self.between.setdefault(name, []).extend(self.pending.pop(name, []))
            self.added.setdefault(name, []).append(arrived.get(name, torch.zeros_like(t)))
        if not retain_graph:
            self.graph_freed, self.released_count = True, held

    def _backward_retain(self) -> None:
        self._backward(retain_graph=True)

    def _zero_grad_none(self) -> None:
        self._zero_grad(set_to_none=True)

    def _zero_grad_zeros(self) -> None:
        self._zero_grad(set_to_none=False)

    def _zero_grad(self, set_to_none: bool) -> None:
        if self.optimizer is None:
            raise LabRefusal(NO_OPTIMIZER)
        self.optimizer.zero_grad(set_to_none=set_to_none)
        cleared = {id(p) for group in self.optimizer.param_groups for p in group["params"]}
        for name, t in self.leaves.items():
            if id(t) in cleared:  # what the optimizer was not given keeps its .grad, and its history
                self.added.pop(name, None)
                self.between.pop(name, None)
                self.pending.pop(name, None)

    def _sgd_step(self) -> None:
        if self.optimizer is None:
            raise LabRefusal(NO_OPTIMIZER)
        self.optimizer.step()

    def _owners(self) -> dict[int, str]:
        """Storages that exist with or without a graph: parameters, buffers (BatchNorm's running
        statistics) and the batch. A saved tensor sharing one of them costs the graph nothing."""
        owned = {**self.parameters, **dict(self.model.named_buffers())}
        owned |= {f"input {name}": t for name, t in self.inputs.items()}
        owned |= {f"target {i}": t for i, t in enumerate(batches.tensors_in(self.target))}
        return {saved.storage_key(t): name for name, t in owned.items()}

    def _saved_in_graph(self) -> list[tuple[SavedTensor, int]]:
        return [(record, key) for record, key, _ in self._saved_with_tensors()]

    def _saved_with_tensors(self) -> list[tuple[SavedTensor, int, torch.Tensor]]:
        """Walk the latest loss's graph as torchviz does; list each saved tensor still held, with its storage.

        Reading the graph (rather than installing saved_tensors_hooks) keeps the lesson
        honest: with hooks installed, PyTorch skips its check that a saved tensor was not
        modified in place, and the optimizer-step error would silently disappear.
        """
        owners = self._owners()
        found, seen, pending = [], set(), [getattr(self.loss, "grad_fn", None)]
        while pending:
            node = pending.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            for attribute, value in _saved_values(node):
                key = saved.storage_key(value)
                record = SavedTensor(
                    node=node.name(),
                    attribute=attribute,
                    shape=tuple(value.shape),
                    dtype=str(value.dtype).removeprefix("torch."),
                    storage_bytes=value.untyped_storage().nbytes(),
                    owner=owners.get(key, "activation"),
                )
                found.append((record, key, value))
            pending.extend(next_node for next_node, _ in node.next_functions)
        return found

    def _held_bytes(self) -> tuple[int, int]:
        """(bytes, count) saved for backward, as explorers.saved.DEFINITION counts them."""
        storages = {key: record.storage_bytes for record, key in self._saved_in_graph() if record.owner == "activation"}
        return sum(storages.values()), len(storages)

    def snapshot(self, action: str, error: str | None, error_from_pytorch: bool = True) -> Snapshot:
        saved_bytes, saved_count = self._held_bytes()
        rows = [self._row(name, t, "input") for name, t in self.inputs.items()]
        rows += [self._row(name, p, "parameter") for name, p in self.parameters.items()]
        rows += [self._row(name, t, "intermediate") for name, t in self.intermediates]
        if self.loss is not None:
            rows.append(self._row("loss", self.loss, "loss"))
        has_graph = self.loss is not None and self.loss.grad_fn is not None
        alive = [size for ref, size in self.saved_refs.values() if not ref.expired()]
        values = self._values()
        changed = tuple(name for name, v in values.items() if not torch.equal(v, self.last_values[name]))
        self.last_values = values
        return Snapshot(
            action,
            error,
            tuple(rows),
            saved_bytes,
            saved_count,
            has_graph,
            error_from_pytorch=error_from_pytorch,
            saved_alive_bytes=sum(alive),
            saved_alive_count=len(alive),
            values_changed=changed,
            forward_grad_mode=self.forward_grad_mode,
            loss_dtype=None if self.loss is None else str(self.loss.dtype).removeprefix("torch."),
        )

    def _row(self, name: str, tensor: torch.Tensor, role: str) -> TensorRow:
        grad = tensor.grad if tensor.is_leaf else None  # reading .grad of a non-leaf only warns
        if not tensor.is_leaf:
            state = "not kept"
        elif grad is None:
            state = "None"
        else:
            state = "zeros" if not grad.any() else "values"
        norm = None if grad is None else float(grad.norm())
        added = self.added.get(name, []) if tensor.is_leaf else []
        ratio = None
        if norm is not None and added and float(added[-1].norm()) > 0:
            ratio = norm / float(added[-1].norm())
        equal = None if len(added) < 2 else all(torch.equal(a, added[0]) for a in added[1:])
        difference = None
        if len(added) >= 2:
            scale = float(added[0].abs().max()) if added[0].numel() else 0.0
            largest = max(float((a - added[0]).abs().max()) if a.numel() else 0.0 for a in added[1:])
            difference = largest / scale if scale > 0 else (0.0 if largest == 0 else math.inf)
        return TensorRow(
            name=name,
            role=role,
            shape=tuple(tensor.shape),
            is_leaf=tensor.is_leaf,
            requires_grad=tensor.requires_grad,
            grad_fn=None if tensor.grad_fn is None else tensor.grad_fn.name(),
            grad=state,
            grad_norm=norm,
            grad_vs_one_pass=ratio,
            version=tensor._version,
            passes=len(added),
            passes_equal=equal,
            between=tuple(dict.fromkeys(self.between.get(name, []))) if tensor.is_leaf else (),
            passes_max_difference=difference,
        )

    @property
    def _names(self) -> dict[str, torch.Tensor]:
        """What torchviz labels: the leaves, and the loss (else its node reads just "()")."""
        return self.leaves | {"loss": self.loss}

    def _make_dot(self):
        """torchviz's graph, with saved tensors when asked for and still readable."""
        if self.options.show_saved and not self.graph_freed:
            try:
                return graphs.with_font(torchviz.make_dot(self.loss, params=self._names, show_saved=True)), True
            except RuntimeError:
                readable = False
        else:
            readable = not self.graph_freed
        return graphs.with_font(torchviz.make_dot(self.loss, params=self._names, show_saved=False)), readable

    def graph(self) -> tuple[str | None, int, str]:
        """DOT source of the latest loss's graph, its node count, and what it shows."""
        if self.loss is None:
            return None, 0, "No forward yet: press forward to build a graph."
        if self.loss.grad_fn is None:
            if self.forward_grad_mode is False:
                return None, 0, "The latest forward ran under no_grad: the loss has no grad_fn, so there is no graph."
            dtype = str(self.loss.dtype).removeprefix("torch.")
            return None, 0, f"The loss ({dtype}) has no grad_fn although grad mode was on: there is no graph to draw."
        try:
            dot, saved_readable = self._make_dot()
        except RuntimeError as error:  # torchviz reads a custom Function's saved_tensors, released by backward
            return None, 0, f"torchviz could not draw this graph: {str(error).splitlines()[0][:160]}"
        nodes = sum("[label=" in line for line in dot.body)
        if nodes > MAX_GRAPH_NODES:
            return (
                None,
                nodes,
                (
                    f"The graph has {nodes} nodes, more than the {MAX_GRAPH_NODES} that stay readable: "
                    "lower the depth or hide the saved tensors."
                ),
            )
        if self.graph_freed and self.released_count:
            note = (
                f"backward() released the {self.released_count} tensors this graph saved for backward; "
                "the nodes remain, without them."
            )
        elif self.graph_freed:
            note = "backward() ran through this graph; its nodes saved no tensors, so there was nothing to release."
        elif not saved_readable:
            note = (
                "Some saved tensors can no longer be read (freed by a failed backward, or changed in place "
                "since they were saved), so none are drawn."
            )
        elif self.options.show_saved:
            note = "Blue: leaves. Grey: grad_fn nodes. Orange: tensors saved for backward."
        else:
            note = "Blue: leaves. Grey: grad_fn nodes (saved tensors hidden)."
        return graphs.stable_ids(dot.source), nodes, note


def _saved_values(node) -> list[tuple[str, torch.Tensor]]:
    """The tensors a grad_fn node still holds for backward, by attribute; none once backward released them.

    Built-in nodes expose them as `_saved_*` attributes; a custom autograd.Function's node as
    `saved_tensors` (what its forward passed to `ctx.save_for_backward`).
    """
    found = []
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        try:
            found = [(f"saved_tensors[{i}]", t) for i, t in enumerate(node.saved_tensors)]
        except RuntimeError:  # released by backward, or modified in place since it was saved
            return []
    for attribute in dir(node):
        if not attribute.startswith("_saved_"):
            continue
        try:
            value = getattr(node, attribute)
        except RuntimeError:  # released by backward, or modified in place since it was saved
            continue
        if torch.is_tensor(value):
            found.append((attribute.removeprefix("_saved_"), value))
    return [(name, t) for name, t in found if torch.is_tensor(t)]


def _batch_size(x: torch.Tensor | None) -> int | None:
    return int(x.shape[0]) if torch.is_tensor(x) and x.dim() >= 1 else None


def run(
    options: AutogradOptions | None = None, actions: Sequence[str] = (), yours: YourModel | None = None
) -> AutogradRun:
    """Build the preset from `options.seed` (or copy `yours`) and apply `actions` in order, recording each state.

    With `yours`, the run works on private copies of the model and tensors (the options' preset,
    sizes and activation do not apply; seed, device and show_saved do), so the caller's model,
    its `.grad` fields, buffers and tensors are left exactly as they were. Its batch, target and
    loss follow `explorers.batches` (see `your_model.YourModel`); a forward or loss that fails
    raises ValueError naming the call made, instead of becoming a step's error.
    """
    options = options or AutogradOptions()
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise ValueError(f"unknown actions {unknown}; known: {sorted(ACTIONS)}")
    if len(actions) > MAX_STEPS:
        raise ValueError(f"at most {MAX_STEPS} steps, got {len(actions)}")
    with isolated_rng(options.seed, options.device):
        lab = _Lifecycle(options, yours)
        snapshots = [lab.snapshot("start", None)]
        for step, action in enumerate(actions, 1):
            lab.step = step
            snapshots.append(lab.snapshot(action, *lab.apply(action)))
        held = tuple(record for record, _ in lab._saved_in_graph())
        source, nodes, note = lab.graph()
        grads = {name: None if t.grad is None else t.grad.detach().clone() for name, t in lab.leaves.items()}
    return AutogradRun(
        options=options,
        snapshots=tuple(snapshots),
        saved_tensors=lab.saved_tensors,
        graph_source=source,
        graph_nodes=nodes,
        graph_note=note,
        loss_expression=lab.loss_expression,
        notes=tuple(lab.notes),
        final_grads=grads,
        batch_size=lab.batch_size,
        actions=tuple(actions),
        saved_held=held,
        saved_at_step=lab.saved_step,
    )


@dataclass(frozen=True)
class Replay:
    """A lifecycle to replay: the options and the steps, as one hashable request for the run engine."""

    options: AutogradOptions
    steps: tuple[str, ...] = ()


def replay(request: Replay, report=None) -> AutogradRun:
    return run(request.options, request.steps)
