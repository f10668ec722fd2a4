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

import plotly.graph_objects as go
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from explorers import bounds
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


# --- The lab's own model and experiments -------------------------------------------------

P_RANGE = (0.0, 0.9)
WIDTH_RANGE = (4, 512)
BATCH_RANGE = (2, 512)
MOMENTUM_RANGE = (0.01, 1.0)
REPEATS_RANGE = (2, 30)
SEED_RANGE = (0, 99_999)
IN_FEATURES = 8
CLASSES = 2
TRAIN_SAMPLES = VALIDATION_SAMPLES = 512
TRAIN_STEPS = 120
LEARNING_RATE = 0.01


@dataclass(frozen=True)
class ModesOptions:
    dropout_p: float = 0.5
    width: int = 64
    batch_size: int = 32
    momentum: float = 0.1
    repeats: int = 10
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        bounds.check_ints(
            self, {"width": WIDTH_RANGE, "batch_size": BATCH_RANGE, "repeats": REPEATS_RANGE, "seed": SEED_RANGE}
        )
        bounds.check_numbers(self, {"dropout_p": P_RANGE, "momentum": MOMENTUM_RANGE})


def build_model(options: ModesOptions) -> nn.Sequential:
    """Linear → BatchNorm → ReLU → Dropout → Linear; call inside `isolated_rng` for seeded weights."""
    return nn.Sequential(
        nn.Linear(IN_FEATURES, options.width),
        nn.BatchNorm1d(options.width, momentum=options.momentum),
        nn.ReLU(),
        nn.Dropout(options.dropout_p),
        nn.Linear(options.width, CLASSES),
    ).to(options.device)


def lab_grid(options: ModesOptions) -> ModeGrid:
    """The mode grid on the lab's model and one seeded batch."""
    with isolated_rng(options.seed, options.device):
        model = build_model(options)
        batch = torch.randn(options.batch_size, IN_FEATURES).to(options.device)
    return mode_grid(model, batch, seed=options.seed)


@dataclass(frozen=True)
class ValidationRun:
    """A briefly trained model, validated N times in the right mode and N times in train mode."""

    train_accuracy: float
    eval_accuracies: tuple[float, ...]  # eval + no_grad, repeated
    train_mode_accuracies: tuple[float, ...]  # train + no_grad, repeated: dropout and batch statistics
    proper_before: float  # eval + no_grad before any train-mode evaluation
    proper_after: float  # eval + no_grad after them: BatchNorm's running statistics have moved
    running_mean_shift: float  # largest change of a running_mean entry caused by the train-mode evaluations


