"""The bench every drill's loop trains on: the data and models it builds, and what it measures from outside the loop.

A drill's loop (explorers/drills/loops.py) is ordinary PyTorch: it builds its DataLoader and
optimizer, trains, validates. It receives a `Bench` and calls three things on it: `bench.model()`
(or `bench.regressor()`) for a seeded model, `bench.log(loss)` after each batch, and
`bench.epoch(reported)` once per epoch with the validation number the loop computed itself.
Everything else is measured without the loop's help, so a buggy loop cannot hide it:

- `.grad` of every model parameter at each `optimizer.step()`, from PyTorch's global optimizer
  step hooks, next to the gradient backward produced since the last step (tensor hooks on the
  parameters), and how far each step moved each layer;
- which model parameters the optimizer does not hold;
- live bytes after each forward of the model, from the Memory lab's storage tracker
  (`memory.tracker.LiveBytes`), and whether that forward's output carried an autograd graph;
- whether Dropout and BatchNorm ran in training mode, in the training steps and in validation
  (forward hooks), and whether BatchNorm's running statistics moved in each;
- which samples each epoch visited, in order, and the labels of each batch (the dataset records
  its own reads);
- the training and validation metric after each epoch, measured in `eval()` under `no_grad`;
- PyTorch's warnings, and its error if the loop raised one.

The measuring code runs with the tracker switched off, so its own tensors are not counted.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.data import Dataset

from explorers.memory.tracker import LiveBytes

FEATURES = 8
CLASSES = 4
HIDDEN = 32
TRAIN_SAMPLES = 241  # 240 + 1: every batch size that divides 240 leaves a last batch of one sample
VALIDATION_SAMPLES = 120
EPOCHS = 4
DROPOUT = 0.3
CLASS_SPREAD = 1.6  # class centres ~ N(0, spread²): about 90% is reachable, not 100%


class Recorded(Dataset):
    """A dataset of (x, y) stored class by class, as files often are, that records every index read."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, reads: list[int]) -> None:
        self.x, self.y, self.reads = x, y, reads

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads.append(int(index))
        return self.x[index], self.y[index]


class Classifier(nn.Module):
    """A body (Linear, BatchNorm, ReLU, Dropout) and a head: the two parts a loop can treat apart."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            OrderedDict(
                fc=nn.Linear(FEATURES, HIDDEN), bn=nn.BatchNorm1d(HIDDEN), relu=nn.ReLU(), drop=nn.Dropout(DROPOUT)
            )
        )
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def make_data(seed: int) -> dict[str, torch.Tensor]:
    """Four Gaussian classes in 8 dimensions (sorted by class) and a regression target, from one generator."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(CLASSES, FEATURES, generator=generator) * CLASS_SPREAD
    w_true = torch.randn(FEATURES, generator=generator)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = torch.sort(torch.randint(0, CLASSES, (n,), generator=generator)).values
        x = centres[y] + torch.randn(n, FEATURES, generator=generator)
        target = torch.tanh(x @ w_true / math.sqrt(FEATURES)) + 0.1 * torch.randn(n, generator=generator)
        return x, y, target

    x, y, target = draw(TRAIN_SAMPLES)
    val_x, val_y, val_target = draw(VALIDATION_SAMPLES)
    return {"x": x, "y": y, "target": target, "val_x": val_x, "val_y": val_y, "val_target": val_target}


@dataclass
class StepRecord:
    """One optimizer.step(), seen from PyTorch's step hooks."""

    batch: int  # how many batches the loop had logged before this step
    grad_norms: dict[str, float | None]  # per layer: ‖.grad‖ as the step found it (None: no .grad at all)
    fresh_norms: dict[str, float]  # per layer: ‖what backward produced since the last step‖
    update_ratios: dict[str, float]  # per layer: ‖Δw‖ / ‖w‖ over this step
    not_in_optimizer: tuple[str, ...]  # model parameters this optimizer does not hold
    samples: tuple[int, ...] = ()  # the sample indices read since the step before: what this step learned from
    # per layer: the cosine between .grad and what backward produced since the last step (1: that gradient, scaled
    # or not, as clipping leaves it; below 1: something else mixed in, such as an earlier step's gradient)
    grad_cosines: dict[str, float] = field(default_factory=dict)


@dataclass
class ModeUse:
    """Forward calls of Dropout/BatchNorm in one part of the loop, and in which mode."""

    dropout_calls: int = 0
    dropout_training: int = 0  # of those, in training mode
    batchnorm_calls: int = 0
    batchnorm_training: int = 0
    running_stats_moved: bool = False


