"""Memory of one real training step, by category; fake-tensor estimates; retention."""

import copy
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


def test_forward_grows_live_memory_by_the_activations_and_the_loss():
    model, x = mlp(batch=256)
    result = memory.measure(model, x, optimizer="sgd")
    timeline = dict(result.first_step.timeline)
    assert timeline["start"] == result.parameters + result.batch
    assert timeline["after forward"] - timeline["start"] == result.activations + 4  # the scalar loss


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
    for step in (result.first_step, result.steady_step):
        assert sum(step.at_peak.values()) == step.peak
        assert max(step.phase_peaks.values()) == step.peak == step.phase_peaks[step.peak_phase]


def test_the_peak_breakdown_names_the_optimizer_steps_temporaries_apart():
    result = memory.measure(*mlp(width=256), optimizer="adam")
    step = result.first_step
    assert step.peak_phase == "optimizer step"
    assert step.at_peak["optimizer state"] == result.optimizer_state
    assert step.at_peak["optimizer step temporaries"] > 0


def test_step_two_starts_with_the_optimizer_state_alive():
    result = memory.measure(*mlp(), optimizer="adam")
    first_start, steady_start = result.first_step.timeline[0][1], result.steady_step.timeline[0][1]
    assert steady_start - first_start == result.optimizer_state
    assert result.steady_step.at_peak.get("optimizer state") == result.optimizer_state


def test_bf16_weight_copies_are_counted_apart_from_the_activations():
    small = memory.measure(*mlp(batch=16), optimizer="sgd", precision="bf16")
    large = memory.measure(*mlp(batch=64), optimizer="sgd", precision="bf16")
    assert large.activations == 4 * small.activations
    assert small.weight_copies == large.weight_copies > 0


def test_activations_leave_out_the_input_parameters_and_buffers():
    model, x = mlp(batch=16, width=64, depth=2)
    found = {}
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), x]}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in skip:
            found[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).float().pow(2).mean()
    assert memory.measure(model, x, optimizer="sgd").activations == sum(found.values())


def test_micro_batches_keep_the_gradients_alive_between_passes():
    result = memory.measure(*mlp(), optimizer="sgd", micro_batches=2)
    timeline = dict(result.first_step.timeline)
    assert timeline["after backward 1"] - timeline["start"] == result.gradients
    assert "after forward 2" in timeline and result.micro_batches == 2


def test_estimate_saved_counts_what_measure_counts():
    for precision in ("fp32", "bf16"):
        measured = memory.measure(*mlp(), precision=precision)
        assert memory.estimate_saved(lambda: mlp(), precision=precision) == (
            measured.activations,
            measured.weight_copies,
        )


def test_fake_tensor_estimate_matches_the_real_measurement():
    real = memory.measure(*mlp(batch=128), optimizer="adam")
    fake = memory.estimate(lambda: mlp(batch=128), optimizer="adam")
    assert fake.estimated and not real.estimated
    for category in memory.CATEGORIES:
        assert getattr(fake, category) == getattr(real, category), category
    assert (fake.first_step.peak, fake.peak) == (real.first_step.peak, real.peak)


