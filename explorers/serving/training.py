"""Training the Serving lab's classifier, and the artefact it hands to serving: checkpoint, contract, golden set.

`train(seed)` fits the model (`pipeline.build_model`: two Linear → BatchNorm → ReLU → Dropout
blocks and a 2-class head) on standardised training data through a DataLoader, then records:

- the checkpoint: `model.state_dict()` written by `torch.save` (read back with `weights_only=True`);
- the contract (`pipeline.Contract`): feature order, the training means and standard deviations,
  float32, eval mode, SERVE_BATCH requests per forward, strict loading, softmax, threshold 0.5;
- the golden set: GOLDEN_NEAR validation records whose churn probability is nearest the threshold
  (they catch postprocessing changes) and GOLDEN_SIZE - GOLDEN_NEAR more, the first in validation
  order, with the expected output of every stage, computed by the training code itself (its own
  standardisation, its in-memory model in eval mode, the golden set as one batch);
- per feature, the training distribution the drift check compares live traffic with.

`trained(seed)` caches one `Artefact` per seed in this process (the run engine's workers live
long, so each trains a seed once). The artefact is immutable (bytes, tuples, frozen
dataclasses): every comparison loads its own model from the checkpoint's bytes.

The checkpoint's last bits depend on the CPU thread count (reductions split differently; checked:
one and two threads give different SHA-256s, the same loss to 8 digits). The run engine's workers
use a fixed count, and every comparison is against the artefact of its own process, so replays
stay exact; a notebook on more threads may print numbers that differ in the third digit.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from explorers.rng import isolated_rng
from explorers.serving.data import FEATURES, live_traffic, shifted_training_data, training_data
from explorers.serving.pipeline import HEAD, SERVE_BATCH, Contract, build_model

EPOCHS = 10
TRAIN_BATCH = 100
LEARNING_RATE = 1e-2
THRESHOLD = 0.5
GOLDEN_SIZE = SERVE_BATCH
GOLDEN_NEAR = 16
DRIFT_BINS = 10  # deciles of the training values
CACHED_SEEDS = 8


@dataclass(frozen=True)
class GoldenSet:
    """Recorded inputs and the expected output of each stage; row i of every field is golden example i."""

    indices: tuple[int, ...]  # positions in the validation set
    inputs: tuple[tuple[float, ...], ...]  # raw records, FEATURES order
    labels: tuple[int, ...]
    near_threshold: tuple[bool, ...]
    preprocess: tuple[tuple[float, ...], ...]  # the model input training built
    logits: tuple[tuple[float, float], ...]
    scores: tuple[float, ...]  # churn probability
    predictions: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.inputs)


@dataclass(frozen=True)
class FeatureBins:
    """A feature's training distribution over bins: bin i holds edges[i-1] < value <= edges[i]."""

    feature: str
    edges: tuple[float, ...]  # the distinct deciles of the training values
    proportions: tuple[float, ...]  # share of training values per bin, len(edges) + 1 of them
    mean: float


@dataclass(frozen=True)
class Artefact:
    seed: int
    checkpoint: bytes
    checkpoint_sha256: str
    contract: Contract
    golden: GoldenSet
    validation_accuracy: float
    final_loss: float  # mean training loss of the last epoch
    feature_bins: tuple[FeatureBins, ...]
    torch_version: str


def bins_of(feature: str, values: torch.Tensor) -> FeatureBins:
    quantiles = torch.linspace(0, 1, DRIFT_BINS + 1)[1:-1].double()
    edges = torch.unique(torch.quantile(values.double(), quantiles))
    counts = torch.bincount(torch.bucketize(values.double(), edges), minlength=len(edges) + 1)
    return FeatureBins(
        feature, tuple(edges.tolist()), tuple((counts / len(values)).tolist()), float(values.double().mean())
    )