@dataclass
class EpochRecord:
    reported: float | None  # the validation number the loop computed itself
    train_metric: float  # measured by the bench: accuracy (classification) or R² (regression), eval + no_grad
    val_metric: float
    order: tuple[int, ...]  # the sample indices this epoch read, in order
    training: ModeUse
    validation: ModeUse


@dataclass
class Recording:
    """What one run of a loop left behind: plain data, picklable."""

    task: str = "classification"
    losses: list[float] = field(default_factory=list)  # what the loop logged, one per batch
    live_bytes: list[int] = field(default_factory=list)  # after each of the model's forwards
    forward_phases: list[str] = field(default_factory=list)  # "training" or "validation", per forward
    forward_epochs: list[int] = field(default_factory=list)  # 0-based, per forward
    forward_graphs: list[bool] = field(default_factory=list)  # per forward: did its output carry a grad_fn
    # per logged batch: the bench's own loss of that batch's output (cross-entropy on the logits, or mean squared
    # error against the target's shape), to tell whether the loop logs that loss or some other quantity
    bench_losses: list[float | None] = field(default_factory=list)
    batch_labels: list[tuple[int, ...]] = field(default_factory=list)  # each batch's labels (classification)
    steps: list[StepRecord] = field(default_factory=list)
    epochs: list[EpochRecord] = field(default_factory=list)
    changed: dict[str, bool] = field(default_factory=dict)  # per layer: did its values change over the run
    layers: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # PyTorch's error, "TypeName: message"
    error_after_batches: int | None = None


def _layer(name: str) -> str:
    return name.rsplit(".", 1)[0]


def _norm(tensors: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.detach().double().pow(2).sum()) for t in tensors))


def _cosine(grads: list[torch.Tensor], fresh: list[torch.Tensor]) -> float:
    """The cosine between two lists of tensors taken as one vector each (float64); both must be non-zero."""
    dot = sum(float((g.detach().double() * f.double()).sum()) for g, f in zip(grads, fresh, strict=True))
    return dot / (_norm(grads) * _norm(fresh))


