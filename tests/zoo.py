"""The adversarial zoo: small models that break easy generalisations about PyTorch.

Every general statement a lab makes (see explorers/statements.py) and every notebook API is
tried on each of these. Each specimen is built fresh and seeded, so tests can run it as often
as they like. A specimen's `batch` is how the model is called: a tensor is `model(x)`, a tuple
is `model(*batch)`, a dict is `model(**batch)`; `loss(output)` reduces whatever the model
returns to a scalar that depends on every float output.

What each one is for:
- custom_function: a hand-written autograd.Function saving its input (no `_saved_*` attributes).
- rrelu: RReLU reads `training` (random slopes in train(), a fixed slope in eval()).
- lstm_dropout: nn.LSTM's inter-layer dropout reads `training` without an nn.Dropout module.
- attention_dropout: nn.MultiheadAttention's dropout on the attention weights.
- instance_norm_running: InstanceNorm with running statistics moves them in train().
- inplace_on_saved: sigmoid's output (saved for backward) changed in place by mul_: backward must fail.
- tied_weights: one Parameter reached from two modules.
- add_only: the only op is an add, which saves nothing for backward.
- dict_model: keyword arguments in, a dict with `loss` and `logits` out (Hugging Face style).
- frozen: no parameter requires grad.
- no_grad_inside: part of forward runs under torch.no_grad().
- integer_first_output: returns (argmax indices, logits): the first output has no gradient.
- plain_mlp: the ordinary case, BatchNorm and Dropout included.
- branch_in_submodule: a submodule branches on a tensor's value (a graph break for torch.compile,
  inside a child module, not at the top of forward).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

FEATURES, HIDDEN, CLASSES, ROWS, VOCAB = 6, 8, 3, 5, 11


@dataclass(frozen=True)
class Specimen:
    name: str
    make: Callable[[], nn.Module]
    make_batch: Callable[[], object]

    def build(self, seed: int = 0) -> tuple[nn.Module, object]:
        """A fresh model and batch, the same for the same seed; torch's global RNG is left as it was."""
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return self.make(), self.make_batch()

    def loss(self, output: object) -> torch.Tensor:
        return sum(t.float().pow(2).mean() for t in float_tensors(output))


def call(model: nn.Module, batch: object) -> object:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, tuple | list):
        return model(*batch)
    return model(batch)


def float_tensors(output: object) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output] if output.is_floating_point() else []
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, tuple | list):
        return [t for item in output for t in float_tensors(item)]
    return []


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class CustomFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        return _Square.apply(self.linear(x))


class LSTMDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(FEATURES, HIDDEN, num_layers=2, dropout=0.5, batch_first=True)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


class AttentionDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(FEATURES, num_heads=2, dropout=0.5, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x)[0]


class InstanceNormRunning(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, FEATURES)
        self.norm = nn.InstanceNorm1d(2, track_running_stats=True, affine=True)

    def forward(self, x):  # x: (rows, 2, FEATURES)
        return self.norm(self.linear(x))


class InplaceOnSaved(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        y = torch.sigmoid(self.linear(x))  # sigmoid saves its output for backward
        return y.mul_(2)  # ...which this changes in place


class TiedWeights(nn.Module):
    """A tiny language model whose output head shares the embedding's Parameter (as GPT-2 does)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # one Parameter, two modules

    def forward(self, tokens):
        return self.head(torch.tanh(self.embed(tokens)))


class AddOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.shift = nn.Parameter(torch.randn(FEATURES))

    def forward(self, x):
        return x + self.shift


class DictModel(nn.Module):
    """Hugging Face style: keyword arguments in, a dict with the loss already computed out."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Dropout(0.25), nn.Linear(HIDDEN, CLASSES))

    def forward(self, features, labels=None):
        logits = self.body(features)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


class NoGradInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(FEATURES, HIDDEN)
        self.second = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        with torch.no_grad():
            hidden = torch.relu(self.first(x))  # no graph: `first` gets no gradient
        return self.second(hidden)


class IntegerFirstOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        logits = self.linear(x)
        return logits.argmax(-1), logits


class _Gate(nn.Module):
    def forward(self, x):
        if x.mean() > 0:  # a branch on a tensor's value
            return x * 2
        return -x


class BranchInSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(FEATURES, HIDDEN)
        self.gate = _Gate()
        self.second = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.second(self.gate(self.first(x)))


def _frozen() -> nn.Module:
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    return model.requires_grad_(False)


def _rows() -> torch.Tensor:
    return torch.randn(ROWS, FEATURES)


ZOO: dict[str, Specimen] = {
    s.name: s
    for s in [
        Specimen("custom_function", CustomFunction, _rows),
        Specimen("rrelu", lambda: nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.RReLU(), nn.Linear(HIDDEN, 1)), _rows),
        Specimen("lstm_dropout", LSTMDropout, lambda: torch.randn(ROWS, 4, FEATURES)),
        Specimen("attention_dropout", AttentionDropout, lambda: torch.randn(ROWS, 4, FEATURES)),
        Specimen("instance_norm_running", InstanceNormRunning, lambda: torch.randn(ROWS, 2, FEATURES)),
        Specimen("inplace_on_saved", InplaceOnSaved, _rows),
        Specimen("tied_weights", TiedWeights, lambda: torch.randint(0, VOCAB, (ROWS, 4))),
        Specimen("add_only", AddOnly, _rows),
        Specimen(
            "dict_model",
            DictModel,
            lambda: {"features": torch.randn(ROWS, FEATURES), "labels": torch.randint(0, CLASSES, (ROWS,))},
        ),
        Specimen("frozen", _frozen, _rows),
        Specimen("no_grad_inside", NoGradInside, _rows),
        Specimen("integer_first_output", IntegerFirstOutput, _rows),
        Specimen("branch_in_submodule", BranchInSubmodule, _rows),
        Specimen(
            "plain_mlp",
            lambda: nn.Sequential(
                nn.Linear(FEATURES, HIDDEN),
                nn.BatchNorm1d(HIDDEN),
                nn.ReLU(),
                nn.Dropout(0.5),
                nn.Linear(HIDDEN, CLASSES),
            ),
            _rows,
        ),
    ]
}


def tiny_bert() -> tuple[nn.Module, dict]:
    """A Hugging Face BertForSequenceClassification from a tiny config, seeded, and a batch with labels: a
    dict-returning model nobody here wrote (its first call with labels also sets config.problem_type)."""
    import transformers

    config = transformers.BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=3,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = transformers.BertForSequenceClassification(config)
        return model, {"input_ids": torch.randint(0, 40, (2, 8)), "labels": torch.tensor([0, 2])}