def _two_blobs(samples: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two overlapping Gaussian classes: hard enough that accuracy has room to move."""
    labels = torch.randint(0, CLASSES, (samples,), generator=generator)
    centres = torch.tensor([-0.6, 0.6])[labels].unsqueeze(1)
    return torch.randn(samples, IN_FEATURES, generator=generator) + centres, labels


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> float:
    starts = list(range(0, len(x), batch_size))
    if len(starts) > 1 and len(x) - starts[-1] < 2:  # BatchNorm in train mode refuses a batch of one
        starts.pop()
    correct = 0
    with torch.no_grad():
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(x)
            correct += int((model(x[start:end]).argmax(1) == y[start:end]).sum())
    return correct / len(x)


def misleading_validation(options: ModesOptions) -> ValidationRun:
    generator = torch.Generator().manual_seed(options.seed)
    x_train, y_train = _two_blobs(TRAIN_SAMPLES, generator)
    x_val, y_val = _two_blobs(VALIDATION_SAMPLES, generator)
    device = options.device
    x_train, y_train, x_val, y_val = (t.to(device) for t in (x_train, y_train, x_val, y_val))
    with isolated_rng(options.seed, device):
        model = build_model(options).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        for _ in range(TRAIN_STEPS):
            rows = torch.randint(0, TRAIN_SAMPLES, (options.batch_size,), generator=generator).to(device)
            loss = nn.functional.cross_entropy(model(x_train[rows]), y_train[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        model.eval()
        train_accuracy = _accuracy(model, x_train, y_train, options.batch_size)
        running_mean = model[1].running_mean.clone()
        proper = [_accuracy(model, x_val, y_val, options.batch_size) for _ in range(options.repeats)]
        model.train()  # the bug: validating without model.eval()
        wrong = [_accuracy(model, x_val, y_val, options.batch_size) for _ in range(options.repeats)]
        model.eval()
        after = _accuracy(model, x_val, y_val, options.batch_size)
    return ValidationRun(
        train_accuracy,
        tuple(proper),
        tuple(wrong),
        proper[0],
        after,
        float((model[1].running_mean - running_mean).abs().max()),
    )


# --- Figures and the lesson, from the measured data ----------------------------------------

FACTS: tuple[tuple[str, Callable[[Cell], bool | None]], ...] = (
    ("builds a graph", lambda c: c.builds_graph),
    ("dropout drops units", lambda c: c.dropout_active),
    ("BatchNorm uses batch statistics", lambda c: c.bn_uses_batch_stats),
    ("BatchNorm running stats change", lambda c: c.bn_running_stats_changed),
    ("saves tensors for backward", lambda c: c.saved_bytes > 0),
    ("output.sum().backward() works", lambda c: c.backward_works),
    ("output usable in autograd later", lambda c: c.reusable_in_autograd),
)


def cell_label(cell: Cell) -> str:
    return f"{cell.behaviour}() + {cell.grad_mode}"


def _detail(fact: str, cell: Cell) -> str:
    if fact == "dropout drops units" and cell.dropout_zeroed_fraction:
        return f" {cell.dropout_zeroed_fraction:.0%}"
    if fact == "saves tensors for backward" and cell.saved_bytes:
        return f" {cell.saved_bytes / 1024:.1f} KiB"
    return ""


def grid_figure(grid: ModeGrid) -> go.Figure:
    """Facts (rows) by the six combinations (columns): green where it happened, grey where it did not."""
    cells = list(grid)
    columns = [f"{c.behaviour}()<br>{c.grad_mode}" for c in cells]
    rows, z, text = [], [], []
    for fact, measure in FACTS:
        values = [measure(c) for c in cells]
        if all(v is None for v in values):
            continue  # the model has no such module
        rows.append(fact)
        z.append([None if v is None else float(v) for v in values])
        text.append(
            [
                ("n/a" if v is None else ("✓" if v else "✗") + _detail(fact, c))
                for v, c in zip(values, cells, strict=True)
            ]
        )
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=rows,
            text=text,
            texttemplate="%{text}",
            textfont={"size": 18},
            showscale=False,
            zmin=0,
            zmax=1,
            colorscale=[[0, "#e9e9e9"], [1, "#7fc97f"]],
            xgap=3,
            ygap=3,
            hoverinfo="skip",
        )
    )
    figure.update_layout(
        title="One forward in each combination, measured",
        height=120 + 52 * len(rows),
        yaxis={"autorange": "reversed"},
        xaxis={"side": "top"},
        margin={"t": 130, "b": 20, "l": 20, "r": 20},  # room for the title above the column labels
    )
    return figure


def saved_bytes_figure(grid: ModeGrid) -> go.Figure:
    cells = list(grid)
    figure = go.Figure(
        go.Bar(
            x=[f"{c.behaviour}()<br>{c.grad_mode}" for c in cells],
            y=[c.saved_bytes for c in cells],
            text=[f"{c.saved_bytes / 1024:.1f} KiB" for c in cells],
            textposition="outside",
            cliponaxis=False,
            marker_color=["#1f77b4" if c.grad_mode == "enable_grad" else "#aaaaaa" for c in cells],
        )
    )
    figure.update_layout(
        title="Bytes saved for backward by one forward",
        yaxis_title="bytes",
        height=400,
        xaxis={"tickangle": 0, "tickfont": {"size": 12}},
    )
    return figure


def validation_figure(run: ValidationRun) -> go.Figure:
    figure = go.Figure()
    for name, values, colour in (
        ("eval() + no_grad", run.eval_accuracies, "#1f77b4"),
        ("train() + no_grad", run.train_mode_accuracies, "#d62728"),
    ):
        figure.add_trace(
            go.Box(
                y=[100 * v for v in values],
                name=name,
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                marker={"color": colour, "size": 9},
                line={"color": colour},
            )
        )
    # Reference lines as plain layout shapes: plotly's add_hline costs more than the whole chart.
    lines = ((run.proper_before, "proper eval before", "top"), (run.proper_after, "proper eval after", "bottom"))
    shapes = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": 100 * v,
            "y1": 100 * v,
            "line": {"dash": "dash", "color": "#333"},
        }
        for v, _, _ in lines
    ]
    notes = [
        {
            "xref": "paper",
            "x": 0,
            "y": 100 * v,
            "text": f"{label}: {v:.1%}",
            "showarrow": False,
            "xanchor": "left",
            "yanchor": "bottom" if side == "top" else "top",
        }
        for v, label, side in lines
    ]
    figure.update_layout(
        title=f"One validation set, {len(run.eval_accuracies)} runs per mode",
        shapes=shapes,
        annotations=notes,
        yaxis_title="validation accuracy (%)",
        height=430,
        showlegend=False,
    )
    return figure


def explain(grid: ModeGrid, validation: ValidationRun | None = None) -> list[str]:
    """The lesson, bound to this run's measurements."""
    lines = []
    sneaky = grid[("train", "no_grad")]
    if sneaky.dropout_active or sneaky.bn_running_stats_changed:
        parts = []
        if sneaky.dropout_active:
            parts.append(f"dropout still zeroed **{sneaky.dropout_zeroed_fraction:.0%}** of its units")
        if sneaky.bn_running_stats_changed:
            parts.append(f"BatchNorm's running_mean still moved by up to **{sneaky.bn_running_mean_shift:.4f}**")
        lines.append(
            "`train()` + `no_grad`: no graph (`grad_fn` is None), yet "
            + " and ".join(parts)
            + ". The grad mode does not change what modules do."
        )
    graph = grid[("eval", "enable_grad")]
    if graph.builds_graph:
        lines.append(
            f"`eval()` + `enable_grad`: dropout off and running stats frozen, yet autograd still recorded a "
            f"graph holding **{graph.saved_bytes / 1024:.1f} KiB** for backward. `eval()` does not stop "
            "autograd: pair it with `no_grad` or `inference_mode` when you need no gradients."
        )
    inference = grid[("eval", "inference_mode")]
    if inference.reuse_error and grid[("eval", "no_grad")].reusable_in_autograd:
        lines.append(
            f"`inference_mode` saved **{inference.saved_bytes} B** and its output is an inference tensor: "
            f"using it in autograd later failed with *{inference.reuse_error.split('.')[0]}*. "
            "A `no_grad` output is an ordinary tensor and can be reused."
        )
    if validation is not None:
        spread = validation.train_mode_accuracies
        same = len(set(validation.eval_accuracies)) == 1
        lines.append(
            f"Validated {len(spread)} times with `eval()` + `no_grad`: "
            + (f"**{validation.eval_accuracies[0]:.1%}** every time. " if same else "the results varied. ")
            + f"In `train()` mode: **{min(spread):.1%} to {max(spread):.1%}**, because dropout and batch "
            "statistics apply."
        )
        lines.append(
            f"Those train-mode passes moved BatchNorm's running_mean by up to "
            f"**{validation.running_mean_shift:.3f}**, so the proper evaluation went from "
            f"**{validation.proper_before:.1%}** to **{validation.proper_after:.1%}**: a validation loop "
            "without `eval()` changes the model it measures."
        )
    return lines


def cell_evidence(cell: Cell) -> str:
    """The measurements behind one cell, as markdown."""
    lines = [
        f"- output `grad_fn`: {'set (a graph was built)' if cell.builds_graph else 'None'}; "
        f"inference tensor: {cell.is_inference_tensor}",
        f"- saved for backward: {cell.saved_bytes:,} B",
    ]
    if cell.dropout_active is not None:
        lines.append(
            f"- dropout zeroed {cell.dropout_zeroed_fraction:.1%} of the units it received; a second call "
            f"on the same input {'dropped different units' if cell.dropout_calls_differ else 'gave the same output'}"
        )
    if cell.bn_uses_batch_stats is not None:
        lines.append(
            f"- BatchNorm normalised with {'the batch' if cell.bn_uses_batch_stats else 'its running'} statistics; "
            f"running_mean moved by up to {cell.bn_running_mean_shift:.4f}"
        )
    lines.append(f"- `output.sum().backward()`: {'worked' if cell.backward_works else '`' + cell.backward_error + '`'}")
    lines.append(
        "- output used in autograd later: " + ("worked" if cell.reusable_in_autograd else "`" + cell.reuse_error + "`")
    )
    return "\n".join(lines)


def grid_rows(grid: ModeGrid) -> list[dict[str, str]]:
    """The grid as table rows (one per fact), for notes."""
    rows = []
    for fact, measure in FACTS:
        row = {"fact": fact}
        for cell in grid:
            value = measure(cell)
            row[cell_label(cell)] = "n/a" if value is None else ("yes" if value else "no")
        rows.append(row)
    return rows
