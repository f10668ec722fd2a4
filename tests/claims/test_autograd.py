"""Every sentence the Autograd lab shows, checked by torch code written here, not by the lab's helpers.

The presets are rebuilt by hand: the same modules created in the same order under the same
seed draw the same weights, so these checks see the very tensors the lab measured.
"""

import copy
import re

import pytest
import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode

from explorers import autograd
from explorers.autograd import card, figures, lesson
from explorers.autograd.lesson import STATEMENTS
from tests.claims.falsify import falsifies
from tests.zoo import ZOO, call, float_tensors


def hand_built_mlp(seed: int, depth: int = 2, width: int = 4, batch: int = 1):
    """The "mlp" preset (tanh), built without the lab's code: Linear layers, then x, then target."""
    torch.manual_seed(seed)
    layers = {f"block{i}.fc": nn.Linear(3 if i == 1 else width, width) for i in range(1, depth + 1)}
    layers["head"] = nn.Linear(width, 1)
    x, target = torch.randn(batch, 3), torch.randn(batch, 1)

    def loss():
        h = x
        for name, layer in layers.items():
            h = layer(h) if name == "head" else torch.tanh(layer(h))
        return nn.functional.mse_loss(h, target)

    params = {f"{name}.{kind}": getattr(layer, kind) for name, layer in layers.items() for kind in ("weight", "bias")}
    return params, x, target, loss


def sentence(run, pattern):
    lines = [line for line in lesson.explain(run) if re.search(pattern, line)]
    assert len(lines) == 1, f"expected one sentence matching {pattern!r}, got {lines}"
    return lines[0]


def test_accumulation_names_the_largest_ratio_and_its_value():
    seed = 1
    run = autograd.run(autograd.AutogradOptions(seed=seed), ["forward", "backward", "sgd_step", "forward", "backward"])
    line = sentence(run, "never overwrites")
    name, ratio = re.search(r"`(\S+)\.grad` holds the sum of 2 backward passes.*= \*\*([\d.]+)×\*\*", line).groups()
    assert "added different gradients" in line  # a step between the passes: the ratio is not a count

    params, _, _, loss = hand_built_mlp(seed)
    optimizer = torch.optim.SGD(params.values(), lr=0.1)
    loss().backward()
    optimizer.step()
    first = {n: p.grad.clone() for n, p in params.items()}
    loss().backward()
    ratios = {n: float(p.grad.norm() / (p.grad - first[n]).norm()) for n, p in params.items()}
    assert name == max(ratios, key=ratios.get)
    assert float(ratio) == pytest.approx(ratios[name], abs=5e-4)


def test_retained_passes_double_every_gradient():
    run = autograd.run(autograd.AutogradOptions(seed=3), ["forward", "backward_retain", "backward_retain"])
    line = sentence(run, "never overwrites")
    assert "**2.000×**" in line
    params, _, _, loss = hand_built_mlp(3)
    value = loss()
    value.backward(retain_graph=True)
    once = {n: p.grad.clone() for n, p in params.items()}
    value.backward()
    assert all(torch.allclose(p.grad, 2 * once[n]) for n, p in params.items())


