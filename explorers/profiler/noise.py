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


def paired_median_gap(larger: Sequence[float], smaller: Sequence[float]) -> tuple[float, float]:
    """Median difference of two timings taken in pairs, and the half-width of its distribution-free ~95% interval.

    The interval runs between the order statistics the sign test puts at 2.5% on either side, so one pair hit by a
    hiccup of the machine (a step ten times as long) moves it by one rank, not by the hiccup's size: the rule for
    many short steps taken in turn, where such hiccups are common. Infinite for fewer than six pairs."""
    gaps = sorted(a - b for a, b in zip(larger, smaller, strict=True))
    n, rank = len(gaps), _sign_test_rank(len(gaps))
    middle = statistics.median(gaps)
    if rank == 0:
        return middle, math.inf
    return middle, max(middle - gaps[rank - 1], gaps[n - rank] - middle)


def _sign_test_rank(n: int) -> int:
    """The largest k with P(Binomial(n, 1/2) < k) <= 2.5%: the k-th smallest and k-th largest bound the interval."""
    k, below = 0, 0.0
    while k < n and below + math.comb(n, k) / 2**n <= 0.025:
        below += math.comb(n, k) / 2**n
        k += 1
    return k


def unpaired_gap(after: Sequence[float], before: Sequence[float]) -> tuple[float, float]:
    """Difference of the means of two separate runs (after minus before), and its noise margin."""
    return statistics.fmean(after) - statistics.fmean(before), math.hypot(margin(after), margin(before))
