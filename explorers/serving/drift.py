"""Input drift per feature: the population stability index (PSI) of live traffic against training.

PSI = Σ over bins (live share - training share) · ln(live share / training share), with the bins
cut at the training deciles (`training.FeatureBins`; fewer bins where deciles coincide, as for a
count with few values) and every share floored at PSI_FLOOR so that an
empty bin counts as very rare rather than infinitely so. The usual reading, used here: below 0.1
no meaningful shift, 0.1 to 0.25 a moderate one, PSI_FLAG (0.25) or more a significant one, which
is flagged. PSI looks at inputs only: it needs no labels, so it is available the moment traffic
arrives, and it says nothing about whether the serving code is right.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from explorers.serving.training import FeatureBins

PSI_FLAG = 0.25
PSI_MODERATE = 0.1
PSI_FLOOR = 1e-4


@dataclass(frozen=True)
class FeatureDrift:
    feature: str
    psi: float
    flagged: bool  # psi >= PSI_FLAG
    training_mean: float
    live_mean: float
    training_shares: tuple[float, ...]
    live_shares: tuple[float, ...]


def shares(bins: FeatureBins, values: torch.Tensor) -> tuple[float, ...]:
    edges = torch.tensor(bins.edges, dtype=torch.float64)
    counts = torch.bincount(torch.bucketize(values.double(), edges), minlength=len(edges) + 1)
    return tuple((counts / len(values)).tolist())


def psi(expected: tuple[float, ...], actual: tuple[float, ...]) -> float:
    total = 0.0
    for e, a in zip(expected, actual, strict=True):
        e, a = max(e, PSI_FLOOR), max(a, PSI_FLOOR)
        total += (a - e) * math.log(a / e)
    return total


def feature_drift(bins: FeatureBins, values: torch.Tensor) -> FeatureDrift:
    live = shares(bins, values)
    value = psi(bins.proportions, live)
    return FeatureDrift(
        feature=bins.feature,
        psi=value,
        flagged=value >= PSI_FLAG,
        training_mean=bins.mean,
        live_mean=float(values.double().mean()),
        training_shares=bins.proportions,
        live_shares=live,
    )
