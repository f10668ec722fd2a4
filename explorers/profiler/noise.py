"""How far apart two timings must be before the lab calls a difference: a margin from the measured spread.

Step times on a shared machine scatter (other processes, caches, batches that arrive in
bursts), so a difference between two means counts only when it exceeds twice its
standard error: about a 95% interval when steps vary at random. Every comparison the lab
prints goes through here, so "faster", "bigger" and "too close to call" follow one rule.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

STANDARD_ERRORS = 2


def margin(values: Sequence[float]) -> float:
    """The noise margin of the mean of `values` (infinite for fewer than two: one step shows no spread)."""
    if len(values) < 2:
        return math.inf
    return STANDARD_ERRORS * statistics.stdev(values) / math.sqrt(len(values))


def paired_gap(larger: Sequence[float], smaller: Sequence[float]) -> tuple[float, float]:
    """Mean difference of two timings taken in the same steps, and its noise margin."""
    gaps = [a - b for a, b in zip(larger, smaller, strict=True)]
    return statistics.fmean(gaps), margin(gaps)


def unpaired_gap(after: Sequence[float], before: Sequence[float]) -> tuple[float, float]:
    """Difference of the means of two separate runs (after minus before), and its noise margin."""
    return statistics.fmean(after) - statistics.fmean(before), math.hypot(margin(after), margin(before))
