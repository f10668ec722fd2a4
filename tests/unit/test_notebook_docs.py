"""docs/notebook.md's examples run as written, and leave the reader's model as it was."""

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[2] / "docs" / "notebook.md"


def test_the_notebook_example_runs_and_leaves_the_model_alone():
    text = README.read_text()
    block = re.search(r"# Use it from a notebook.*?```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own docs, not user input
    autograd, model = namespace["autograd"], namespace["model"]
    one_pass = autograd.run(autograd.AutogradOptions(preset="mlp", width=8), ["forward", "backward"])
    # "exactly twice the single-pass gradient", as the example's comment says
    assert torch.equal(namespace["run"].final_grads["head.weight"], 2 * one_pass.final_grads["head.weight"])
    torch.manual_seed(0)  # the model as the example built it, before any API saw it
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in model.state_dict().items())  # BatchNorm's stats too
    assert all(p.grad is None for p in model.parameters())


def test_the_hugging_face_example_runs_as_written_and_leaves_the_model_alone():
    text = README.read_text()
    block = re.search(r"A Hugging Face model, built from a config.*?```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    torch.manual_seed(0)
    exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own README, not user input
    model, batch, loss_fn = namespace["model"], namespace["batch"], namespace["loss_fn"]
    assert all(p.grad is None for p in model.parameters()), "an API wrote into the caller's model"
    # The gradients diagnose reported, recomputed by hand: dropout masks follow diagnose's seed (0).
    diagnosis = namespace["gradients"].diagnose(model, batch, loss_fn=loss_fn)
    torch.manual_seed(0)
    model(**batch).loss.backward()
    reported = {name: p.norm for name, p in diagnosis.parameters.items()}
    for name, parameter in model.named_parameters():
        assert reported[name] == pytest.approx(float(parameter.grad.norm()), rel=1e-4), name
