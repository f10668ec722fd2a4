"""A model of L identical blocks, measured from two or three small copies of it: each number is linear in L.

Every number a step reports (bytes of each kind, each phase's peak, what was alive at it) is
the part outside the blocks plus, for each kind of block (frozen or training), the block
count times what one such block adds. Small copies of the model measure both: one block and
two blocks when every block is alike; one frozen and one training block, then one more of
each, when the last N train.

A phase's peak is the highest of many moments, and which moment is highest can change with
the block count (an audit found the scaled peak up to 5% low at short sequences, when only
phases were scaled). Each place in the step (before the blocks, the first or last block of
each kind, after the blocks) keeps its own peak, which is linear in the block count, so the
places are scaled one by one and the phase's peak is the highest of them
(`explorers.memory.regions`). `tests/claims/test_scale.py` finds the scaled step equal to the
whole model's, byte for byte, on tiny Llama, GPT-2 and BERT configurations at two sizes.
"""

from __future__ import annotations

import copy
import dataclasses

from explorers.memory.your_model import Measurement, StepMemory


def block_counts(blocks: int, trainable: str, trainable_blocks: int) -> tuple[int, int]:
    """(frozen, training) blocks."""
    if trainable == "head":
        return blocks, 0
    if trainable == "last":
        training = min(trainable_blocks, blocks)
        return blocks - training, training
    return 0, blocks


def small_copies(frozen: int, training: int) -> list[tuple[int, int]]:
    """(frozen, training) block counts of the small copies to measure: a base, then one more block of each kind."""
    base = (min(frozen, 1), min(training, 1))
    return [base] + [tuple(b + (i == kind) for i, b in enumerate(base)) for kind in (0, 1) if (frozen, training)[kind]]


def with_blocks(config, count: int):
    shrunk = copy.deepcopy(config)
    shrunk.num_hidden_layers = count
    return shrunk


def combine(values: list, counts: list[tuple[int, int]], target: tuple[int, int]):
    """The value at `target` blocks: base + Σ (count beyond the base) × (what one more block of that kind added)."""
    base, *more = values
    extra = [target[kind] - counts[0][kind] for kind in (0, 1) if target[kind]]
    return _linear(base, [(_minus(step, base), n) for step, n in zip(more, extra, strict=True)])


def _minus(a, b):
    if isinstance(a, dict):
        return {k: a.get(k, 0) - b.get(k, 0) for k in {*a, *b}}
    return a - b


def _linear(base, slopes):
    if isinstance(base, dict):
        keys = {*base, *(k for slope, _ in slopes for k in slope)}
        return {k: base.get(k, 0) + sum(slope.get(k, 0) * n for slope, n in slopes) for k in keys}
    return base + sum(slope * n for slope, n in slopes)


def combine_steps(steps: list[StepMemory], counts, target) -> StepMemory:
    """Each phase's peak at `target` blocks: the highest of its places' peaks, each scaled on its own
    (explorers.memory.regions says why); by phase as a whole when the copies' places differ."""
    phases = steps[0].phase_at_peak.keys()
    at_phase = {p: combine([s.phase_at_peak.get(p, {}) for s in steps], counts, target) for p in phases}
    phase_peaks = {p: combine([s.phase_peaks.get(p, 0) for s in steps], counts, target) for p in phases}
    places = steps[0].region_peaks.keys()
    if places and all(s.region_peaks.keys() == places for s in steps):  # phases with places: their highest place
        peaks = {p: combine([s.region_peaks[p] for s in steps], counts, target) for p in places}
        highest: dict[str, str] = {}
        for place in places:
            phase = place.split("|")[0]
            if phase not in highest or peaks[place] > peaks[highest[phase]]:
                highest[phase] = place
        for phase, place in highest.items():
            phase_peaks[phase] = peaks[place]
            at_phase[phase] = combine([s.region_at_peak[place] for s in steps], counts, target)
    peak_phase = max(phase_peaks, key=phase_peaks.get)
    return StepMemory(
        peak=phase_peaks[peak_phase],
        peak_phase=peak_phase,
        at_peak=at_phase[peak_phase],
        phase_peaks=phase_peaks,
        timeline=(),  # moments are not scaled: only the peaks are
        phase_at_peak=at_phase,
    )


SCALED_FIELDS = ("parameters", "buffers", "batch", "gradients", "optimizer_state", "activations", "weight_copies")


def combine_measurements(measured: list[Measurement], counts, target) -> Measurement:
    last = measured[-1]
    return dataclasses.replace(
        last,
        **{name: combine([getattr(m, name) for m in measured], counts, target) for name in SCALED_FIELDS},
        first_step=combine_steps([m.first_step for m in measured], counts, target),
        steady_step=combine_steps([m.steady_step for m in measured], counts, target),
        predicted={},
        graph_ops=(),
        largest_parameter=max(m.largest_parameter for m in measured),
    )