def fit(x: torch.Tensor, y: torch.Tensor, seed: int, report=None) -> tuple[nn.Module, torch.Tensor, torch.Tensor, list]:
    """(model in eval mode, feature means, feature stds, last epoch's losses): the lab's training on these records."""
    mean, std = x.mean(dim=0), x.std(dim=0)
    loader = DataLoader(
        TensorDataset((x - mean) / std, y),
        batch_size=TRAIN_BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    with isolated_rng(seed):  # initialisation and dropout draw from the global generator
        model = build_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        for epoch in range(EPOCHS):
            model.train()
            losses = []
            for inputs, targets in loader:
                optimizer.zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(model(inputs), targets)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
            if report:
                report(epoch + 1, EPOCHS)
    return model.eval(), mean, std, losses


def train(seed: int, report=None) -> Artefact:
    """Train on this seed's data and record the artefact; `report(done, total)` after each epoch."""
    x, y, x_val, y_val = training_data(seed)
    model, mean, std, losses = fit(x, y, seed, report)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    checkpoint = buffer.getvalue()
    contract = Contract(
        features=FEATURES,
        means=tuple(mean.tolist()),
        stds=tuple(std.tolist()),
        dtype="float32",
        mode="eval",
        requests_per_forward=SERVE_BATCH,
        head=HEAD,
        strict=True,
        postprocess="softmax",
        threshold=THRESHOLD,
    )
    with torch.no_grad():
        validation_scores = torch.softmax(model((x_val - mean) / std), dim=1)[:, 1]
        accuracy = float(((validation_scores >= THRESHOLD).long() == y_val).double().mean())
        golden = _golden(model, x_val, y_val, validation_scores, mean, std)
    return Artefact(
        seed=seed,
        checkpoint=checkpoint,
        checkpoint_sha256=hashlib.sha256(checkpoint).hexdigest(),
        contract=contract,
        golden=golden,
        validation_accuracy=accuracy,
        final_loss=sum(losses) / len(losses),
        feature_bins=tuple(bins_of(name, x[:, i]) for i, name in enumerate(FEATURES)),
        torch_version=torch.__version__,
    )


def _golden(model, x_val, y_val, validation_scores, mean, std) -> GoldenSet:
    """The golden examples and, per stage, what the training code outputs for them (one batch, eval mode)."""
    nearest = torch.argsort((validation_scores - THRESHOLD).abs())[:GOLDEN_NEAR].tolist()
    others = [i for i in range(len(x_val)) if i not in set(nearest)][: GOLDEN_SIZE - GOLDEN_NEAR]
    indices = sorted(nearest + others)
    raw = x_val[indices]
    inputs = (raw - mean) / std
    logits = model(inputs)
    scores = torch.softmax(logits, dim=1)[:, 1]
    return GoldenSet(
        indices=tuple(indices),
        inputs=_rows(raw),
        labels=tuple(y_val[indices].tolist()),
        near_threshold=tuple(i in set(nearest) for i in indices),
        preprocess=_rows(inputs),
        logits=_rows(logits),
        scores=tuple(scores.tolist()),
        predictions=tuple((scores >= THRESHOLD).long().tolist()),
    )


def _rows(t: torch.Tensor) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(row) for row in t.tolist())


_ARTEFACTS: OrderedDict[int, Artefact] = OrderedDict()
_ARTEFACTS_LOCK = threading.Lock()


def trained(seed: int, report=None) -> Artefact:
    """This seed's artefact, trained once per process (the last CACHED_SEEDS seeds are kept)."""
    with _ARTEFACTS_LOCK:
        if seed in _ARTEFACTS:
            _ARTEFACTS.move_to_end(seed)
            return _ARTEFACTS[seed]
    artefact = train(seed, report)  # outside the lock: a cancelled training leaves nothing behind
    with _ARTEFACTS_LOCK:
        _ARTEFACTS[seed] = artefact
        while len(_ARTEFACTS) > CACHED_SEEDS:
            _ARTEFACTS.popitem(last=False)
    return artefact


_RETRAINED: OrderedDict[tuple[int, float], float] = OrderedDict()


def retrained_accuracy(seed: int, shift: float) -> float:
    """Live accuracy at `shift` of a model trained the lab's way on TRAINING_SIZE records drawn at that shift.

    What retraining on recent traffic can win back, measured rather than promised. Cached per
    (seed, shift), like the artefact, because training takes a second or two.
    """
    key = (seed, shift)
    with _ARTEFACTS_LOCK:
        if key in _RETRAINED:
            return _RETRAINED[key]
    model, mean, std, _ = fit(*shifted_training_data(seed, shift), seed)
    raw, labels = live_traffic(seed, shift)
    with torch.no_grad():
        scores = torch.softmax(model((raw - mean) / std), dim=1)[:, 1]
    accuracy = float(((scores >= THRESHOLD).long() == labels).double().mean())
    with _ARTEFACTS_LOCK:
        _RETRAINED[key] = accuracy
        while len(_RETRAINED) > CACHED_SEEDS:
            _RETRAINED.popitem(last=False)
    return accuracy
