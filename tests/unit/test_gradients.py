"""The Gradients lab's facts: each scenario's real outcome, and `diagnose` on models of many shapes."""

import copy
import dataclasses
import math
import pickle

import pytest
import torch
from torch import nn

from explorers import gradients
from explorers.gradients import card as gradients_card
from explorers.gradients import clipping, experiment, figures, lesson
from explorers.gradients.experiment import GradientsOptions

INPLACE_TEXT = "one of the variables needed for gradient computation has been modified by an inplace operation"


@pytest.fixture(scope="module")
def runs():
    return {name: gradients.scenario_run(GradientsOptions.for_scenario(name)) for name in gradients.SCENARIOS}


# --- Each scenario's outcome --------------------------------------------------------------------

EXPECTED = {  # scenario: (parameters with .grad None, parameters with .grad exactly 0, finding kinds)
    "healthy": ((), (), ()),
    "detached": (("branch.weight", "branch.bias"), (), ("broken_graph",)),
    "unused": (("skip.weight", "skip.bias"), (), ("unused",)),
    "frozen": (("encoder.weight", "encoder.bias"), (), ("frozen",)),
    "inplace": (("fc1.weight", "fc1.bias"), (), ("backward_error",)),
    "dead_relu": ((), ("0.weight", "0.bias", "2.weight", "2.bias", "4.weight"), ("dead_units",)),
    "vanishing": ((), (), ("vanishing",)),
    "exploding": ((), (), ("exploding",)),
    "argmax": (("encoder.weight", "encoder.bias", "scorer.weight", "scorer.bias"), (), ("broken_graph",)),
    "no_zero_grad": ((), (), ()),
}


def test_every_scenario_has_an_expected_outcome():
    assert set(EXPECTED) == set(gradients.SCENARIOS)


@pytest.mark.parametrize("name", EXPECTED)
def test_scenario_gives_the_none_and_zero_gradients_and_the_findings_it_plants(runs, name):
    none, zero, kinds = EXPECTED[name]
    d = runs[name].diagnosis
    assert d.with_status("none") == none
    assert d.with_status("zero") == zero
    assert d.kinds == kinds
    assert (d.verdict == "healthy") == (not kinds)
    assert all(d.parameters[n].norm == 0.0 for n in none + zero)
    others = set(d.parameters) - set(none) - set(zero)
    assert all(d.parameters[n].status == "finite" and d.parameters[n].norm > 0 for n in others)


def test_the_scenarios_gradients_are_what_plain_torch_gives_the_same_model():
    for name in ("healthy", "detached", "dead_relu", "vanishing"):
        options = GradientsOptions.for_scenario(name)
        model, x, y = experiment.build(options)
        nn.functional.mse_loss(model(x), y).backward()
        d = gradients.scenario_run(options).diagnosis
        for n, p in model.named_parameters():
            expected = 0.0 if p.grad is None else float(p.grad.double().norm())
            assert d.parameters[n].norm == pytest.approx(expected, rel=1e-6), (name, n)


def test_broken_graphs_name_the_operation_that_cut_the_path(runs):
    assert dict(runs["detached"].diagnosis.cuts) == {"detach": 1}
    assert dict(runs["argmax"].diagnosis.cuts) == {"argmax": 1}
    assert "`detach` ×1" in runs["detached"].diagnosis.finding("broken_graph").observation


def test_unused_and_broken_are_told_apart_by_whether_the_forward_read_the_parameter(runs):
    unused = runs["unused"].diagnosis.parameters["skip.weight"]
    broken = runs["detached"].diagnosis.parameters["branch.weight"]
    assert (unused.status, unused.read_in_forward) == ("none", False)
    assert (broken.status, broken.read_in_forward) == ("none", True)


def test_frozen_parameters_are_reported_as_frozen_not_broken(runs):
    d = runs["frozen"].diagnosis
    assert not d.parameters["encoder.weight"].requires_grad and d.parameters["encoder.weight"].read_in_forward
    assert d.finding("frozen").parameters == ("encoder.weight", "encoder.bias")