def test_saved_bytes_count_neither_input_nor_target():
    run = autograd.run(autograd.AutogradOptions(seed=0, batch_size=8, width=16), ["forward"])
    held = re.search(r"held \*\*(.+?)\*\*|holds \*\*(.+?)\*\*", sentence(run, r"hold")).group(0)
    params, x, target, loss = hand_built_mlp(0, width=16, batch=8)
    exists_anyway = {t.untyped_storage().data_ptr() for t in [*params.values(), x, target]}
    found = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in exists_anyway:
            found[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss()
    assert run.final.saved_bytes == sum(found.values())
    assert f"{sum(found.values()) / 1024:.1f} KiB" in held


def test_backward_frees_what_the_graph_held():
    run = autograd.run(autograd.AutogradOptions(seed=0), ["forward", "backward", "backward"])
    line = sentence(run, r"Before `backward\(\)`")
    assert "after it, **0 B**" in line
    second = run.final.error
    _, _, _, loss = hand_built_mlp(0)
    value = loss()
    value.backward()
    with pytest.raises(RuntimeError) as raised:
        value.backward()
    assert "second time" in second and "second time" in str(raised.value)


def test_no_grad_forward_has_no_graph():
    run = autograd.run(autograd.AutogradOptions(seed=0), ["forward_no_grad"])
    sentence(run, "grad_fn=None")
    _, _, _, loss = hand_built_mlp(0)
    with torch.no_grad():
        value = loss()
    assert value.grad_fn is None and not value.requires_grad


def test_optimizer_step_bumps_the_named_version_counter():
    run = autograd.run(autograd.AutogradOptions(seed=0), ["forward", "backward", "sgd_step"])
    name, old, new = re.search(r"`(\S+)`'s version counter went from (\d+) to (\d+)", sentence(run, "version")).groups()
    params, _, _, loss = hand_built_mlp(0)
    loss().backward()
    before = params[name]._version
    torch.optim.SGD(params.values(), lr=0.1).step()
    assert (int(old), int(new)) == (before, params[name]._version)


def test_leaves_are_the_parameters_and_not_the_input():
    run = autograd.run(autograd.AutogradOptions(seed=0), ["forward"])
    count = int(re.search(r"the (\d+) \*\*leaves\*\* that require grad", sentence(run, "leaves")).group(1))
    params, x, _, _ = hand_built_mlp(0)
    assert count == len(params)  # x is a leaf too, but it does not require grad here
    assert x.is_leaf and not x.requires_grad


class Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(inplace=True), nn.Dropout(0.3))
        self.frozen = nn.Linear(8, 8).requires_grad_(False)
        self.head = nn.Linear(8, 2)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        h = self.frozen(self.body(x))
        return {"logits": self.head(h), "features": h}


MODELS = {
    "sequential": lambda: nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)),
    "dropout-inplace": lambda: nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5, inplace=True), nn.Linear(8, 2)),
    "custom-dict-output": Custom,
    "tuple-output": lambda: nn.LSTM(4, 2, batch_first=True),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("batch", [1, 5])
