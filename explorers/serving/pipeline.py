"""The input-to-output contract training records, and a service that follows it or breaks it on purpose.

A `Contract` is everything a request meets on its way to a prediction: the feature order, the
normalisation statistics, the dtype, the modules' mode, how many requests share a forward, how the
checkpoint is loaded, the postprocessing and its threshold. Training records one;
`serving_contract(recorded, mismatches)` is the same contract with the chosen mismatches injected.
`Service` runs a contract in three stages, each a plain function of the previous stage's output:

    preprocess:  raw records (n x 6, training column order) -> model inputs (n x 6, float32)
    model:       model inputs -> logits (n x 2, float32), in forwards of `requests_per_forward`
    postprocess: logits -> (score, label): softmax's churn probability, label = score >= threshold

The golden outputs are recorded by the training code itself (its own normalisation and its
in-memory model), not by `Service`: a clean service matching them exactly shows that the
checkpoint round trip and the serving code reproduce training, bit for bit.
"""

from __future__ import annotations

import dataclasses
import io
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import nn

from explorers.rng import isolated_rng
from explorers.serving.data import FEATURES

STAGES = ("preprocess", "model", "postprocess")
WIDTH = 32
DROPOUT = 0.2
SERVE_BATCH = 32  # requests per forward in the recorded contract; the golden set is one such batch
HEAD = "head"
RENAMED_HEAD = "output"  # the serving code's name for the last layer, in the missing_keys mismatch
SWAPPED = (1, 2)  # the feature_order mismatch swaps these two columns (0-based): features 2 and 3
HALF = "float16"
DTYPES = {"float32": torch.float32, "float16": torch.float16}


