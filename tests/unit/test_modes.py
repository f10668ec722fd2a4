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
def test_inference_mode_output_fails_later_only_in_an_op_that_must_save_it(grid, behaviour):
    cell = grid[(behaviour, "inference_mode")]
    assert cell.saved_bytes == 0 and cell.is_inference_tensor and not cell.builds_graph
    assert cell.reuse_add_works  # add saves nothing for backward
    assert "Inference tensors cannot be saved for backward" in cell.reuse_mul_error
    assert grid[(behaviour, "no_grad")].reuse_mul_works


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
    facts = [note.text for note in figure.layout.annotations]
    assert [trace.name for trace in figure.data] == facts and "dropout drops units" in facts
    assert all(len(trace.x) == 6 for trace in figure.data)
    row = facts.index("builds a graph")
    marks = figure.data[row]
    assert list(marks.text) == ["✓", "✗", "✗", "✓", "✗", "✗"]
    cells = [shape for shape in figure.layout.shapes if shape.y0 < marks.y[0] < shape.y1]
    colours = [shape.fillcolor for shape in sorted(cells, key=lambda shape: shape.x0)]
    assert colours == [figures.HAPPENED, figures.DID_NOT, figures.DID_NOT] * 2  # under the marks, not under the name
    assert figure.layout.annotations[row].y < min(shape.y0 for shape in cells)
    saved = figures.saved_bytes_figure(grid)
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20}[saved.layout.yaxis.title.text.split()[0]]
    assert [v * scale for v in saved.data[0].y] == pytest.approx([c.saved_bytes for c in grid])
    text = " ".join(lesson.explain(grid))
    assert f"({grid[('train', 'no_grad')].dropout_zeroed_fraction:.1%}" in text
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


# mode_grid on your own model: any reasonable model, and the caller's objects are never touched.


class TupleOut(nn.Module):
    """A custom module with a buffer it reads, returning (logits, features)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(inplace=True))
        self.head = nn.Linear(8, 3)
        self.register_buffer("offset", torch.full((3,), 0.25))

    def forward(self, x):
        features = self.body(x)
        return self.head(nn.functional.dropout(features, 0.3, self.training)) + self.offset, features


class DictOut(nn.Module):
    """A custom module called with a dict batch (`model(**batch)`) and returning a dict with an integer entry."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5, inplace=True), nn.Linear(8, 3))

    def forward(self, x):
        logits = self.net(x)
        return {"logits": logits, "label": logits.argmax(1)}


def frozen_first_layer():
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    model[0].requires_grad_(False)
    return model


def with_stale_grads_and_mixed_modes():
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 3))
    model(torch.randn(5, 6)).sum().backward()  # .grad filled, running stats moved once
    model[1].eval()  # a frozen BatchNorm inside a model in train()
    return model


FAMILY = [
    pytest.param(lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), (4, 6), id="plain-sequential"),
    pytest.param(model_with_dropout_and_bn, (12, 6), id="dropout-and-batchnorm"),
    pytest.param(
        lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(inplace=True), nn.Dropout(0.5, inplace=True), nn.Linear(8, 3)),
        (12, 6),
        id="in-place-relu-and-dropout",
    ),
    pytest.param(frozen_first_layer, (12, 6), id="frozen-layer"),
    pytest.param(with_stale_grads_and_mixed_modes, (12, 6), id="stale-grads-mixed-modes"),
    pytest.param(TupleOut, (12, 6), id="custom-tuple-output-with-buffer"),
    pytest.param(DictOut, {"x": (12, 6)}, id="custom-dict-input-and-output"),
    pytest.param(
        lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout2d(0.5), nn.Flatten()),
        (2, 3, 6, 6),
        id="conv-batchnorm2d-dropout2d",
    ),
    pytest.param(model_with_dropout_and_bn, (1, 6), id="batchnorm-batch-of-one"),
    pytest.param(lambda: nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)), (1, 6), id="batch-of-one"),
]


def make_input(shape, requires_grad=False):
    if isinstance(shape, dict):
        return {name: make_input(s, requires_grad) for name, s in shape.items()}
    return torch.randn(*shape, requires_grad=requires_grad)