@pytest.mark.parametrize("preset", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_closed_forms_predict_the_measured_activations(preset, precision, checkpointing):
    options = MemoryOptions(
        preset=preset, width=32, depth=2, seq_len=16, heads=4, precision=precision, checkpointing=checkpointing
    )
    result = memory_lab.measure_point(options, 8)
    assert result.predicted["weight_copies"] == result.weight_copies
    if preset != "transformer" or checkpointing:  # the transformer's is the published formula: a reference
        assert result.predicted["activations"] == result.activations


def test_sizes_that_do_not_fit_are_estimated_never_allocated():
    options = MemoryOptions(preset="mlp", width=4096, depth=8, batch_size=65536)
    big = memory_lab.point(options, 65536)
    assert not big.measured and big.result.estimated and big.result.peak > memory_lab.MEASURE_LIMIT_BYTES
    small = memory_lab.point(dataclasses.replace(options, width=64, depth=2, batch_size=8), 8)
    assert small.measured and not small.result.estimated


def transformer(**options) -> MemoryOptions:
    return MemoryOptions(**{"preset": "transformer", "depth": 1, **options})


CEILING_ZOO = [  # each preset, precision, optimizer and checkpointing; the closed forms' worst cases found
    MemoryOptions(),
    MemoryOptions(preset="mlp", width=16, depth=1, batch_size=1, optimizer="sgd"),
    MemoryOptions(preset="mlp", width=2048, depth=2, batch_size=2, precision="bf16", accumulation=2),
    MemoryOptions(preset="mlp", width=256, depth=12, batch_size=4096, precision="fp16", checkpointing=True),
    MemoryOptions(preset="cnn", width=16, depth=3, batch_size=64, optimizer="sgd_momentum"),
    MemoryOptions(preset="cnn", width=64, depth=2, batch_size=32, precision="fp16", checkpointing=True),
    transformer(width=16, seq_len=64, heads=16, batch_size=32, precision="fp16", checkpointing=True, accumulation=2),
    transformer(width=128, depth=2, seq_len=512, heads=32, batch_size=8, precision="bf16", accumulation=16),
    transformer(width=16, depth=2, seq_len=128, heads=4, batch_size=32, precision="fp16"),
    transformer(
        width=16, seq_len=128, heads=8, batch_size=256, optimizer="adamw", precision="bf16", checkpointing=True
    ),
    transformer(width=16, seq_len=512, heads=1, batch_size=32, optimizer="sgd_momentum", precision="fp16"),
    transformer(  # the closest found: 0.77 of its ceiling
        width=96,
        seq_len=1024,
        heads=16,
        batch_size=128,
        optimizer="adamw",
        precision="bf16",
        checkpointing=True,
        accumulation=16,
    ),
]


@pytest.mark.parametrize("options", CEILING_ZOO, ids=lambda o: f"{o.preset}-{o.precision}-{o.checkpointing}")
def test_the_ceiling_lies_above_the_fake_tensor_peak(options):
    batch = options.batch_size
    assert memory_lab.estimate_point(options, batch).peak <= memory_lab.ceiling(options, batch)


def test_what_the_ceiling_says_fits_is_measured_without_the_fake_tensor_estimate(monkeypatch):
    """The estimate costs three times the default step itself; only what the ceiling cannot clear pays for it."""
    asked = []
    real = memory_lab.estimate_point

    def counted(options, batch):
        asked.append(batch)
        return real(options, batch)

    monkeypatch.setattr(memory_lab, "estimate_point", counted)
    options = MemoryOptions(width=528)
    assert memory_lab.point(options, 64).measured and asked == []
    assert not memory_lab.point(MemoryOptions(width=4096, depth=8, batch_size=65536), 65536).measured
    assert asked == [65536, 65536]  # the guard, then the estimate shown in its place


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
    fixed, training_bug, evaluation_item, evaluation_bug = curves.values()
    assert fixed[-1] == fixed[0]
    assert evaluation_item[-1] == evaluation_item[0]  # no no_grad, yet a float keeps no graph
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


# --- The notebook API on a family of models ---------------------------------------------------


class Branches(nn.Module):
    """A custom module with dropout, BatchNorm, a registered buffer and several outputs."""

    def __init__(self, output: str = "tensor"):
        super().__init__()
        self.output = output
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5))
        self.heads = nn.ModuleList([nn.Linear(16, 2), nn.Linear(16, 3)])
        self.register_buffer("scale", torch.ones(16))

    def forward(self, x, mask=None):
        hidden = self.encoder(x) * self.scale
        if mask is not None:
            hidden = hidden * mask
        first, second = (head(hidden) for head in self.heads)
        if self.output == "tuple":
            return first, (second, torch.argmax(second, dim=1))
        if self.output == "dict":
            return {"first": first, "second": second}
        return torch.cat([first, second], dim=1)


def frozen_first_layer():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    model[0].requires_grad_(False)
    return model, torch.randn(4, 8)


FAMILY = {
    "sequential": lambda: (nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1)), torch.randn(4, 8)),
    "dropout-batchnorm-buffer": lambda: (Branches(), torch.randn(4, 8)),
    "tuple-output": lambda: (Branches("tuple"), torch.randn(4, 8)),
    "dict-output": lambda: (Branches("dict"), torch.randn(4, 8)),
    "dict-input": lambda: (Branches(), {"x": torch.randn(4, 8), "mask": torch.ones(4, 16)}),
    "frozen-layer": frozen_first_layer,
    # In-place ops PyTorch accepts. The other order (ReLU then in-place Dropout) changes ReLU's saved output,
    # and backward refuses it: see test_measure_raises_pytorchs_error_for_a_saved_tensor_changed_in_place.
    "in-place": lambda: (
        nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5, inplace=True), nn.ReLU(inplace=True), nn.Linear(16, 1)),
        torch.randn(4, 8),
    ),
    "input-edited-in-place": lambda: (nn.Sequential(nn.ReLU(inplace=True), nn.Linear(8, 1)), torch.randn(4, 8)),
    "input-requires-grad": lambda: (nn.Linear(8, 1), torch.randn(4, 8, requires_grad=True)),
    "batchnorm2d-batch-of-one": lambda: (
        nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 6 * 6, 1)),
        torch.randn(1, 3, 8, 8),
    ),
    "existing-gradients-eval-mode": lambda: _with_gradients_in_eval(),
}