def swapped(names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` with the two SWAPPED positions exchanged."""
    order = list(names)
    order[SWAPPED[0]], order[SWAPPED[1]] = order[SWAPPED[1]], order[SWAPPED[0]]
    return tuple(order)


@dataclass(frozen=True)
class Mismatch:
    title: str
    stage: str  # where it enters the pipeline
    what: str  # what the serving code does differently, in one sentence
    code: str  # the line that does it


MISMATCHES: dict[str, Mismatch] = {
    "normalization": Mismatch(
        "Normalisation missing",
        "preprocess",
        "The service skips the recorded means and standard deviations: the model gets raw values.",
        "x = raw[:, order]  # no (x - mean) / std",
    ),
    "feature_order": Mismatch(
        "Feature order swapped",
        "preprocess",
        f"The service builds the vector with features {SWAPPED[0] + 1} and {SWAPPED[1] + 1} swapped.",
        f"order = {list(swapped(FEATURES))}",
    ),
    "dtype": Mismatch(
        "Half precision (float16)",
        "model",
        "The service casts the model and its inputs to float16.",
        "model.half()\nlogits = model(x.half()).float()",
    ),
    "train_mode": Mismatch(
        "Left in train mode",
        "model",
        "model.eval() is not called: dropout drops units and BatchNorm normalises with each batch's statistics.",
        "model = build(); model.load_state_dict(state)  # no model.eval()",
    ),
    "missing_keys": Mismatch(
        "strict=False load",
        "model",
        f"The serving code renamed the last layer `{RENAMED_HEAD}` and loads with strict=False: "
        "that layer keeps its random initialisation.",
        "model.load_state_dict(torch.load(f, weights_only=True), strict=False)",
    ),
    "batch_of_one": Mismatch(
        "Batch of one",
        "model",
        "Each request runs alone, with BatchNorm in train mode.",
        "for bn in batchnorms: bn.train()\nfor x in requests: model(x[None])",
    ),
    "threshold": Mismatch(
        "Softmax missing",
        "postprocess",
        "The service thresholds the raw churn logit instead of the softmax probability.",
        "label = logits[:, 1] >= threshold  # no softmax",
    ),
}


def build_model(head: str = HEAD) -> nn.Sequential:
    """Linear → BatchNorm → ReLU → Dropout, twice, then the 2-class head; call in `isolated_rng` for seeded weights."""
    return nn.Sequential(
        OrderedDict(
            [
                ("hidden1", nn.Linear(len(FEATURES), WIDTH)),
                ("norm1", nn.BatchNorm1d(WIDTH)),
                ("relu1", nn.ReLU()),
                ("drop1", nn.Dropout(DROPOUT)),
                ("hidden2", nn.Linear(WIDTH, WIDTH)),
                ("norm2", nn.BatchNorm1d(WIDTH)),
                ("relu2", nn.ReLU()),
                ("drop2", nn.Dropout(DROPOUT)),
                (head, nn.Linear(WIDTH, 2)),
            ]
        )
    )


@dataclass(frozen=True)
class Contract:
    """What happens to a request between the wire and the answer; training records one, serving follows one."""

    features: tuple[str, ...]  # the model input's column order
    means: tuple[float, ...] | None  # per model-input column; None: not normalised
    stds: tuple[float, ...] | None
    dtype: str  # the model's and its inputs' dtype
    mode: str  # "eval" | "train" (every module) | "batchnorm train" (BatchNorm only)
    requests_per_forward: int
    head: str  # the last layer's name in the code that loads the checkpoint
    strict: bool  # load_state_dict's strict
    postprocess: str  # "softmax" | "none"
    threshold: float


def serving_contract(recorded: Contract, mismatches: tuple[str, ...]) -> Contract:
    """The recorded contract with each mismatch injected; the statistics stay tied to positions, as in a service."""
    changes: dict = {}
    if "normalization" in mismatches:
        changes.update(means=None, stds=None)
    if "feature_order" in mismatches:
        changes["features"] = swapped(recorded.features)
    if "dtype" in mismatches:
        changes["dtype"] = HALF
    if "train_mode" in mismatches:
        changes["mode"] = "train"
    if "batch_of_one" in mismatches:
        changes["requests_per_forward"] = 1
        if "train_mode" not in mismatches:
            changes["mode"] = "batchnorm train"
    if "missing_keys" in mismatches:
        changes.update(head=RENAMED_HEAD, strict=False)
    if "threshold" in mismatches:
        changes["postprocess"] = "none"
    return dataclasses.replace(recorded, **changes)


class Service:
    """A contract made runnable: the checkpoint loaded into the contract's model, in the contract's mode and dtype.

    Built fresh from the checkpoint's bytes for every comparison, so nothing a service does (train
    mode moves BatchNorm's running statistics) reaches the recorded artefact.
    """

    def __init__(self, contract: Contract, checkpoint: bytes, seed: int, device: str = "cpu") -> None:
        self.contract = contract
        self.seed = seed
        self.device = torch.device(device)
        with isolated_rng(seed):  # a layer the checkpoint does not fill keeps this seeded initialisation
            model = build_model(contract.head)
        state = torch.load(io.BytesIO(checkpoint), weights_only=True)
        self.load_result = model.load_state_dict(state, strict=contract.strict)
        model.eval()
        if contract.mode == "train":
            model.train()
        elif contract.mode == "batchnorm train":
            for module in model.modules():
                if isinstance(module, nn.BatchNorm1d):
                    module.train()
        self.model = model.to(device=self.device, dtype=DTYPES[contract.dtype])

    @property
    def missing_keys(self) -> tuple[str, ...]:
        return tuple(self.load_result.missing_keys)

    @property
    def unexpected_keys(self) -> tuple[str, ...]:
        return tuple(self.load_result.unexpected_keys)

    def preprocess(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw records in training column order -> the model input the contract builds (float32)."""
        columns = [FEATURES.index(name) for name in self.contract.features]
        x = raw[:, columns]
        if self.contract.means is not None:
            x = (x - torch.tensor(self.contract.means)) / torch.tensor(self.contract.stds)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One forward of already batched model inputs: the contract's dtype in, float32 logits out."""
        with torch.no_grad():
            return self.model(x.to(device=self.device, dtype=self.model_dtype)).float().cpu()

    @property
    def model_dtype(self) -> torch.dtype:
        return DTYPES[self.contract.dtype]

    def model_stage(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, str | None]:
        """(logits, answered, error): forwards of `requests_per_forward`; a forward that raises leaves its rows NaN.

        `answered` marks the requests that got logits; `error` is the first exception's text.
        Dropout draws from the global generator, so train mode runs inside `isolated_rng(seed)`.
        """
        size = self.contract.requests_per_forward
        logits = torch.full((len(x), 2), float("nan"))
        answered = torch.zeros(len(x), dtype=torch.bool)
        error = None
        with isolated_rng(self.seed, str(self.device)):
            for start in range(0, len(x), size):
                try:
                    logits[start : start + size] = self.forward(x[start : start + size])
                    answered[start : start + size] = True
                except (ValueError, RuntimeError) as raised:
                    error = error or f"{type(raised).__name__}: {raised}"
        return logits, answered, error

    def postprocess(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(score, label): the churn probability (or, without softmax, the churn logit) and score >= threshold."""
        scores = torch.softmax(logits, dim=1)[:, 1] if self.contract.postprocess == "softmax" else logits[:, 1]
        return scores, scores >= self.contract.threshold


def strict_load_error(checkpoint: bytes, head: str) -> str | None:
    """What load_state_dict(strict=True) says about this checkpoint and a model whose last layer is `head`."""
    model = build_model(head)
    try:
        model.load_state_dict(torch.load(io.BytesIO(checkpoint), weights_only=True), strict=True)
    except RuntimeError as error:
        return " ".join(str(error).split())
    return None