def snapshot(model, example_input):
    """Everything of the caller's that mode_grid must leave alone, with version counters to catch in-place writes."""

    def tensor(t):
        return None if t is None else (t.detach().clone(), t._version, t.requires_grad, t.dtype)

    inputs = example_input.values() if isinstance(example_input, dict) else [example_input]
    return {
        "params": {n: (tensor(p), tensor(p.grad)) for n, p in model.named_parameters()},
        "buffers": {n: tensor(b) for n, b in model.named_buffers()},
        "modes": {n: m.training for n, m in model.named_modules()},
        "inputs": [(tensor(x), tensor(x.grad)) for x in inputs],
    }


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if torch.is_tensor(a):
        return a.dtype == b.dtype and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    return a == b


@pytest.mark.parametrize("requires_grad", [False, True], ids=["input", "input-requiring-grad"])
@pytest.mark.parametrize(("factory", "shape"), FAMILY)
def test_mode_grid_takes_the_family_and_leaves_the_callers_model_and_input_bit_for_bit(factory, shape, requires_grad):
    torch.manual_seed(0)
    model = factory()
    example_input = make_input(shape, requires_grad)
    before = snapshot(model, example_input)
    grid = mode_grid(model, example_input)
    assert len(list(grid)) == 6
    assert same(snapshot(model, example_input), before)


def test_in_place_dropout_is_measured_like_dropout_and_the_forward_is_not_dropped_twice():
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))
    in_place = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.5, inplace=True), nn.Linear(32, 3))
    in_place.load_state_dict(plain.state_dict())
    x = torch.randn(16, 6)
    outputs = []
    in_place[3].register_forward_hook(lambda module, inputs, output: outputs.append(output.detach().clone()))
    a, b = mode_grid(plain, x, seed=3), mode_grid(in_place, x, seed=3)
    cell = b[("train", "no_grad")]
    assert cell.dropout_active and 0.3 < cell.dropout_zeroed_fraction < 0.7
    assert cell.dropout_zeroed_fraction == a[("train", "no_grad")].dropout_zeroed_fraction
    with torch.no_grad(), torch.random.fork_rng():  # the forward itself, unprobed, with the cell's seed
        torch.manual_seed(3)
        expected = plain[3](nn.functional.dropout(plain[1](plain[0](x)), 0.5, training=True))
    # Each cell runs its forward, then a second one under another seed (its `output_random` witness):
    # outputs[2] is the train() + no_grad cell's own forward. One dropout, not two.
    assert torch.equal(outputs[2], expected)


def test_batchnorm_on_a_batch_of_one_puts_pytorchs_error_in_the_train_cells():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4))
    x = torch.randn(1, 6)
    with pytest.raises(ValueError) as pytorch:
        nn.BatchNorm1d(4).train()(torch.randn(1, 4))
    grid = mode_grid(model, x)
    for grad_mode in modes.GRAD_MODES:
        assert grid[("train", grad_mode)].forward_error == str(pytorch.value)
        assert grid[("train", grad_mode)].builds_graph is None
        assert grid[("eval", grad_mode)].forward_works
    assert "forward<br>failed" in figures.grid_figure(grid).data[0].text
    assert str(pytorch.value) in " ".join(lesson.explain(grid))


def test_an_input_that_requires_grad_builds_a_graph_through_a_frozen_model_but_gets_no_grad():
    model = nn.Linear(4, 2).requires_grad_(False)
    x = torch.randn(3, 4, requires_grad=True)
    grid = mode_grid(model, x)
    assert grid[("eval", "enable_grad")].builds_graph and grid[("eval", "enable_grad")].backward_works
    assert x.grad is None
    assert not mode_grid(model, x.detach())[("eval", "enable_grad")].builds_graph


@pytest.mark.parametrize(
    ("model", "example_input", "message"),
    [
        (nn.Linear(4, 2), torch.randn(3, 5), r"failed on model\(x\) with x of shape \(3, 5\) in every mode"),
        (lambda x: x, torch.randn(3, 4), "needs a torch.nn.Module"),
        (nn.Flatten(), torch.arange(6).view(2, 3), "floating-point tensor"),
    ],
    ids=["wrong-shape", "not-a-module", "integer-output"],
)
def test_bad_input_is_a_clear_value_error(model, example_input, message):
    with pytest.raises(ValueError, match=message):
        mode_grid(model, example_input)
