"""The Modes lab's experiments: its own small model, the mode grid on it, and a misleading validation.

Both draw from torch's global RNG (dropout, initialisation), so the page runs them on the
run engine (`explorers.engine`); each takes the options and an optional `report`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from explorers import bounds
from explorers.modes.your_model import ModeGrid, mode_grid
from explorers.rng import isolated_rng

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
    return _layers(options).to(options.device)


def _layers(options: ModesOptions) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(IN_FEATURES, options.width),
        nn.BatchNorm1d(options.width, momentum=options.momentum),
        nn.ReLU(),
        nn.Dropout(options.dropout_p),
        nn.Linear(options.width, CLASSES),
    )


def model_label(options: ModesOptions) -> str:
    """The lab's model as built from these options, e.g. "Linear(8→64) → BatchNorm1d(64) → ... → Linear(64→2)"."""
    with torch.device("meta"):  # shapes only: nothing allocated, no random numbers drawn
        model = _layers(options)
    return " → ".join(_layer_label(layer) for layer in model)


def _layer_label(layer: nn.Module) -> str:
    if isinstance(layer, nn.Linear):
        return f"Linear({layer.in_features}→{layer.out_features})"
    if isinstance(layer, nn.BatchNorm1d):
        return f"BatchNorm1d({layer.num_features}, momentum {layer.momentum:g})"
    if isinstance(layer, nn.Dropout):
        return f"Dropout(p={layer.p:g})"
    return type(layer).__name__


def lab_grid(options: ModesOptions, report=None) -> ModeGrid:
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


def misleading_validation(options: ModesOptions, report=None) -> ValidationRun:
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


def grid_options(options: ModesOptions) -> ModesOptions:
    """What the grid depends on: the number of validation repeats only changes the validation experiment."""
    return dataclasses.replace(options, repeats=ModesOptions.repeats)