def test_measure_raises_pytorchs_error_for_a_saved_tensor_changed_in_place():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Dropout(0.5, inplace=True), nn.Linear(16, 1))
    x = torch.randn(4, 8)
    with pytest.raises(RuntimeError) as plain:
        torch.manual_seed(0)
        copy.deepcopy(model)(x).pow(2).mean().backward()
    before = snapshot(model, x)
    with pytest.raises(ValueError, match="the model's backward failed") as lab:
        memory.measure(model, x)
    assert str(plain.value).split(",")[0] in str(lab.value)  # PyTorch's own words
    same(before, snapshot(model, x))


def _with_gradients_in_eval():
    model, x = FAMILY["dropout-batchnorm-buffer"]()
    model(x).sum().backward()
    return model.eval(), x


def snapshot(model, example_input):
    tensors = example_input.values() if isinstance(example_input, dict) else [example_input]
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "training": [m.training for m in model.modules()],
        "input": [(t.clone(), t.grad, t.requires_grad) for t in tensors],
        "rng": torch.get_rng_state(),
    }


def same(before, after):
    assert before["state"].keys() == after["state"].keys()
    assert all(torch.equal(before["state"][k], after["state"][k]) for k in before["state"])
    for name, grad in before["grads"].items():
        assert (grad is None and after["grads"][name] is None) or torch.equal(grad, after["grads"][name]), name
    assert before["requires_grad"] == after["requires_grad"] and before["training"] == after["training"]
    for (value, grad, requires), (value_after, grad_after, requires_after) in zip(
        before["input"], after["input"], strict=True
    ):
        assert torch.equal(value, value_after) and grad is None and grad_after is None and requires == requires_after
    assert torch.equal(before["rng"], after["rng"])


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("name", FAMILY)
def test_measure_works_on_a_copy_and_leaves_the_callers_objects_alone(name, optimizer):
    torch.manual_seed(0)
    model, example = FAMILY[name]()
    before = snapshot(model, example)
    result = memory.measure(model, example, optimizer=optimizer)
    same(before, snapshot(model, example))
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    assert result.parameters == sum(p.numel() * p.element_size() for p in model.parameters())
    assert result.gradients == trainable == result.predicted["gradients"]
    assert result.optimizer_state == result.predicted["optimizer_state"]
    assert result.peak >= result.parameters + result.gradients and result.steady_step.peak >= result.first_step.peak


@pytest.mark.parametrize("name", ["sequential", "tuple-output", "dict-output", "frozen-layer", "in-place"])
def test_estimate_agrees_with_measure_across_the_family(name):
    torch.manual_seed(0)
    real = memory.measure(*FAMILY[name](), optimizer="adam")
    fake = memory.estimate(FAMILY[name], optimizer="adam")
    assert (fake.activations, fake.gradients, fake.optimizer_state) == (
        real.activations,
        real.gradients,
        real.optimizer_state,
    )


def test_frozen_parameters_get_no_gradient_and_no_state():
    model, x = frozen_first_layer()
    result = memory.measure(model, x, optimizer="adam")
    trainable = 4 * (16 + 1)
    assert result.gradients == trainable and result.optimizer_state == 2 * trainable + 4 * 2


def test_a_loss_function_reduces_any_output():
    model, x = FAMILY["dict-output"]()
    result = memory.measure(model, x, loss_fn=lambda out: out["second"].logsumexp(dim=1).mean())
    assert result.gradients > 0


def test_batchnorm_on_a_batch_of_one_reports_pytorchs_error():
    model = nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        memory.measure(model, torch.randn(1, 8))


@pytest.mark.parametrize(
    ("model", "example", "kwargs", "message"),
    [
        ("not a model", torch.randn(2, 8), {}, "nn.Module"),
        (nn.Linear(8, 1), "not a tensor", {}, "example_input"),
        (nn.Linear(8, 1).requires_grad_(False), torch.randn(2, 8), {}, "no trainable parameter"),
        (nn.Linear(8, 1), torch.randn(2, 8), {"micro_batches": 0}, "micro_batches"),
        (
            nn.Linear(8, 1),
            torch.randn(2, 8),
            {"loss_fn": lambda out: out},
            r"loss_fn\(output\) must return a scalar tensor",
        ),
        (nn.Linear(8, 1), torch.randn(2, 9), {}, "forward failed"),
        (nn.Linear(8, 1), {"x": torch.randn(2, 8)}, {"checkpointing": True}, "nn.Sequential"),
    ],
)
def test_bad_input_gets_a_clear_value_error(model, example, kwargs, message):
    with pytest.raises(ValueError, match=message):
        memory.measure(model, example, **kwargs)


def test_an_output_with_nothing_to_train_asks_for_a_loss_function():
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(8, 2)

        def forward(self, x):
            return self.layer(x).argmax(dim=1)

    with pytest.raises(ValueError, match="loss_fn"):
        memory.measure(Detached(), torch.randn(2, 8))
