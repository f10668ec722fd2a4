"""The Serving lab's data: synthetic customer records with a churn label, and the live traffic a service sees.

The recipe, so a test (or a reader) can rebuild it by hand. One `torch.Generator` draws, for n
customers and in this order (each a vector of n values):

    tenure_months   = 1 + 71 · U(0, 1)
    monthly_charges = max(18, 70 + 20 · N(0, 1) + 20 · shift)
    support_calls   ~ Poisson(1.5 + sqrt(1.5) · shift)
    data_gb         = exp(2 + 0.6 · N(0, 1))
    age             = clamp(45 + 13 · N(0, 1), 18, 90)
    discount_pct    = 30 · U(0, 1)

then the label, churned = U(0, 1) < sigmoid(2 · f), with t, c, s, d, a the features standardised by
the population constants above (tenure (t - 36.5) / 20.5, charges (c - 70) / 20, calls (s - 1.5) /
sqrt(1.5), discount (d - 15) / 8.66, age (a - 45) / 13) and

    f = -1.8 - 1.3 t + 0.35 c + 0.25 s - 0.4 d + 0.6 t·c - 0.3 a² + 0.3 ln(data_gb / 7.4)

Training draws TRAINING_SIZE customers then VALIDATION_SIZE more from a generator seeded with the
seed. Live traffic draws LIVE_SIZE customers from a generator seeded with seed + LIVE_SEED_OFFSET,
with `shift` moving the mean of monthly charges and of support calls by `shift` population
standard deviations (the other four features keep their training distribution). The same live
generator at every shift gives common random numbers, so the effect of the shift is not buried
under sampling noise. The labelling rule stays the same at every shift: a shift is a covariate
shift. Because the rule is known, `bayes_accuracy` scores the best rule any model could learn,
and `shifted_training_data` draws TRAINING_SIZE records at a shift (from seed +
RETRAIN_SEED_OFFSET) for a model retrained on shifted data.
"""

from __future__ import annotations

import math

import torch

FEATURES = ("tenure_months", "monthly_charges", "support_calls", "data_gb", "age", "discount_pct")
SHIFTED_FEATURES = ("monthly_charges", "support_calls")  # what `shift` moves
TRAINING_SIZE = 3000
VALIDATION_SIZE = 1000
LIVE_SIZE = 5000  # accuracy on it has a standard error of about 0.4 percentage points at 90%
LIVE_SEED_OFFSET = 100_000  # above the largest seed, so live traffic never reuses a training stream
RETRAIN_SEED_OFFSET = 200_000  # the records a model is retrained on, apart from the live traffic it is scored on
CALLS_RATE = 1.5


def draw_customers(n: int, generator: torch.Generator, shift: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """n raw records (n x 6, float32, columns in FEATURES order) and their churn labels (int64)."""
    tenure = 1 + 71 * torch.rand(n, generator=generator)
    charges = (70 + 20 * torch.randn(n, generator=generator) + 20 * shift).clamp(min=18)
    calls = torch.poisson(torch.full((n,), CALLS_RATE + math.sqrt(CALLS_RATE) * shift), generator=generator)
    data_gb = torch.exp(2.0 + 0.6 * torch.randn(n, generator=generator))
    age = (45 + 13 * torch.randn(n, generator=generator)).clamp(18, 90)
    discount = 30 * torch.rand(n, generator=generator)
    records = torch.stack([tenure, charges, calls, data_gb, age, discount], dim=1)
    churned = (torch.rand(n, generator=generator) < torch.sigmoid(2 * churn_logit(records))).long()
    return records, churned


def churn_logit(records: torch.Tensor) -> torch.Tensor:
    """f of the recipe, per raw record: a customer churns with probability sigmoid(2 f)."""
    tenure, charges, calls, data_gb, age, discount = records.unbind(dim=1)
    t, c = (tenure - 36.5) / 20.5, (charges - 70) / 20
    s, d, a = (calls - CALLS_RATE) / math.sqrt(CALLS_RATE), (discount - 15) / 8.66, (age - 45) / 13
    return -1.8 - 1.3 * t + 0.35 * c + 0.25 * s - 0.4 * d + 0.6 * t * c - 0.3 * a * a + 0.3 * torch.log(data_gb / 7.4)


def bayes_accuracy(records: torch.Tensor, labels: torch.Tensor) -> float:
    """Accuracy of the best rule any model can learn: predict churn where its probability is at least one half.

    The generator's own probability is known here, so no model can beat this rule on these
    records except by luck in the labels drawn.
    """
    best = (churn_logit(records) >= 0).long()
    return float((best == labels).double().mean())


def shifted_training_data(seed: int, shift: float) -> tuple[torch.Tensor, torch.Tensor]:
    """TRAINING_SIZE fresh records drawn at `shift`: what a retrained model would learn from."""
    return draw_customers(TRAINING_SIZE, torch.Generator().manual_seed(seed + RETRAIN_SEED_OFFSET), shift)


def training_data(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_validation, y_validation) for this seed, unshifted."""
    generator = torch.Generator().manual_seed(seed)
    x, y = draw_customers(TRAINING_SIZE, generator)
    x_val, y_val = draw_customers(VALIDATION_SIZE, generator)
    return x, y, x_val, y_val


def live_traffic(seed: int, shift: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The requests the service receives (raw records) and the labels that arrive later."""
    return draw_customers(LIVE_SIZE, torch.Generator().manual_seed(seed + LIVE_SEED_OFFSET), shift)
