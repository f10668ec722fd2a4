"""The mode grid's facts, measured on real models with Dropout and BatchNorm."""

import pytest
import torch
from torch import nn

from explorers import modes
from explorers.modes import ModesOptions, figures, lesson, mode_grid


def model_with_dropout_and_bn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))


@pytest.fixture(scope="module")
def grid():
    return mode_grid(model_with_dropout_and_bn(), torch.randn(12, 6))


def test_train_no_grad_still_drops_units_and_moves_running_stats_without_a_graph(grid):
    cell = grid[("train", "no_grad")]
    assert not cell.builds_graph
    assert cell.dropout_active and cell.dropout_calls_differ and 0.3 < cell.dropout_zeroed_fraction < 0.7
    assert cell.bn_uses_batch_stats and cell.bn_running_stats_changed and cell.bn_running_mean_shift > 0
    assert "does not require grad" in cell.backward_error


def test_eval_enable_grad_still_builds_a_graph_but_freezes_modules(grid):
    cell = grid[("eval", "enable_grad")]
    assert cell.builds_graph and cell.saved_bytes > 0 and cell.backward_works
    assert not cell.dropout_active and cell.dropout_zeroed_fraction == 0 and not cell.dropout_calls_differ
    assert not cell.bn_uses_batch_stats and not cell.bn_running_stats_changed


@pytest.mark.parametrize("behaviour", modes.BEHAVIOURS)
def test_inference_mode_saves_nothing_and_its_output_cannot_enter_autograd(grid, behaviour):
    cell = grid[(behaviour, "inference_mode")]
    assert cell.saved_bytes == 0 and cell.is_inference_tensor and not cell.builds_graph
    assert "Inference tensors cannot be saved for backward" in cell.reuse_error
    assert grid[(behaviour, "no_grad")].reusable_in_autograd


def test_only_grad_enabled_cells_save_for_backward_and_train_mode_saves_more(grid):
    saved = {(c.behaviour, c.grad_mode): c.saved_bytes for c in grid}
    assert all((value > 0) == (mode == "enable_grad") for (_, mode), value in saved.items())
    assert saved[("train", "enable_grad")] > saved[("eval", "enable_grad")]  # dropout masks, batch statistics


def test_behaviour_facts_do_not_depend_on_grad_mode(grid):
    for behaviour in modes.BEHAVIOURS:
        cells = [grid[(behaviour, g)] for g in modes.GRAD_MODES]
        assert len({c.dropout_active for c in cells}) == 1
        assert len({c.bn_uses_batch_stats for c in cells}) == 1
        assert len({c.bn_running_stats_changed for c in cells}) == 1


def test_every_cell_starts_from_the_same_state_and_the_model_is_left_as_found():
    model = model_with_dropout_and_bn().eval()
    model[0].weight.grad = torch.full_like(model[0].weight, 0.5)
    before = {n: b.clone() for n, b in model.named_buffers()}
    grid = mode_grid(model, torch.randn(12, 6))
    # Each train-mode cell moved the running mean by the same amount: none saw another's update.
    shifts = {grid[("train", g)].bn_running_mean_shift for g in modes.GRAD_MODES}
    assert len(shifts) == 1
    assert all(torch.equal(b, before[n]) for n, b in model.named_buffers())
    assert not model.training and not any(m.training for m in model.modules())
    assert torch.equal(model[0].weight.grad, torch.full_like(model[0].weight, 0.5))
    assert model[4].weight.grad is None


def test_a_model_without_dropout_or_batchnorm_reports_not_applicable():
    grid = mode_grid(nn.Linear(4, 2), torch.randn(3, 4))
    cell = grid[("train", "no_grad")]
    assert cell.dropout_active is None and cell.bn_uses_batch_stats is None
    assert grid[("train", "enable_grad")].builds_graph


def test_grid_is_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    a = modes.lab_grid(ModesOptions(seed=3))
    b = modes.lab_grid(ModesOptions(seed=3))
    assert a == b
    assert torch.equal(torch.rand(2), expected)


def test_validation_in_eval_mode_is_stable_and_train_mode_scatters_and_shifts_stats():
    run = modes.misleading_validation(ModesOptions(repeats=6))
    assert len(set(run.eval_accuracies)) == 1
    assert len(set(run.train_mode_accuracies)) > 1
    assert run.running_mean_shift > 0
    assert run.proper_before == run.eval_accuracies[0]
    assert run.proper_after != run.proper_before


def test_without_dropout_train_mode_validation_no_longer_scatters():
    run = modes.misleading_validation(ModesOptions(dropout_p=0.0, repeats=4))
    assert len(set(run.train_mode_accuracies)) == 1  # batch statistics alone are deterministic
    assert run.running_mean_shift > 0


def test_figures_and_lesson_carry_the_measurements(grid):
    figure = figures.grid_figure(grid)
    heat = figure.data[0]
    assert len(heat.x) == 6 and "dropout drops units" in heat.y
    row = list(heat.y).index("builds a graph")
    assert list(heat.z[row]) == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    bars = figures.saved_bytes_figure(grid).data[0]
    assert list(bars.y) == [c.saved_bytes for c in grid]
    text = " ".join(lesson.explain(grid))
    assert f"{grid[('train', 'no_grad')].dropout_zeroed_fraction:.0%}" in text
    assert "Inference tensors cannot be saved for backward" in text


@pytest.mark.parametrize(
    "bad",
    [
        {"dropout_p": 0.95},
        {"width": 10_000},
        {"batch_size": 1},
        {"momentum": 0.0},
        {"repeats": 100},
        {"seed": -1},
        {"width": "64"},
    ],
)
def test_options_reject_out_of_range_values(bad):
    with pytest.raises(ValueError):
        ModesOptions(**bad)


def test_the_grid_does_not_depend_on_the_validation_repeats():
    from explorers.modes.experiment import grid_options

    assert grid_options(ModesOptions(repeats=3)) == grid_options(ModesOptions(repeats=30))
    assert grid_options(ModesOptions(width=8)) != grid_options(ModesOptions())