def test_your_model_runs_on_copies_and_leaves_the_callers_objects_as_they_were(name, batch):
    torch.manual_seed(0)
    model = MODELS[name]()
    if name == "custom-dict-output" and batch == 1:
        model.eval()  # BatchNorm cannot train on one sample; PyTorch's error would be the right answer
    x = torch.randn(batch, 3, 4) if name == "tuple-output" else torch.randn(batch, 4)
    x.requires_grad_(True)
    target = None
    first = next(p for p in model.parameters() if p.requires_grad)
    first.grad = torch.ones_like(first)  # a gradient the caller already had must survive untouched
    before = copy.deepcopy(model.state_dict()), x.clone()
    grads = {n: (p.grad, None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}
    modes = [m.training for m in model.modules()]

    run = autograd.run(actions=["forward", "backward", "sgd_step"], yours=autograd.YourModel(model, x, target))

    assert all(torch.equal(v, before[0][k]) for k, v in model.state_dict().items())
    for n, p in model.named_parameters():
        same_object, value = grads[n]
        assert p.grad is same_object and (value is None or torch.equal(p.grad, value))
    assert torch.equal(x, before[1]) and x.grad is None
    assert [m.training for m in model.modules()] == modes
    assert run.final.error is None
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert {r.name for r in run.final.tensors if r.role == "parameter" and r.requires_grad} == set(trainable)
    assert run.final.row("x").grad == "values"


# --- Issue 18: every sentence has a witness (settings other than the ones quoted in the findings) ---------------


def test_a_step_on_zero_gradients_is_not_reported_as_updating_the_weights():
    options = autograd.AutogradOptions(seed=7, depth=3, width=5, batch_size=2)
    run = autograd.run(options, ["forward", "backward", "zero_grad_zeros", "sgd_step"])
    line = sentence(run, "version counter")
    params, _, _, loss = hand_built_mlp(7, depth=3, width=5, batch=2)
    optimizer = torch.optim.SGD(params.values(), lr=0.1)
    loss().backward()
    optimizer.zero_grad(set_to_none=False)
    before = {n: (p.detach().clone(), p._version) for n, p in params.items()}
    optimizer.step()
    assert all(torch.equal(p, before[n][0]) for n, p in params.items())  # the same values written back
    assert all(p._version > before[n][1] for n, p in params.items())  # ...in place
    assert "left the values as they were" in line and "changed the values" not in line
    assert run.final.values_changed == ()


def test_a_step_on_real_gradients_counts_the_parameters_whose_values_changed():
    options = autograd.AutogradOptions(seed=11, depth=3, width=5, batch_size=3)
    run = autograd.run(options, ["forward", "backward", "sgd_step"])
    count, total = map(int, re.search(r"changed the values of (\d+) of (\d+)", sentence(run, "version")).groups())
    params, _, _, loss = hand_built_mlp(11, depth=3, width=5, batch=3)
    loss().backward()
    before = {n: p.detach().clone() for n, p in params.items()}
    torch.optim.SGD(params.values(), lr=0.1).step()
    assert (count, total) == (sum(not torch.equal(p, before[n]) for n, p in params.items()), len(params))


def test_a_second_backward_that_ran_is_not_reported_as_failing():
    model, batch = ZOO["add_only"].build(seed=3)
    run = autograd.run(actions=["forward", "backward", "backward"], yours=autograd.YourModel(model, batch))
    value = (model(batch)).sum()  # the lab's loss for a model without a target: its output summed
    value.backward()
    value.backward()  # plain torch: no node saved anything, so a second pass runs
    assert all(s.error is None for s in run.steps)
    assert "fail" not in run.graph_note and "nothing to release" in run.graph_note
    assert sentence(run, "both ran")
    assert not any("failed" in line for line in lesson.explain(run))


def test_a_second_backward_that_failed_says_pytorchs_error_and_the_card_does_not_generalise():
    options = autograd.AutogradOptions(preset="residual", depth=1, width=3, seed=4)
    run = autograd.run(options, ["forward", "backward", "backward"])
    assert "second time" in run.final.error and sentence(run, "second `backward\\(\\)` failed")
    assert f"released the {run.steps[0].saved_count} tensors" in run.graph_note
    recovery = card.answer_card(run, run).recovery
    assert recovery.startswith("If a second backward raises")


def _saved_storages(model, batch, loss_of):
    """Storage key -> (weak reference, bytes) of everything saved for backward, model and batch excluded."""
    in_batch = [t for t in torch.utils._pytree.tree_leaves(batch) if isinstance(t, torch.Tensor)]
    excluded = {t.untyped_storage()._cdata for t in [*model.parameters(), *model.buffers(), *in_batch]}
    found = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage._cdata not in excluded:
            found[storage._cdata] = (StorageWeakRef(storage), storage.nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        value = loss_of()
    return value, found


def test_backward_drops_references_and_memory_stays_while_the_labs_table_holds_it():
    options = autograd.AutogradOptions(seed=5, depth=3, width=6, batch_size=4)
    run = autograd.run(options, ["forward", "backward"])
    line = sentence(run, r"Before `backward\(\)`")
    params, x, target, _ = hand_built_mlp(5, depth=3, width=6, batch=4)
    layers = list(params.values())
    kept = []  # the layer outputs, which the lab keeps for its table

    def loss_of():
        h = x
        for i in range(0, len(layers), 2):
            h = nn.functional.linear(h, layers[i], layers[i + 1])
            h = h if i == len(layers) - 2 else torch.tanh(h)
            kept.append(h)
        return nn.functional.mse_loss(h, target)

    value, found = _saved_storages(nn.ParameterList(layers), [x, target], loss_of)
    value.backward()
    alive = sum(size for ref, size in found.values() if not ref.expired())
    assert alive == run.final.saved_alive_bytes > 0 and run.final.saved_bytes == 0
    assert "dropped the graph's references" in line and "still in memory" in line and "frees them" not in line
    assert lesson.SAVED_ROWS_CAPTION.startswith("Every row is a reference")


def test_a_custom_functions_saved_tensor_is_counted_and_freed_when_nothing_else_holds_it():
    model, batch = ZOO["custom_function"].build(seed=2)
    run = autograd.run(actions=["forward", "backward"], yours=autograd.YourModel(model, batch))
    value, found = _saved_storages(model, batch, lambda: model(batch).sum())
    assert run.steps[0].saved_bytes == sum(size for _, size in found.values()) > 0
    value.backward()
    assert all(ref.expired() for ref, _ in found.values())
    assert run.final.saved_alive_bytes == 0 and "their memory was freed" in sentence(run, "Before `backward")


def test_no_grad_is_named_only_when_the_forward_ran_under_it():
    class IntegerFirst(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(6, 3)

        def forward(self, x):
            logits = self.linear(x)
            return {"choice": logits.argmax(-1), "logits": logits}

    torch.manual_seed(9)
    model, x = IntegerFirst(), torch.randn(4, 6)
    run = autograd.run(actions=["forward"], yours=autograd.YourModel(model, x))
    value = model(x)["choice"].sum()  # the lab's loss: the first output tensor, summed
    assert torch.is_grad_enabled() and value.grad_fn is None
    assert "no_grad" not in run.graph_note and "grad mode was on" in run.graph_note
    assert not any("no_grad" in line for line in lesson.explain(run))
    under = autograd.run(autograd.AutogradOptions(preset="residual", seed=9), ["forward", "forward_no_grad"])
    assert "no_grad" in under.graph_note and sentence(under, "ran under `no_grad`")


def test_the_ratio_is_labelled_as_norms_and_passes_with_different_gradients_say_so():
    options = autograd.AutogradOptions(seed=6, depth=3, width=5, input_requires_grad=True)
    run = autograd.run(options, ["forward", "backward", "forward", "backward"])
    assert autograd.experiment.RATIO_LABEL == "‖grad‖ / ‖latest pass‖"
    assert lesson.ratio_label() in figures_columns(run)
    row = run.final.row("x")
    params, x, _, loss = hand_built_mlp(6, depth=3, width=5)
    x.requires_grad_(True)
    first = torch.autograd.grad(loss(), x)[0]
    second = torch.autograd.grad(loss(), x)[0]
    assert row.passes == 2 and row.passes_equal is torch.equal(first, second)
    assert row.grad_vs_one_pass == pytest.approx(float((first + second).norm() / second.norm()), rel=1e-5)


def figures_columns(run):
    return list(figures.tensor_table(run.final).columns)


def test_a_frozen_model_gets_a_clear_message_not_a_crash():
    model, batch = ZOO["frozen"].build(seed=1)
    run = autograd.run(actions=["forward", "zero_grad_none", "sgd_step"], yours=autograd.YourModel(model, batch))
    with pytest.raises(ValueError, match="empty parameter list"):
        torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    assert any("no optimizer" in note for note in run.notes)
    refused = run.steps[1:]
    assert all(s.error and not s.error_from_pytorch for s in refused)
    assert lesson.error_heading(run.final).startswith("The lab did not run")


# --- The general statements, each tried on the adversarial zoo -------------------------------------------------


def _trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def _backward_runs(name):
    return name not in ("inplace_on_saved", "frozen")


@falsifies(STATEMENTS["records"])
@pytest.mark.parametrize("name", ZOO)
def test_every_differentiable_float_output_of_an_op_on_a_grad_tensor_has_a_grad_fn(name):
    no_node = ("detach", "_like", "new_", "__get__", "argmax", "argmin", "size", "dim")
    checked = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            named = getattr(func, "__name__", str(func))
            if (
                torch.is_grad_enabled()
                and any(t.requires_grad for t in inputs)
                and not any(k in named for k in no_node)
            ):
                for t in float_tensors(out):
                    checked.append((named, t.grad_fn is not None))
            return out

    model, batch = ZOO[name].build()
    with Watch():
        call(model, batch)
    assert all(has for _, has in checked), [n for n, has in checked if not has]


@falsifies(STATEMENTS["accumulates"])
@pytest.mark.parametrize("name", [n for n in ZOO if _backward_runs(n)])
def test_backward_adds_into_grad(name):
    spec = ZOO[name]
    model, batch = spec.build(seed=4)
    loss = spec.loss(call(model, batch))
    params = _trainable(model)
    once = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    loss.backward(retain_graph=True)
    loss.backward()
    for p, g in zip(params, once, strict=True):
        assert (p.grad is None) if g is None else torch.equal(p.grad, g + g)


@falsifies(STATEMENTS["release"], STATEMENTS["second_backward"])
@pytest.mark.parametrize("reduce", ["zoo_loss", "sum"])
@pytest.mark.parametrize("name", [n for n in ZOO if _backward_runs(n)])
def test_backward_releases_what_it_saved_and_a_second_pass_fails_only_if_something_was_saved(name, reduce):
    spec = ZOO[name]
    model, batch = spec.build(seed=1)

    def loss_of():
        out = call(model, batch)
        return spec.loss(out) if reduce == "zoo_loss" else sum(t.sum() for t in float_tensors(out))

    value, found = _saved_storages(model, batch, loss_of)
    value.backward()
    assert all(ref.expired() for ref, _ in found.values())  # nothing else here holds an activation
    fresh_model, fresh_batch = spec.build(seed=1)  # the same graph, built without hooks
    out = call(fresh_model, fresh_batch)
    again = spec.loss(out) if reduce == "zoo_loss" else sum(t.sum() for t in float_tensors(out))
    saved_anything = _saves_anything(fresh_model, fresh_batch, spec, reduce)
    again.backward()
    if saved_anything:
        with pytest.raises(RuntimeError, match="second time"):
            again.backward()
    else:
        again.backward()


def _saves_anything(model, batch, spec, reduce):
    count = []
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: count.append(1) or t, lambda t: t)
    with hooks, torch.random.fork_rng():
        out = call(model, batch)
        spec.loss(out) if reduce == "zoo_loss" else sum(t.sum() for t in float_tensors(out))
    return bool(count)


@falsifies(STATEMENTS["zero_grad"], STATEMENTS["optimizer_clears_own"])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("name", [n for n in ZOO if _backward_runs(n)])
def test_zero_grad_clears_its_own_parameters_as_documented(name, set_to_none):
    spec = ZOO[name]
    model, batch = spec.build(seed=2)
    inputs = [t.requires_grad_(True) for t in float_tensors(batch)]
    params = _trainable(model)
    given, left_out = params[: max(1, len(params) // 2)], params[max(1, len(params) // 2) :]
    spec.loss(call(model, batch)).backward()
    before = {id(t): None if t.grad is None else t.grad.clone() for t in [*inputs, *left_out]}
    torch.optim.SGD(given, lr=0.1).zero_grad(set_to_none=set_to_none)
    for p in given:
        assert p.grad is None if set_to_none else (p.grad is None or not p.grad.any())
    for t in [*inputs, *left_out]:
        kept = before[id(t)]
        assert (t.grad is None) if kept is None else torch.equal(t.grad, kept)
    loss = spec.loss(call(model, batch))
    fresh = torch.autograd.grad(loss, given, retain_graph=True, allow_unused=True)
    loss.backward()
    for p, g in zip(given, fresh, strict=True):  # None is written fresh; zeros are added into: same values here
        assert (p.grad is None or not p.grad.any()) if g is None else torch.equal(p.grad, g)


@falsifies(STATEMENTS["version_check"])
@pytest.mark.parametrize("name", [n for n in ZOO if _backward_runs(n)])
def test_an_in_place_write_of_the_same_values_still_trips_the_version_check(name):
    spec = ZOO[name]
    model, batch = spec.build(seed=6)
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved_param = []
    with (
        torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved_param.append(t.untyped_storage()._cdata in params) or t, lambda t: t
        ),
        torch.random.fork_rng(),
    ):
        spec.loss(call(model, batch))
    loss = spec.loss(call(model, batch))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.zeros_like(p))  # same values, version counter moves
    if any(saved_param):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    else:
        loss.backward()


@falsifies(STATEMENTS["version_check"])
def test_the_version_check_holds_for_views_and_steps_and_its_scoped_exceptions_behave_as_stated():
    torch.manual_seed(0)
    layer, x = nn.Linear(4, 3), torch.randn(2, 4, requires_grad=True)

    def loss():
        return torch.tanh(x @ layer.weight.t()).pow(2).sum()  # mm saves the weight's transpose

    value = loss()
    with torch.no_grad():
        layer.weight.t()[0].mul_(1.0)  # through a view, the same values
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        value.backward()

    value = loss()
    layer.weight.grad = torch.ones_like(layer.weight)
    torch.optim.SGD([layer.weight], lr=0.1).step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        value.backward()

    layer.weight.grad = None  # a step with every .grad None writes nothing: no version move, backward runs
    value, version = loss(), layer.weight._version
    torch.optim.SGD([layer.weight], lr=0.1).step()
    assert layer.weight._version == version
    value.backward()

    value = loss()  # a write through .data: the counter stays, backward runs on the new values
    version = layer.weight._version
    layer.weight.data.mul_(2.0)
    assert layer.weight._version == version
    value.backward()

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):  # a pack hook that copies
        value = loss()
    with torch.no_grad():
        layer.weight.mul_(1.0)
    value.backward()
    with torch.autograd.graph.allow_mutation_on_saved_tensors():  # the counter moves, backward uses a saved copy
        value, version = loss(), layer.weight._version
        with torch.no_grad():
            layer.weight.mul_(1.0)
        assert layer.weight._version > version
        value.backward()
    assert all(w in STATEMENTS["version_check"].scope for w in (".data", "saved_tensors_hooks", "`.grad` is None"))
    # the text is shown without its scope (the Why after optimizer.step()): it names both exceptions itself
    assert all(w in STATEMENTS["version_check"].text for w in (".data", "allow_mutation_on_saved_tensors"))


@falsifies(STATEMENTS["no_grad"])
@pytest.mark.parametrize("name", ZOO)
def test_no_grad_records_nothing(name):
    model, batch = ZOO[name].build()
    for t in float_tensors(batch):
        t.requires_grad_(True)
    checked = []

    class Watch(TorchFunctionMode):  # every op the forward runs with grad mode off, its outputs as they came out
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not torch.is_grad_enabled():
                checked.extend(t for t in float_tensors(out) if not t._is_view())
            return out

    with torch.no_grad(), Watch():
        out = call(model, batch)
    assert all(t.grad_fn is None and not t.requires_grad for t in checked)
    assert all(t.grad_fn is None for t in float_tensors(out))
    assert all(not t.requires_grad for t in float_tensors(out) if not t._is_view())


@falsifies(STATEMENTS["no_grad"])
def test_no_grad_views_keep_requires_grad_and_enable_grad_inside_records_as_the_scope_says():
    w = torch.randn(3, 4, requires_grad=True)
    with torch.no_grad():
        views = [w.view(12), w[0], w.t()]
        made = w * 2
        with torch.enable_grad():
            nested = w * 2
    assert all(v.grad_fn is None and v.requires_grad for v in views)  # views of a grad tensor: the scope's exception
    assert made.grad_fn is None and not made.requires_grad
    assert nested.grad_fn is not None  # grad mode back on: it records, as the scope says
    assert "unless it is a view" in STATEMENTS["no_grad"].text and "enable_grad" in STATEMENTS["no_grad"].scope


@falsifies(STATEMENTS["eval_records"])
@pytest.mark.parametrize("name", ZOO)
def test_eval_mode_still_records_the_graph(name):
    model, batch = ZOO[name].build()
    trained = [t.grad_fn is not None for t in float_tensors(call(model.train(), batch))]
    evaluated = [t.grad_fn is not None for t in float_tensors(call(model.eval(), batch))]
    assert trained == evaluated


# --- Audit of the Autograd lab at non-default settings (/tmp/audit/ag) ----------------------------------------


@pytest.mark.parametrize(
    "steps",
    [("zero_grad_none", "sgd_step"), ("forward",), ("forward_no_grad", "backward"), ("forward", "backward")],
)
def test_the_cards_evidence_quotes_passes_only_from_the_run_on_screen_or_labels_the_side_run(steps):
    options = autograd.AutogradOptions(preset="residual", seed=2)
    run = autograd.run(options, steps)
    two = autograd.run(options, lesson.TWO_PASSES)
    evidence = card.answer_card(run, two).evidence
    on_this_run = evidence.split("In a separate run")[0]
    assert "passes" not in on_this_run  # no leaf of this run holds two passes
    assert all(r.passes < 2 for r in run.final.tensors)
    assert f"In a separate run of this model ({lesson.two_passes_steps()}" in evidence


def test_the_cards_evidence_quotes_the_passes_that_ran_on_screen():
    options = autograd.AutogradOptions(seed=3)
    run = autograd.run(options, ["forward", "backward_retain", "backward_retain", "backward"])
    evidence = card.answer_card(run, autograd.run(options, lesson.TWO_PASSES)).evidence
    passes, name, ratio = re.search(
        r"after (\d+) backward passes ‖(\S+)\.grad‖ / ‖latest pass‖ = ([\d.]+)", evidence
    ).groups()
    params, _, _, loss = hand_built_mlp(3)
    value = loss()
    once = torch.autograd.grad(value, [params[name]], retain_graph=True)[0]
    for retain in (True, True, False):
        value.backward(retain_graph=retain)
    assert int(passes) == 3 and "separate run" not in evidence
    assert float(ratio) == pytest.approx(float(params[name].grad.norm() / once.norm()), abs=5e-4)


def test_identical_passes_through_one_graph_are_reported_as_the_same_gradient():
    options = autograd.AutogradOptions(preset="scalar", activation="sigmoid", seed=0)
    run = autograd.run(options, ["forward", "backward_retain", "backward_retain", "backward"])
    torch.manual_seed(0)
    w, b = torch.randn((), requires_grad=True), torch.randn((), requires_grad=True)
    x = torch.randn(())
    value = torch.sigmoid(w * x + b)
    each = [torch.autograd.grad(value, [w, b], retain_graph=True) for _ in range(3)]
    assert all(torch.equal(g[1], each[0][1]) for g in each)  # plain torch: one graph, the same gradient each pass
    line = sentence(run, "never overwrites")
    assert "each added the same gradient" in line and "different" not in line
    assert run.final.row("b").passes_equal and run.final.row("w").passes_equal


def test_passes_said_to_differ_name_the_steps_that_ran_between_them():
    run = autograd.run(autograd.AutogradOptions(seed=1), ["forward", "backward", "sgd_step", "forward", "backward"])
    line = sentence(run, "never overwrites")
    assert "`optimizer.step()`, `forward` ran between them" in line
    assert "new dropout masks" not in line


def test_captions_state_the_batch_that_ran():
    options = autograd.AutogradOptions(preset="mlp_bn_dropout", batch_size=1, seed=0)
    run = autograd.run(options, ["forward"])
    settings = lesson.caption_settings(run)
    assert settings["batch"] == run.final.row("x").shape[0] == 2  # BatchNorm cannot train on one sample
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(4).train()(torch.randn(1, 4))


class _KeepOnCtx(torch.autograd.Function):
    """Keeps what its backward needs as a plain ctx attribute, not through save_for_backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.keep = x * 2
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.keep.cos()


@falsifies(STATEMENTS["release"], STATEMENTS["second_backward"])
def test_a_tensor_kept_on_ctx_outlives_backward_and_the_lab_says_what_it_counts():
    x = torch.randn(1000, requires_grad=True)
    out = _KeepOnCtx.apply(x).sum()
    node = out.grad_fn.next_functions[0][0]
    out.backward()
    assert torch.is_tensor(node.keep) and node.keep.numel() == 1000  # still held by the node after backward
    out.backward()  # nothing was saved with save_for_backward: a second pass runs
    assert "`ctx` attribute stays" in STATEMENTS["release"].text and "ctx" in STATEMENTS["release"].scope

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.tanh(_KeepOnCtx.apply(self.fc(x)))  # tanh saves its output: the graph holds bytes

    torch.manual_seed(0)
    run = autograd.run(actions=["forward", "backward"], yours=autograd.YourModel(Model(), torch.randn(4, 8)))
    line = sentence(run, r"Before `backward\(\)`")
    assert "saved tensors counted here" in line and "`ctx` attributes are not counted" in line


@pytest.mark.parametrize(
    "actions, held",
    [
        (["forward", "forward_no_grad", "backward"], False),
        (["forward", "backward"], False),
        (["forward", "backward_retain"], True),
    ],
)
def test_the_saved_table_shows_the_graph_held_now_or_says_it_is_no_longer_held(actions, held):
    run = autograd.run(autograd.AutogradOptions(input_requires_grad=True), actions)
    _, x, _, loss_of = hand_built_mlp(0)
    x.requires_grad_(True)
    value = loss_of()
    with torch.no_grad():
        graphless = loss_of()
    value.backward(retain_graph=held)
    try:  # plain torch: does the graph still hold the mm's saved input after this backward?
        value.grad_fn.next_functions[0][0]._saved_mat1  # noqa: B018
        still = True
    except RuntimeError:
        still = False
    assert graphless.grad_fn is None and still == held
    heading, rows, caption = lesson.saved_rows(run)
    if held:
        assert rows == run.saved_held and rows and "holds for backward now" in heading
    else:
        assert not run.saved_held and rows == run.saved_tensors
        assert "no longer held" in heading and "at step 1" in heading and "holds none of them now" in caption


@pytest.mark.parametrize(
    "actions",
    [
        ("forward", "backward", "zero_grad_zeros", "forward", "backward"),
        ("forward", "backward_retain", "zero_grad_none", "backward_retain"),
        ("forward", "backward", "zero_grad_none"),
    ],
)
def test_the_zero_grad_sentence_describes_the_step_it_names_not_a_later_state(actions):
    """Audit 3: "After zero_grad every .grad is zeros" was said while a later backward had filled them again."""
    seed, depth, width, batch = 3, 4, 8, 16
    run = autograd.run(autograd.AutogradOptions(seed=seed, depth=depth, width=width, batch_size=batch), list(actions))
    line = sentence(run, r"zero_grad\(set_to_none=\w+\)` (left|every)")

    params, _, _, loss = hand_built_mlp(seed, depth, width, batch)
    optimizer = torch.optim.SGD(params.values(), lr=0.1)
    states, out = [], None
    for action in actions:
        if action == "forward":
            out = loss()
        elif action.startswith("backward"):
            out.backward(retain_graph=action == "backward_retain")
        else:
            optimizer.zero_grad(set_to_none=action == "zero_grad_none")
        states.append(
            ["None" if p.grad is None else "zeros" if not p.grad.any() else "values" for p in params.values()]
        )
    cleared = max(i for i, a in enumerate(actions) if a.startswith("zero_grad"))
    wanted = "None" if actions[cleared] == "zero_grad_none" else "zeros"
    assert set(states[cleared]) == {wanted}
    later = next((i for i in range(cleared + 1, len(actions)) if set(states[i]) != {wanted}), None)
    if later is None:
        assert line.startswith(
            f"After `zero_grad(set_to_none={wanted == 'None'})` every trainable parameter's `.grad` is {wanted}"
        )
    else:
        assert line.startswith(f"At step {cleared + 1}, `zero_grad(set_to_none={wanted == 'None'})` left every")
        assert f"step {later + 1} (`backward" in line and "changed that" in line


@falsifies(STATEMENTS["release"])
def test_a_backward_limited_to_some_inputs_runs_only_their_nodes_and_the_others_keep_what_they_saved():
    """Fourth audit: y = (a.exp() + b.exp()).sum(); y.backward(inputs=[a]) frees a's branch only: a second
    backward to b works, one to a raises. The statement's scope says so."""
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    y = (a.exp() + b.exp()).sum()
    y.backward(inputs=[a])
    y.backward(inputs=[b])  # b's ExpBackward0 did not run: it still holds what it saved
    assert torch.allclose(b.grad, b.exp())
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward(inputs=[a])
    assert "inputs=" in STATEMENTS["release"].scope and "nodes it runs" in STATEMENTS["release"].text