def test_in_place_scenario_carries_pytorchs_own_error_text(runs):
    d = runs["inplace"].diagnosis
    model, x, y = experiment.build(GradientsOptions.for_scenario("inplace"))
    with pytest.raises(RuntimeError) as raised:
        nn.functional.mse_loss(model(x), y).backward()
    assert INPLACE_TEXT in d.backward_error and INPLACE_TEXT in str(raised.value)
    assert d.backward_error == str(raised.value).strip()
    assert d.finding("backward_error").observation == f"backward raised: {d.backward_error}"
    assert "SigmoidBackward" in d.backward_error or "output 0 of Sigmoid" in d.backward_error


def test_dead_relu_scenario_counts_every_unit_dead_over_the_batch(runs):
    dead = runs["dead_relu"].diagnosis.dead_units
    assert [(u.where, u.dead, u.units, u.samples) for u in dead] == [("1", 16, 16, 32), ("3", 16, 16, 32)]


def test_vanishing_and_exploding_scenarios_state_the_numbers_they_compared(runs):
    vanishing = runs["vanishing"].diagnosis
    first, last = vanishing.layers[0], vanishing.layers[-1]
    assert first.depth_norm / last.depth_norm < gradients.your_model.VANISHING_RATIO
    assert f"{first.depth_norm:.1e}" in vanishing.finding("vanishing").observation
    exploding = runs["exploding"].diagnosis
    assert max(layer.grad_norm for layer in exploding.layers) > gradients.your_model.EXPLODING_NORM


def test_forgetting_zero_grad_grows_the_gradient_batch_by_batch(runs):
    acc = runs["no_zero_grad"].accumulation
    k = GradientsOptions.for_scenario("no_zero_grad").k
    assert acc.k == k and acc.growth[0] == 1.0
    assert all(b > a for a, b in zip(acc.accumulated_norms, acc.accumulated_norms[1:], strict=False))
    assert 0.8 * k < acc.growth[-1] <= k  # batches from one source point in nearly the same direction
    assert acc.accumulated_norms[-1] <= sum(acc.batch_norms) * (1 + 1e-9)  # triangle inequality


def test_without_zero_grad_the_same_batch_k_times_gives_exactly_k_times_the_gradient():
    model, x, y = experiment.build(GradientsOptions.for_scenario("no_zero_grad"))
    k = 7
    for _ in range(k):
        nn.functional.mse_loss(model(x), y).backward()
    accumulated = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    for n, p in model.named_parameters():
        assert torch.allclose(accumulated[n], k * p.grad, rtol=1e-5, atol=1e-7)


def test_the_graph_marks_parameters_without_a_gradient(runs):
    assert ".grad is None" in runs["detached"].graph_source and "branch.weight" in runs["detached"].graph_source
    assert "frozen: requires_grad=False" in runs["frozen"].graph_source
    assert ".grad == 0" in runs["dead_relu"].graph_source
    assert ".grad is None" not in runs["healthy"].graph_source
    assert runs["inplace"].graph_source  # drawn although backward fails
    again = gradients.scenario_run(GradientsOptions.for_scenario("detached"))
    assert again.graph_source == runs["detached"].graph_source  # stable ids: a shared link redraws the same graph


def test_scale_sweep_keeps_none_at_every_scale_and_moves_finite_norms():
    detached = gradients.scale_sweep(GradientsOptions.for_scenario("detached"))
    assert all(set(p.none) == {"branch.weight", "branch.bias"} for p in detached.points)
    vanishing = gradients.scale_sweep(GradientsOptions.for_scenario("vanishing"))
    firsts = [p.layer_norms[0] for p in vanishing.points]
    assert [p.init_scale for p in vanishing.points] == [0.25, 0.5, 1.0]
    assert firsts[0] < firsts[1] < firsts[2] and firsts[2] / firsts[0] > 100


# --- Clipping -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exploding_study():
    return gradients.clipping_study(GradientsOptions.for_scenario("exploding", max_norm=0.5))


def test_clipping_scales_the_total_to_max_norm_and_leaves_the_imbalance(exploding_study):
    study = exploding_study.clipping
    assert study.clipped and study.total_before > 1e3
    assert study.total_after == pytest.approx(0.5, rel=1e-4)
    assert study.imbalance_after == pytest.approx(study.imbalance_before, rel=1e-6)
    for before, after in zip(study.layer_before, study.layer_after, strict=True):
        assert after / before == pytest.approx(study.total_after / study.total_before, rel=1e-5)


