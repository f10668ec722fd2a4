"""The Gradients lab's clipping experiments: what `clip_grad_norm_` changes, and what it leaves alone.

`clip_once` clips one scenario's gradient and compares each layer's norm before and after: every
gradient is scaled by one factor, so the first/last layer ratio is the same before and after.
`clipped_training` trains the exploding case with and without clipping from the same weights.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from explorers.gradients.experiment import GradientsOptions, _grad_norm, build, loss_fn, training_options

TRAINING_STEPS = 30


@dataclass(frozen=True)
class Clipping:
    """This scenario's gradient before and after one clip_grad_norm_(max_norm)."""

    max_norm: float
    layer_names: tuple[str, ...]  # layers with a gradient, forward order
    layer_before: tuple[float, ...]
    layer_after: tuple[float, ...]
    total_before: float | None  # clip_grad_norm_'s return value: the total norm before clipping
    total_after: float | None
    imbalance_before: float | None  # first layer's weight gradient norm / last layer's (layer_names[0], [-1])
    imbalance_after: float | None
    note: str  # why there is nothing to clip, when there is not

    @property
    def clipped(self) -> bool:
        return self.total_before is not None and self.total_before > self.max_norm


@dataclass(frozen=True)
class Training:
    """The exploding case trained twice from the same weights: plain SGD, and SGD after clip_grad_norm_."""

    options: GradientsOptions  # the case trained (see training_options)
    steps: int  # the steps each run was given
    losses_plain: tuple[float, ...]  # loss before each step, without clipping; ends at the first inf or nan
    losses_clipped: tuple[float, ...]
    grad_norms_plain: tuple[float, ...]  # total gradient norm at each step that ran, before any clipping
    grad_norms_clipped: tuple[float, ...]
    # ‖weights at the end − initial weights‖ / ‖initial weights‖ over the trainable parameters (nan if not finite)
    weights_moved_plain: float = math.nan
    weights_moved_clipped: float = math.nan
    largest_step_clipped: float = math.nan  # the largest ‖weights after a step − before it‖ of the clipped run

    @property
    def learning_rate(self) -> float:
        return self.options.learning_rate

    @property
    def max_norm(self) -> float:
        return self.options.max_norm

    @property
    def diverged_at(self) -> int | None:
        """The first step whose loss is not finite without clipping, None if it never diverged."""
        return next((i for i, v in enumerate(self.losses_plain) if not math.isfinite(v)), None)


@dataclass(frozen=True)
class ClipStudy:
    clipping: Clipping
    training: Training


def _layer_norms(model: nn.Module) -> tuple[list[str], list[float]]:
    """Each layer's weight gradient norm (its matrices'; all its parameters' when it has none), as the
    diagnosis compares layers through depth: one definition of "first/last layer ratio" on the page."""
    groups: dict[str, list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            groups.setdefault(name.rpartition(".")[0] or "(model)", []).append(p)
    compared = [[p for p in ps if p.dim() > 1] or ps for ps in groups.values()]
    return list(groups), [_grad_norm(ps) for ps in compared]


def clip_once(options: GradientsOptions, report=None) -> Clipping:
    """One backward on this scenario's model and batch, then clip_grad_norm_(max_norm): per-layer norms around it.

    Depends on the scenario's model options and max_norm only.
    """
    model, x, y = build(options)
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        loss_fn(model(x), y).backward()
    except RuntimeError as error:
        note = f"Backward failed, so there is no gradient to clip: {str(error).splitlines()[0]}"
        return Clipping(options.max_norm, (), (), (), None, None, None, None, note)
    names, before = _layer_norms(model)
    total_before = float(nn.utils.clip_grad_norm_(params, options.max_norm))
    _, after = _layer_norms(model)
    imbalance_before = imbalance_after = None
    if len(before) >= 2 and before[-1] > 0 and after[-1] > 0:
        imbalance_before, imbalance_after = before[0] / before[-1], after[0] / after[-1]
    note = "" if math.isfinite(total_before) else "The gradient is not finite: clipping cannot give it a finite norm."
    if report:
        report(1, 1)
    return Clipping(
        max_norm=options.max_norm,
        layer_names=tuple(names),
        layer_before=tuple(before),
        layer_after=tuple(after),
        total_before=total_before,
        total_after=_grad_norm(params),
        imbalance_before=imbalance_before,
        imbalance_after=imbalance_after,
        note=note,
    )


def clipped_training(options: GradientsOptions, report=None) -> Training:
    """The exploding case (`training_options(options)`) trained TRAINING_STEPS steps without and with clipping.

    Pass `training_options(options)` as the options to share one cached run among every scenario.
    """
    options = training_options(options)
    plain_model, x, y = build(options)
    clipped_model = copy.deepcopy(plain_model)
    total = 2 * TRAINING_STEPS

    def progress(done: int) -> None:
        if report:
            report(done, total)

    initial = _flat(plain_model)
    plain, plain_norms, _ = _train(plain_model, x, y, options, False, progress)
    clipped, clipped_norms, steps = _train(clipped_model, x, y, options, True, lambda s: progress(TRAINING_STEPS + s))
    return Training(
        options,
        TRAINING_STEPS,
        tuple(plain),
        tuple(clipped),
        tuple(plain_norms),
        tuple(clipped_norms),
        weights_moved_plain=_moved(initial, _flat(plain_model)),
        weights_moved_clipped=_moved(initial, _flat(clipped_model)),
        largest_step_clipped=max(steps, default=math.nan),
    )


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().flatten().cpu() for p in model.parameters() if p.requires_grad])


def _moved(initial: torch.Tensor, final: torch.Tensor) -> float:
    base = float(initial.norm())
    return float((final - initial).norm()) / base if base > 0 else math.nan


def clipping_study(options: GradientsOptions, report=None) -> ClipStudy:
    """Both clipping experiments at once, for a notebook: `clip_once` and `clipped_training`."""
    return ClipStudy(clip_once(options), clipped_training(options, report))


def _train(
    model: nn.Module, x, y, options: GradientsOptions, clip: bool, progress
) -> tuple[list[float], list[float], list[float]]:
    """Losses before each step, gradient norms (before clipping) and how far each step moved the weights."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=options.learning_rate)
    losses, norms, steps = [], [], []
    for step in range(TRAINING_STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            # Diverged: from here every step computes with inf/nan weights, which teaches nothing and runs
            # 10-100x slower on a CPU. The run ends; its losses are the ones measured.
            progress(TRAINING_STEPS)
            break
        loss.backward()
        if clip:
            norms.append(float(nn.utils.clip_grad_norm_(params, options.max_norm)))
        else:
            norms.append(_grad_norm(params))
        before = _flat(model)
        optimizer.step()
        steps.append(float((_flat(model) - before).norm()))
        progress(step + 1)
    return losses, norms, steps
