"""Memory of one real training step, by category; fake-tensor estimates; retention."""

import dataclasses

import pytest
import torch
from torch import nn

from explorers import memory
from explorers.memory import experiment as memory_lab
from explorers.memory.experiment import MemoryOptions


def mlp(batch=64, width=128, depth=3):
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(32 if i == 0 else width, width), nn.GELU()) for i in range(depth)]
    return nn.Sequential(*blocks, nn.Linear(width, 1)), torch.randn(batch, 32)


def parameter_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.parametrize(
    ("optimizer", "states_per_parameter"), [("sgd", 0), ("sgd_momentum", 1), ("adam", 2), ("adamw", 2)]
)
def test_parameters_gradients_and_optimizer_state_to_the_byte(optimizer, states_per_parameter):
    model, x = mlp()
    params = parameter_bytes(model)
    tensors = len(list(model.parameters()))
    result = memory.measure(model, x, optimizer=optimizer)
    assert result.parameters == params and result.gradients == params
    step_counts = 4 * tensors if optimizer.startswith("adam") else 0  # Adam's float32 step per parameter tensor
    assert result.optimizer_state == states_per_parameter * params + step_counts
    assert result.predicted["optimizer_state"] == result.optimizer_state
    assert result.predicted["parameters"] == params


def test_activations_grow_linearly_with_the_batch():
    small = memory.measure(*mlp(batch=64), optimizer="sgd").activations
    large = memory.measure(*mlp(batch=256), optimizer="sgd").activations
    assert large == pytest.approx(4 * small, rel=0.01)


def test_activations_agree_with_the_memory_tracker_timeline():
    model, x = mlp(batch=256)
    result = memory.measure(model, x, optimizer="sgd")
    timeline = dict(result.timeline)
    grown_in_forward = timeline["after forward"] - timeline["start"]
    # The tracker already counted the input before forward; the saved-tensor count includes it.
    assert grown_in_forward == pytest.approx(result.activations - x.numel() * 4, rel=0.02)


def test_checkpointing_lowers_activations_and_bf16_too():
    plain = memory.measure(*mlp(batch=256), optimizer="sgd").activations
    checkpointed = memory.measure(*mlp(batch=256), optimizer="sgd", checkpointing=True).activations
    bf16 = memory.measure(*mlp(batch=256), optimizer="sgd", precision="bf16").activations
    assert checkpointed < 0.6 * plain and bf16 < plain


def test_checkpointing_needs_a_sequential_model():
    with pytest.raises(ValueError, match="nn.Sequential"):
        memory.measure(nn.Linear(4, 1), torch.randn(2, 4), checkpointing=True)


def test_peak_covers_parameters_gradients_and_optimizer_state():
    result = memory.measure(*mlp(), optimizer="adam")
    assert result.peak >= result.parameters + result.gradients + result.optimizer_state
    assert sum(result.at_peak.values()) == result.peak


def test_fake_tensor_estimate_matches_the_real_measurement():
    real = memory.measure(*mlp(batch=128), optimizer="adam")
    fake = memory.estimate(lambda: mlp(batch=128), optimizer="adam")
    assert fake.estimated and not real.estimated
    for category in ("parameters", "gradients", "optimizer_state", "activations"):
        assert getattr(fake, category) == getattr(real, category), category
    assert fake.peak == pytest.approx(real.peak, rel=0.01)


@pytest.mark.parametrize("preset", ["mlp", "cnn"])
def test_closed_forms_predict_the_measured_activations(preset):
    options = MemoryOptions(preset=preset, width=32, depth=2, batch_size=8, optimizer="sgd")
    result = memory_lab.measure_point(options, 8)
    assert result.activations == pytest.approx(result.predicted["activations"], rel=0.02)


def test_sizes_that_do_not_fit_are_estimated_never_allocated():
    options = MemoryOptions(preset="mlp", width=4096, depth=8, batch_size=65536)
    big = memory_lab.point(options, 65536)
    assert not big.measured and big.result.estimated and big.result.peak > memory_lab.MEASURE_LIMIT_BYTES
    small = memory_lab.point(dataclasses.replace(options, width=64, depth=2, batch_size=8), 8)
    assert small.measured and not small.result.estimated


def test_sweep_marks_measured_and_estimated_points():
    options = MemoryOptions()
    points = memory_lab.sweep(options, memory_lab.sweep_batches(options))
    assert len(points) == 8 and options.batch_size in [p.batch for p in points]
    tight = memory_lab.sweep(options, (8, 4096), limit=20 * 2**20)
    assert [p.measured for p in tight] == [True, False]


def test_largest_batch_that_fits_is_the_boundary():
    options = MemoryOptions(preset="mlp", width=1024, depth=4)
    budget = 200 * 2**20
    largest = memory_lab.largest_batch_that_fits(options, budget)
    assert memory_lab.estimate_point(options, largest).peak <= budget
    assert memory_lab.estimate_point(options, 2 * largest).peak > budget


def test_the_device_budget_never_changes_what_is_measured():
    eight, eighty = MemoryOptions(budget_gb=8), MemoryOptions(budget_gb=80)
    assert memory_lab.without_view_settings(eight) == memory_lab.without_view_settings(eighty)
    assert memory_lab.without_view_settings(MemoryOptions(width=64)) != memory_lab.without_view_settings(eight)


def test_gradient_accumulation_shrinks_activations_only():
    plain = memory_lab.measure_point(MemoryOptions(batch_size=256), 256)
    accumulated = memory_lab.measure_point(MemoryOptions(batch_size=256, accumulation=4), 256)
    assert accumulated.activations == pytest.approx(plain.activations / 4, rel=0.02)
    assert accumulated.optimizer_state == plain.optimizer_state


def test_summing_loss_tensors_in_evaluation_grows_and_item_does_not():
    curves = memory_lab.retention(MemoryOptions(width=64, depth=2), steps=5, batch=16)
    fixed, training_bug, evaluation_bug = curves.values()
    assert fixed[-1] == fixed[0]
    assert training_bug[-1] == training_bug[0]  # backward already freed the saved tensors
    growth = [b - a for a, b in zip(evaluation_bug, evaluation_bug[1:], strict=False)]
    assert all(g > 0 for g in growth) and len(set(growth)) == 1  # the same activations kept every step


@pytest.mark.parametrize(
    "bad",
    [
        {"preset": "rnn"},
        {"width": 8},
        {"batch_size": 100},
        {"heads": 3},
        {"optimizer": "lbfgs"},
        {"precision": "fp8"},
        {"accumulation": 0},
        {"budget_gb": 12},
        {"preset": "transformer", "width": 20},
    ],
)
def test_options_are_bounded(bad):
    with pytest.raises(ValueError):
        MemoryOptions(**bad)


def test_measure_rejects_unknown_optimizer_and_precision():
    with pytest.raises(ValueError):
        memory.measure(*mlp(), optimizer="rmsprop")
    with pytest.raises(ValueError):
        memory.measure(*mlp(), precision="int8")