class Bench:
    """What a loop is given. Models come seeded from the global RNG, which the caller seeds."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.epochs = EPOCHS
        data = make_data(seed)
        self._reads: list[int] = []
        self.train_set = Recorded(data["x"], data["y"], self._reads)
        self.val_x, self.val_y = data["val_x"], data["val_y"]
        self.regression_set = Recorded(data["x"], data["target"], self._reads)
        self.regression_val_x, self.regression_val_y = data["val_x"], data["val_target"]
        self.recording = Recording()
        self._model: nn.Module | None = None
        self._initial: dict[int, torch.Tensor] = {}  # id(parameter) -> its values when the bench first saw it
        self._hooked: set[int] = set()
        self._fresh: dict[str, torch.Tensor] = {}
        self._before_step: dict[str, torch.Tensor] = {}
        self._pending = ModeUse()  # forward calls since the last step or epoch report
        self._pending_bytes: list[int] = []  # live bytes after each of those forwards
        self._pending_graphs: list[bool] = []  # and whether each one's output carried an autograd graph
        self._reads_at_forward = 0
        self._last_loss: float | None = None  # the bench's loss of the last forward that read a batch
        self._measuring = False
        self._stats_at_mark: list[torch.Tensor] = []
        self._epoch_training = ModeUse()
        self._reads_at_epoch = 0
        self._reads_at_step = 0
        self._batches_at_epoch = 0
        self.tracker = LiveBytes()

    # --- what a loop calls ----------------------------------------------------------------------

    def model(self) -> Classifier:
        return self._track(Classifier(), "classification")

    def regressor(self) -> nn.Sequential:
        model = nn.Sequential(OrderedDict(fc=nn.Linear(FEATURES, HIDDEN), relu=nn.ReLU(), out=nn.Linear(HIDDEN, 1)))
        return self._track(model, "regression")

    def log(self, loss: float | torch.Tensor) -> None:
        """After each batch: the loss the loop reports, and what is alive now."""
        with _disable_current_modes():
            self.recording.losses.append(float(loss))
            self.recording.bench_losses.append(self._last_loss)
            if self.recording.task == "classification":
                self.recording.batch_labels.append(self._labels_since_last_batch())
            self._mark_training()

    def epoch(self, reported: float | None = None) -> None:
        """Once per epoch, after validation: the loop's own validation number; the bench measures its own."""
        with _disable_current_modes():
            validation = self._take_pending()
            self._fold_bytes("validation")
            validation.running_stats_moved = self._stats_moved()
            train_metric, val_metric = self._measure()
            reads = self._reads[self._reads_at_epoch :]
            self._reads_at_epoch = len(self._reads)
            self._batches_at_epoch = len(self.recording.losses)
            self.recording.epochs.append(
                EpochRecord(
                    None if reported is None else float(reported),
                    train_metric,
                    val_metric,
                    tuple(reads),
                    self._epoch_training,
                    validation,
                )
            )
            self._epoch_training = ModeUse()
            self._stats_at_mark = self._running_stats()

    # --- hooks --------------------------------------------------------------------------------

    def _track(self, model: nn.Module, task: str) -> nn.Module:
        if self._model is not None:
            raise RuntimeError("a drill's loop trains one model")
        self._model = model
        self.recording.task = task
        with _disable_current_modes():
            self.tracker.add(list(model.parameters()) + list(model.buffers()), "parameters")
            self._initial = {id(p): p.detach().clone() for p in model.parameters()}
            self._stats_at_mark = self._running_stats()
        model.register_forward_pre_hook(lambda module, args: self._hook_new_parameters())
        model.register_forward_hook(lambda module, args, output: self._after_forward(output))
        for module in model.modules():
            if isinstance(module, nn.Dropout | nn.BatchNorm1d):
                module.register_forward_hook(self._count_mode)
        return model

    def _hook_new_parameters(self) -> None:
        """Tensor hooks on every parameter the model holds now (a replaced layer's included)."""
        for name, parameter in self._model.named_parameters():
            if id(parameter) not in self._initial:  # a layer the loop put in after building the model
                with _disable_current_modes():
                    self._initial[id(parameter)] = parameter.detach().clone()
            if id(parameter) not in self._hooked and parameter.requires_grad:
                self._hooked.add(id(parameter))
                parameter.register_hook(lambda grad, name=name: self._fresh_gradient(name, grad))

    def _after_forward(self, output) -> None:
        if not self._measuring:
            self._pending_bytes.append(self.tracker.total)
            self._pending_graphs.append(isinstance(output, torch.Tensor) and output.grad_fn is not None)
            with _disable_current_modes(), torch.no_grad():
                self._last_loss = self._bench_loss(output)

    def _bench_loss(self, output) -> float | None:
        """The loss of the batch this forward read, as the correct loop computes it; None for a forward that read
        no samples of the training set (validation on tensors the loop holds)."""
        reads = self._reads[self._reads_at_forward :]
        self._reads_at_forward = len(self._reads)
        if not reads or not isinstance(output, torch.Tensor) or output.shape[0] != len(reads):
            return None
        index = torch.tensor(reads)
        if self.recording.task == "classification":
            return float(F.cross_entropy(output.detach(), self.train_set.y[index]))
        return float(F.mse_loss(output.detach().squeeze(1), self.regression_set.y[index]))

    def _fold_bytes(self, phase: str) -> None:
        self.recording.live_bytes += self._pending_bytes
        self.recording.forward_phases += [phase] * len(self._pending_bytes)
        self.recording.forward_epochs += [len(self.recording.epochs)] * len(self._pending_bytes)
        self.recording.forward_graphs += self._pending_graphs
        self._pending_bytes, self._pending_graphs = [], []

    def _fresh_gradient(self, name: str, grad: torch.Tensor) -> None:
        with _disable_current_modes():
            previous = self._fresh.get(name)
            self._fresh[name] = grad.detach().clone() if previous is None else previous + grad.detach()

    def _count_mode(self, module: nn.Module, args, output) -> None:
        if self._measuring:  # the bench's own forwards are not the loop's
            return
        if isinstance(module, nn.Dropout):
            self._pending.dropout_calls += 1
            self._pending.dropout_training += module.training
        else:
            self._pending.batchnorm_calls += 1
            self._pending.batchnorm_training += module.training

    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        with _disable_current_modes():
            named = dict(self._model.named_parameters())
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            grads: dict[str, list[torch.Tensor | None]] = {}
            fresh: dict[str, list[torch.Tensor]] = {}
            for name, p in named.items():
                grads.setdefault(_layer(name), []).append(p.grad)
                fresh.setdefault(_layer(name), []).extend([self._fresh[name]] if name in self._fresh else [])
            self._step_grads = {
                layer: None if all(g is None for g in gs) else _norm([g for g in gs if g is not None])
                for layer, gs in grads.items()
            }
            self._step_fresh = {layer: _norm(fs) for layer, fs in fresh.items()}
            self._step_cosines = {  # only where both are non-zero: a cosine with a zero vector is not defined
                layer: _cosine(grads[layer], fresh[layer])
                for layer in fresh
                if all(g is not None for g in grads[layer])
                and len(grads[layer]) == len(fresh[layer])
                and _norm(grads[layer]) > 0
                and self._step_fresh[layer] > 0
            }
            self._step_missing = tuple(name for name, p in named.items() if id(p) not in held)
            self._fresh = {}
            self._before_step = {name: p.detach().clone() for name, p in named.items()}

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        with _disable_current_modes():
            moved: dict[str, list[torch.Tensor]] = {}
            before: dict[str, list[torch.Tensor]] = {}
            for name, p in self._model.named_parameters():
                if name in self._before_step:
                    moved.setdefault(_layer(name), []).append(p.detach() - self._before_step[name])
                    before.setdefault(_layer(name), []).append(self._before_step[name])
            ratios = {layer: _norm(moved[layer]) / (_norm(before[layer]) or math.inf) for layer in moved}
            samples = tuple(self._reads[self._reads_at_step :])
            self._reads_at_step = len(self._reads)
            self.recording.steps.append(
                StepRecord(
                    len(self.recording.losses),
                    self._step_grads,
                    self._step_fresh,
                    ratios,
                    self._step_missing,
                    samples,
                    self._step_cosines,
                )
            )

    # --- measuring ------------------------------------------------------------------------------

    def _labels_since_last_batch(self) -> tuple[int, ...]:
        counted = sum(len(labels) for labels in self.recording.batch_labels)
        reads = self._reads[counted:]
        return tuple(int(self.train_set.y[i]) for i in reads)

    def _running_stats(self) -> list[torch.Tensor]:
        if self._model is None:
            return []
        return [b.detach().clone() for m in self._model.modules() if isinstance(m, nn.BatchNorm1d) for b in m.buffers()]

    def _stats_moved(self) -> bool:
        now = self._running_stats()
        return any(not torch.equal(a, b) for a, b in zip(self._stats_at_mark, now, strict=True))

    def _take_pending(self) -> ModeUse:
        taken, self._pending = self._pending, ModeUse()
        return taken

    def _mark_training(self) -> None:
        """Forward calls since the last mark were training; fold them into this epoch's training use."""
        done = self._take_pending()
        self._fold_bytes("training")
        total = self._epoch_training
        total.dropout_calls += done.dropout_calls
        total.dropout_training += done.dropout_training
        total.batchnorm_calls += done.batchnorm_calls
        total.batchnorm_training += done.batchnorm_training
        total.running_stats_moved |= self._stats_moved()
        self._stats_at_mark = self._running_stats()

    def _measure(self) -> tuple[float, float]:
        """Training and validation metric in eval() under no_grad; every module's mode restored after."""
        model = self._model
        modes = {m: m.training for m in model.modules()}
        model.eval()
        self._measuring = True
        try:
            with torch.no_grad():
                if self.recording.task == "classification":
                    train = _accuracy(model(self.train_set.x), self.train_set.y)
                    val = _accuracy(model(self.val_x), self.val_y)
                else:
                    train = _r2(model(self.regression_set.x).squeeze(1), self.regression_set.y)
                    val = _r2(model(self.regression_val_x).squeeze(1), self.regression_val_y)
        finally:
            for module, training in modes.items():
                module.training = training
            self._measuring = False
        return train, val

    def finish(self) -> None:
        with _disable_current_modes():
            if self._model is None:
                return
            self.recording.layers = tuple(dict.fromkeys(_layer(n) for n, _ in self._model.named_parameters()))
            changed: dict[str, bool] = {}
            for name, p in self._model.named_parameters():
                start = self._initial.get(id(p))
                moved = start is None or not torch.equal(start, p.detach())
                changed[_layer(name)] = changed.get(_layer(name), False) or moved
            self.recording.changed = changed


