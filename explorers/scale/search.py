"""The largest micro-batch and the longest sequence that fit a memory budget, each witnessed by two measured steps.

Every phase's peak is a polynomial in the micro-batch (degree 1: every activation grows
with it) and close to one in the sequence length (degree 2 leaves room for attention
scores). A few measured steps fit each phase's curve; the curves predict the answer; then
two more measured steps witness it: the answer fits and the next size up does not. When
the prediction is off, a bisection over measured steps finds the answer all the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy

from explorers.scale.experiment import BATCH_RANGE, GIB, Plan, PlanOptions, measure_plan
from explorers.scale.models import config_for, longest_sequence

SEQ_GRID = 128  # sequence lengths are searched in steps of 128 tokens


@dataclass(frozen=True)
class Question:
    """A plan and a budget: what the lab asks the run engine about."""

    plan: PlanOptions
    budget_gib: int = 80

    @property
    def budget(self) -> int:
        return self.budget_gib * GIB


@dataclass(frozen=True)
class Limit:
    """The largest value of one knob that fits, with the measured steps that witness it."""

    knob: str  # "batch_size" or "seq_len"
    value: int | None  # None: not even the smallest value fits
    fits: Plan | None  # measured at `value`
    next_up: Plan | None  # measured at the next value up, which does not fit (None: `value` is the range's end)
    end: int  # the range's end: the largest value the knob may take
    measured: int  # training steps measured to find it (each one forward, backward and optimizer step, twice)
    plans: tuple[Plan, ...] = ()  # every plan measured to find it: each answers `measure_plan` for its options


@dataclass(frozen=True)
class Limits:
    budget_gib: int
    batch: Limit
    seq: Limit


def limits(question: Question, report: Callable | None = None) -> Limits:
    """The run engine's entry: the largest micro-batch at this sequence length, the longest sequence at this batch."""
    options, budget = question.plan, question.budget
    end = min(longest_sequence(config_for(options.model)), 1 << 17)
    progress = _Progress(report, 10)
    batch = largest(options, "batch_size", budget, BATCH_RANGE[0], BATCH_RANGE[1], 1, (1, 2), progress)
    seq = largest(
        options, "seq_len", budget, SEQ_GRID, end // SEQ_GRID * SEQ_GRID, SEQ_GRID, neighbours(options), progress
    )
    return Limits(question.budget_gib, batch, seq)


def neighbours(options: PlanOptions) -> tuple[int, ...]:
    """The sequence search's probes: this length, half and twice it (fewer at the range's ends). Any three fit
    the curve; these are the lengths the page's slider moves to next, so their measured plans answer that move."""
    return tuple(
        max(SEQ_GRID, value // SEQ_GRID * SEQ_GRID)
        for value in (options.seq_len // 2, options.seq_len, 2 * options.seq_len)
    )


class _Progress:
    def __init__(self, report: Callable | None, expected: int) -> None:
        self.report, self.expected, self.done = report, expected, 0

    def step(self) -> None:
        self.done += 1
        if self.report:
            self.report(self.done, max(self.expected, self.done))


def largest(
    options: PlanOptions,
    knob: str,
    budget: int,
    low: int,
    high: int,
    grid: int,
    probes: tuple[int, ...],
    progress: _Progress | None = None,
) -> Limit:
    """The largest multiple of `grid` in [low, high] whose step fits `budget`, witnessed by measured steps."""
    measured: dict[int, Plan] = {}

    def at(value: int) -> Plan:
        if value not in measured:
            measured[value] = measure_plan(replace(options, **{knob: value}))
            if progress:
                progress.step()
        return measured[value]

    probes = tuple(sorted({min(max(p, low), high) for p in probes}))
    value = _predict([at(p) for p in probes], probes, budget, low, high, grid)
    fits_at, fails_at, stride = None, None, grid  # the largest value seen to fit, the smallest seen not to
    while True:
        if at(value).fits(budget):
            fits_at = value
        else:
            fails_at = value
        if fits_at == high or fails_at == low or (fits_at is not None and fails_at == fits_at + grid):
            break
        if fits_at is not None and fails_at is not None:  # bisect between two measured steps
            value = (fits_at + fails_at) // 2 // grid * grid
        elif fits_at is not None:  # the prediction was low: walk up, twice as far each time
            value, stride = min(high, fits_at + stride), stride * 2
        else:  # the prediction was high: walk down
            value, stride = max(low, fails_at - stride), stride * 2
    return Limit(
        knob=knob,
        value=fits_at,
        fits=measured.get(fits_at) if fits_at is not None else None,
        next_up=measured.get(fails_at) if fails_at is not None else None,
        end=high,
        measured=len(measured),
        plans=tuple(measured.values()),
    )


def _predict(plans: list[Plan], xs: tuple[int, ...], budget: int, low: int, high: int, grid: int) -> int:
    """Each phase's peak fitted through the probes (a polynomial), the largest grid value all of them keep in budget."""
    phases = set.intersection(*(set(p.phase_peaks) for p in plans))
    curves = [_fit(xs, [p.phase_peaks[phase] for p in plans]) for phase in phases]

    def fits(x: int) -> bool:
        return all(curve(x) <= budget for curve in curves)

    if not fits(low):
        return low
    lo, hi = low, high
    if fits(hi):
        return hi
    while hi - lo > grid:  # bisection on the fitted curves: no step measured
        middle = (lo + hi) // 2 // grid * grid
        middle = min(max(middle, lo + grid), hi - grid)
        lo, hi = (middle, hi) if fits(middle) else (lo, middle)
    return lo


def _fit(xs: tuple[int, ...], ys: list[int]) -> numpy.poly1d:
    """The polynomial through the points: degree one less than their number."""
    return numpy.poly1d(numpy.polyfit(xs, ys, len(xs) - 1))