def test_clipped_training_stays_finite_where_plain_training_diverges(exploding_study):
    training = exploding_study.training
    assert training.options == GradientsOptions.for_scenario("exploding", max_norm=0.5)
    from_another_scenario = gradients.clipped_training(GradientsOptions.for_scenario("healthy", max_norm=0.5))
    assert from_another_scenario == training  # every scenario trains the same exploding case
    assert len(training.losses_clipped) == training.steps == clipping.TRAINING_STEPS
    assert training.diverged_at == len(training.losses_plain) - 1  # the plain run stops where it diverged
    assert all(math.isfinite(v) for v in training.losses_clipped)
    assert training.losses_clipped[-1] < training.losses_clipped[0]


def test_a_norm_below_max_norm_is_left_alone_and_a_failed_backward_has_nothing_to_clip():
    vanishing = gradients.clip_once(GradientsOptions.for_scenario("vanishing", max_norm=100.0))
    assert not vanishing.clipped and vanishing.layer_after == vanishing.layer_before
    inplace = gradients.clip_once(GradientsOptions.for_scenario("inplace"))
    assert inplace.total_before is None and INPLACE_TEXT in inplace.note


# --- diagnose on models of many shapes --------------------------------------------------------


class DictOutput(nn.Module):
    """BatchNorm, in-place ReLU, dropout, a buffer that changes in forward, and a dict output."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.ReLU(inplace=True), nn.Dropout(0.2))
        self.head = nn.Linear(12, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        features = self.body(x)
        return {"logits": self.head(features), "features": features}


class TupleInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(3, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x, z):
        return self.head(torch.tanh(self.a(x) + self.b(z)))


def _ce(output, target):
    return nn.functional.cross_entropy(output["logits"], target)


def _lstm_loss(output, target):
    sequence, _ = output
    return nn.functional.mse_loss(sequence[:, -1], target)


def _he_relu_stack(depth, width):
    """A deep ReLU MLP with He initialisation (the scale ReLU needs) and zero biases."""
    layers = [m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())] + [nn.Linear(width, 1)]
    for layer in layers[::2]:
        nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
        nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


def _healthy_cases():
    torch.manual_seed(0)
    conv = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(8 * 6 * 6, 4)
    )
    return {
        "mlp-tanh": (
            nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1)),
            torch.randn(16, 5),
            torch.randn(16, 1),
            nn.functional.mse_loss,
        ),
        "mlp-relu-deep": (
            _he_relu_stack(depth=5, width=32),
            torch.randn(32, 32),
            torch.randn(32, 1),
            nn.functional.mse_loss,
        ),
        "dict-output-bn-dropout": (DictOutput(), torch.randn(16, 6), torch.randint(0, 3, (16,)), _ce),
        "conv-bn-inplace": (conv, torch.randn(4, 3, 6, 6), torch.randint(0, 4, (4,)), nn.functional.cross_entropy),
        "lstm-tuple-output": (nn.LSTM(4, 6, batch_first=True), torch.randn(5, 7, 4), torch.randn(5, 6), _lstm_loss),
        "tuple-inputs": (
            TupleInputs(),
            (torch.randn(8, 4), torch.randn(8, 3)),
            torch.randn(8, 1),
            nn.functional.mse_loss,
        ),
        "batch-of-one": (
            nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2)),
            torch.randn(1, 5),
            torch.tensor([1]),
            nn.functional.cross_entropy,
        ),
        "embedding-no-targets": (nn.Embedding(10, 4), torch.tensor([1, 2, 3]), None, lambda out: out.pow(2).mean()),
    }


HEALTHY = _healthy_cases()


@pytest.mark.parametrize("name", HEALTHY)
def test_diagnose_stays_quiet_on_healthy_models(name):
    model, inputs, targets, loss_fn = HEALTHY[name]
    d = gradients.diagnose(model, inputs, targets, loss_fn)
    assert d.findings == () and d.verdict == "healthy", [f.observation for f in d.findings]
    assert set(d.parameters) == {n for n, _ in model.named_parameters()}
    assert all(p.status == "finite" for p in d.parameters.values())
    assert {n for layer in d.layers for n in layer.parameters} == set(d.parameters)


def test_layers_come_in_forward_order_not_registration_order():
    class Backwards(nn.Module):
        def __init__(self):
            super().__init__()
            self.last = nn.Linear(8, 1)
            self.first = nn.Linear(4, 8)

        def forward(self, x):
            return self.last(torch.tanh(self.first(x)))

    d = gradients.diagnose(Backwards(), torch.randn(6, 4), torch.randn(6, 1), nn.functional.mse_loss)
    assert [layer.name for layer in d.layers] == ["first", "last"]
    first = d.layers[0]
    assert first.ratio == pytest.approx(first.grad_norm / first.weight_norm)


def _stack(depth, activation, scale):
    torch.manual_seed(depth)
    layers = []
    for i in range(depth):
        linear = nn.Linear(16, 16 if i < depth - 1 else 1)
        with torch.no_grad():
            linear.weight.mul_(scale)
        layers += [linear, activation()] if i < depth - 1 else [linear]
    return nn.Sequential(*layers)


@pytest.mark.parametrize("depth", [10, 14])
def test_diagnose_flags_a_deep_sigmoid_stack_as_vanishing(depth):
    model = _stack(depth, nn.Sigmoid, 1.0)  # PyTorch's default init
    d = gradients.diagnose(model, torch.randn(32, 16), torch.randn(32, 1), nn.functional.mse_loss)
    assert d.kinds == ("vanishing",)
    finding = d.finding("vanishing")
    assert "0.weight" in finding.parameters and f"{d.layers[0].depth_norm:.1e}" in finding.observation


@pytest.mark.parametrize("depth", [6, 10])
def test_diagnose_flags_a_deep_large_init_stack_as_exploding(depth):
    model = _stack(depth, nn.ReLU, 6.0)
    d = gradients.diagnose(model, torch.randn(32, 16), torch.randn(32, 1), nn.functional.mse_loss)
    assert "exploding" in d.kinds
    assert f"above {gradients.your_model.EXPLODING_NORM:.0e}" in d.finding("exploding").observation


def test_diagnose_flags_nonfinite_gradients():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    with torch.no_grad():
        model[0].weight[0, 0] = float("inf")  # the output, the loss and the gradients overflow
    d = gradients.diagnose(model, torch.randn(5, 3), torch.randn(5, 1), nn.functional.mse_loss)
    assert "nonfinite" in d.kinds
    assert any(p.status == "nonfinite" for p in d.parameters.values())


def test_no_grad_region_and_integer_cast_are_named_as_cuts():
    class Casts(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(4, 1)
            self.scale = nn.Linear(4, 4)
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            with torch.no_grad():
                scaled = self.scale(x)
            bucket = (self.gate(x) > 0).long()  # an integer cast of a comparison
            return self.head(x + scaled) * bucket

    d = gradients.diagnose(Casts(), torch.randn(16, 4), torch.randn(16, 1), nn.functional.mse_loss)
    assert d.finding("broken_graph").parameters == ("gate.weight", "gate.bias", "scale.weight", "scale.bias")
    cuts = dict(d.cuts)
    assert "linear under no_grad" in cuts and "gt" in cuts


def _snapshot(model, inputs):
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": {n: (p.grad, None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "versions": {n: p._version for n, p in model.named_parameters()},
        "training": [m.training for m in model.modules()],
        "hooks": [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in model.modules()],
        "inputs": [t.clone() for t in (inputs if isinstance(inputs, tuple) else (inputs,))],
        "rng": torch.get_rng_state(),
    }


CALLER_CASES = ["dict-output-bn-dropout", "conv-bn-inplace", "lstm-tuple-output", "tuple-inputs", "batch-of-one"]


@pytest.mark.parametrize("name", CALLER_CASES)
def test_diagnose_leaves_the_callers_model_grads_buffers_inputs_and_rng_exactly_as_they_were(name):
    model, inputs, targets, loss_fn = copy.deepcopy(HEALTHY[name])
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable[0].grad = torch.full_like(trainable[0], 0.5)  # a gradient the caller already had
    before = _snapshot(model, inputs)
    gradients.diagnose(model, inputs, targets, loss_fn)
    after = _snapshot(model, inputs)
    assert before["state"].keys() == after["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(value, after["state"][key]), key  # bit for bit, buffers included
    for n, (obj, value) in before["grads"].items():
        now = dict(model.named_parameters())[n].grad
        assert now is obj and (value is None or torch.equal(now, value)), n
    for key in ("requires_grad", "versions", "training", "hooks"):
        assert before[key] == after[key], key
    assert all(torch.equal(a, b) for a, b in zip(before["inputs"], after["inputs"], strict=True))
    assert torch.equal(before["rng"], after["rng"])


def test_diagnose_works_under_the_callers_no_grad_and_on_an_input_that_requires_grad():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(8, 3, requires_grad=True)
    with torch.no_grad():
        d = gradients.diagnose(model, x, torch.randn(8, 1), nn.functional.mse_loss)
    assert d.verdict == "healthy" and x.grad is None


def test_dropout_masks_follow_the_seed():
    model = nn.Sequential(nn.Linear(4, 32), nn.Dropout(0.5), nn.Linear(32, 1))
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    runs = [
        gradients.diagnose(model, x, y, nn.functional.mse_loss, seed=s).parameters["0.weight"].norm for s in (1, 1, 2)
    ]
    assert runs[0] == runs[1] != runs[2]


@pytest.mark.parametrize(
    ("model", "inputs", "targets", "loss_fn", "message"),
    [
        pytest.param(
            nn.Linear(3, 2),
            torch.randn(4, 3),
            torch.randn(4, 2),
            lambda o, t: (o - t) ** 2,
            "scalar",
            id="non-scalar-loss",
        ),
        pytest.param(
            nn.Linear(3, 2),
            torch.randn(4, 5),
            torch.randn(4, 2),
            nn.functional.mse_loss,
            r"forward failed on model\(x\) with x of shape \(4, 5\)",
            id="input-shape-mismatch",
        ),
        pytest.param(
            nn.Linear(3, 2),
            torch.randn(4, 3),
            torch.randn(4, 7),
            lambda o, t: (o @ t).sum(),
            r"loss_fn\(output, target\) failed",
            id="target-shape-mismatch",
        ),
        pytest.param(
            nn.Linear(3, 2), torch.randn(4, 3), None, lambda o: "loss", "returned str", id="loss-not-a-tensor"
        ),
        pytest.param(
            nn.Linear(3, 2), torch.randn(4, 3), None, lambda o: o.argmax(), "floating-point", id="integer-loss"
        ),
        pytest.param(
            nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)),
            torch.randn(1, 3),
            None,
            lambda o: o.sum(),
            "more than 1 value per channel",
            id="batchnorm-batch-of-one",
        ),
        pytest.param(lambda x: x, torch.randn(4, 3), None, lambda o: o.sum(), "nn.Module", id="not-a-module"),
    ],
)
def test_bad_input_gives_a_plain_value_error(model, inputs, targets, loss_fn, message):
    with pytest.raises(ValueError, match=message):
        gradients.diagnose(model, inputs, targets, loss_fn)


def test_a_loss_with_no_graph_is_a_backward_error_finding_not_an_exception():
    model = nn.Linear(3, 2)
    d = gradients.diagnose(model, torch.randn(4, 3), None, lambda out: out.argmax().float())
    assert d.kinds[0] == "backward_error"
    assert "does not require grad" in d.backward_error


def test_a_fully_frozen_model_is_a_plain_value_error():
    model = nn.Linear(3, 1).requires_grad_(False)
    with pytest.raises(ValueError, match="No parameter of the model requires grad"):
        gradients.diagnose(model, torch.randn(4, 3), torch.randn(4, 1), nn.functional.mse_loss)


# --- Options, results, figures, lesson ------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"depth": 1},
        {"depth": 13},
        {"init_scale": 0.0},
        {"learning_rate": 2.0},
        {"k": 0},
        {"max_norm": 1e3},
        {"activation": "gelu"},
        {"scenario": "nope"},
        {"seed": -1},
        {"depth": True},
    ],
)
def test_options_out_of_bounds_raise(change):
    with pytest.raises(ValueError):
        GradientsOptions(**change)


def test_for_scenario_applies_the_scenarios_defaults_and_model_options_drops_unused_knobs():
    options = GradientsOptions.for_scenario("vanishing", seed=3)
    assert (options.activation, options.depth, options.seed) == ("sigmoid", 8, 3)
    detached = GradientsOptions.for_scenario("detached", depth=9, learning_rate=0.5, k=3, init_scale=2.0)
    assert experiment.model_options(detached) == GradientsOptions(scenario="detached", init_scale=2.0)
    assert hash(options) == hash(dataclasses.replace(options))
    assert experiment.training_options(detached).scenario == "exploding"


def test_results_pickle_and_report_progress_in_order():
    seen = []
    options = GradientsOptions.for_scenario("no_zero_grad", k=3)
    results = [
        gradients.scenario_run(options, lambda done, total: seen.append((done, total))),
        gradients.scale_sweep(options, lambda done, total: seen.append((done, total))),
        gradients.clipped_training(options, lambda done, total: seen.append((done, total))),
    ]
    assert pickle.loads(pickle.dumps(results))[0].diagnosis == results[0].diagnosis
    assert all(done <= total for done, total in seen) and len(seen) > clipping.TRAINING_STEPS
    first_run = seen[: 2 + options.k]
    assert first_run == [(done, 2 + options.k) for done in range(1, 3 + options.k)]  # one total, done only grows


def test_a_report_that_raises_stops_the_run():
    class Stop(Exception):
        pass

    def report(done, total):
        if done >= 3:
            raise Stop

    with pytest.raises(Stop):
        gradients.clipped_training(GradientsOptions.for_scenario("exploding"), report)


def test_figures_and_lesson_draw_for_every_scenario(runs, exploding_study):
    for name, run in runs.items():
        study = exploding_study if name == "exploding" else None
        figure = figures.layer_norms_figure(run.diagnosis)
        assert figure.layout.yaxis.type == "log"
        assert len(figure.layout.title.text) <= 45
        assert len(figures.status_table(run.diagnosis)) == len(run.diagnosis.parameters)
        clipping, training = (study.clipping, study.training) if study else (None, None)
        lines = lesson.explain(run, clipping=clipping, training=training)
        assert lines and all(isinstance(line, str) and line for line in lines)
        card = gradients_card.answer_card(run)
        assert all(card.parts().values()) and card.question
        if study is not None:
            assert figures.training_figure(study.training).layout.yaxis.type == "log"
            assert figures.clipping_figure(study.clipping).data
    accumulation = figures.accumulation_figure(runs["no_zero_grad"].accumulation)
    assert len(accumulation.data[0].y) == runs["no_zero_grad"].accumulation.k


@pytest.mark.parametrize(
    ("clipped", "at_top"), [([10.0 / 2**i for i in range(12)], False), ([0.01 * 2**i for i in range(12)], True)]
)
def test_the_stop_label_sits_where_the_curves_leave_room(exploding_study, clipped, at_top):
    """Falling losses fill the top beside an early stop (the label crossed the curve there), rising ones the bottom."""
    training = dataclasses.replace(
        exploding_study.training, steps=12, losses_plain=(clipped[0], math.inf), losses_clipped=tuple(clipped)
    )
    figure = figures.training_figure(training)
    (label,) = figure.layout.annotations
    assert label.text.startswith("inf at step 1") and (label.y == 1) == at_top
    plain, clipped = figure.data  # the one step both runs lost the same: the plain run's marker rings the other
    assert list(plain.marker.size) == [18, 7] and list(clipped.marker.size) == [7] * 12


def test_reads_through_views_and_data_count_and_shape_only_uses_do_not():
    class Views(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))
            self.shadow = nn.Parameter(torch.randn(4, 4))
            self.shape_only = nn.Parameter(torch.randn(4))
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            mask = torch.zeros_like(self.shape_only) + x.shape[1] * 0  # only the shape of shape_only is used
            return self.head(x @ self.w.T + x @ self.shadow.data[:, :4] + mask)

    d = gradients.diagnose(Views(), torch.randn(8, 4), torch.randn(8, 1), nn.functional.mse_loss)
    assert d.parameters["w"].status == "finite"
    assert d.finding("broken_graph").parameters == ("shadow",) and dict(d.cuts) == {"data": 1}
    assert d.finding("unused").parameters == ("shape_only",)


def test_parameters_that_are_views_of_one_buffer_are_told_apart_by_their_bytes():
    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            flat = torch.randn(20)
            self.a = nn.Parameter(flat[:12].view(3, 4))
            self.b = nn.Parameter(flat[12:16])
            self.c = nn.Parameter(flat[16:])

        def forward(self, x):
            return (x @ self.a.T).sum(1, keepdim=True) + self.c.detach().sum()

    model = Flat()
    assert model.a.untyped_storage().data_ptr() == model.c.untyped_storage().data_ptr()
    d = gradients.diagnose(model, torch.randn(5, 4), torch.randn(5, 1), nn.functional.mse_loss)
    assert d.finding("unused").parameters == ("b",)
    assert d.finding("broken_graph").parameters == ("c",)
