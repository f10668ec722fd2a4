"""Every sentence the Autograd lab shows, checked by torch code written here, not by the lab's helpers.

The presets are rebuilt by hand: the same modules created in the same order under the same
seed draw the same weights, so these checks see the very tensors the lab measured.
"""

import copy
import re

import pytest
import torch
from torch import nn

from explorers import autograd
from explorers.autograd import lesson


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


def accumulation_names_the_largest_ratio_and_its_value():
    seed = 1
    run = autograd.run(autograd.AutogradOptions(seed=seed), ["forward", "backward", "sgd_step", "forward", "backward"])
    line = sentence(run, "never overwrites")
    name, ratio = re.search(r"`(\S+)\.grad` is now \*\*([\d.]+)×\*\*", line).groups()

    params, _, _, loss = hand_built_mlp(seed)
    optimizer = torch.optim.SGD(params.values(), lr=0.1)
    loss().backward()
    optimizer.step()
    first = {n: p.grad.clone() for n, p in params.items()}
    loss().backward()
    ratios = {n: float(p.grad.norm() / (p.grad - first[n]).norm()) for n, p in params.items()}
    assert name == max(ratios, key=ratios.get)
    assert float(ratio) == pytest.approx(ratios[name], abs=5e-4)


def retained_passes_double_every_gradient():
    run = autograd.run(autograd.AutogradOptions(seed=3), ["forward", "backward_retain", "backward_retain"])
    line = sentence(run, "never overwrites")
    assert "**2.000×**" in line
    params, _, _, loss = hand_built_mlp(3)
    value = loss()
    value.backward(retain_graph=True)
    once = {n: p.grad.clone() for n, p in params.items()}
    value.backward()
    assert all(torch.allclose(p.grad, 2 * once[n]) for n, p in params.items())


def saved_bytes_count_neither_input_nor_target():
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


def backward_frees_what_the_graph_held():
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


def no_grad_forward_has_no_graph():
    run = autograd.run(autograd.AutogradOptions(seed=0), ["forward_no_grad"])
    sentence(run, "grad_fn=None")
    _, _, _, loss = hand_built_mlp(0)
    with torch.no_grad():
        value = loss()
    assert value.grad_fn is None and not value.requires_grad


def optimizer_step_bumps_the_named_version_counter():
    run = autograd.run(autograd.AutogradOptions(seed=0), ["forward", "backward", "sgd_step"])
    name, old, new = re.search(r"`(\S+)`'s version counter went from (\d+) to (\d+)", sentence(run, "version")).groups()
    params, _, _, loss = hand_built_mlp(0)
    loss().backward()
    before = params[name]._version
    torch.optim.SGD(params.values(), lr=0.1).step()
    assert (int(old), int(new)) == (before, params[name]._version)


def leaves_are_the_parameters_and_not_the_input():
    run = autograd.run(autograd.AutogradOptions(seed=0), ["forward"])
    count = int(re.search(r"the (\d+) \*\*leaves\*\* that require grad", sentence(run, "leaves")).group(1))
    params, x, _, _ = hand_built_mlp(0)
    assert count == len(params)  # x is a leaf too, but it does not require grad here
    assert x.is_leaf and not x.requires_grad


CLAIMS = [
    pytest.param(accumulation_names_the_largest_ratio_and_its_value, id="accumulation-names-the-right-tensor"),
    pytest.param(retained_passes_double_every_gradient, id="retain-graph-doubles-gradients"),
    pytest.param(saved_bytes_count_neither_input_nor_target, id="saved-bytes-exclude-the-batch"),
    pytest.param(backward_frees_what_the_graph_held, id="backward-frees-saved-tensors"),
    pytest.param(no_grad_forward_has_no_graph, id="no-grad-builds-no-graph"),
    pytest.param(optimizer_step_bumps_the_named_version_counter, id="step-bumps-version"),
    pytest.param(leaves_are_the_parameters_and_not_the_input, id="leaves-that-require-grad"),
]


@pytest.mark.parametrize("claim", CLAIMS)
def test_claim(claim):
    claim()


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