def _accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(dim=1) == y).double().mean())


def _r2(prediction: torch.Tensor, target: torch.Tensor) -> float:
    residual = float((prediction - target).double().pow(2).sum())
    total = float((target - target.mean()).double().pow(2).sum())
    return 1 - residual / total


def record(loop, seed: int) -> Recording:
    """Run `loop(bench)` once, measured. The caller seeds torch's global RNG: the loop's DataLoader and dropout
    draw from it."""
    bench = Bench(seed)
    pre = register_optimizer_step_pre_hook(lambda opt, args, kwargs: bench.before_step(opt))
    post = register_optimizer_step_post_hook(lambda opt, args, kwargs: bench.after_step(opt))
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # PyTorch's warn-once warnings too, on every run: not only a process's first
    try:
        with warnings.catch_warnings(record=True) as caught, bench.tracker:
            warnings.simplefilter("default")  # each distinct warning once per run: the filters just changed
            try:
                loop(bench)
            except Exception as error:  # noqa: BLE001  (PyTorch's error is the drill's evidence)
                bench.recording.error = f"{type(error).__name__}: {error}"
                bench.recording.error_after_batches = len(bench.recording.losses)
        bench.recording.warnings = list(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))
    finally:
        torch.set_warn_always(warn_always)
        pre.remove()
        post.remove()
    bench.finish()
    return bench.recording
