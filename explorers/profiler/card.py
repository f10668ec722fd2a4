"""The Profiler lab's answer card: "Where does a slow training step spend its time?", with this run as evidence."""

from __future__ import annotations

import statistics

from explorers.cards import AnswerCard
from explorers.profiler.noise import ms
from explorers.profiler.your_model import PHASES, ProfileResult

QUESTION = "Where does a slow training step spend its time, and how do you find out?"


def answer_card(result: ProfileResult) -> AnswerCard:
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "A training step should keep the compute busy: the goal is less wall time per step at the same result. "
            "Assumed: a steady state after warm-up; out of scope: multi-node communication."
        ),
        mechanism=(
            "Label each phase with `record_function` (data, copy, forward, backward, optimizer), warm up, then let "
            "`torch.profiler` record a few active steps; compare the phases' shares. On a GPU, kernels run "
            "asynchronously, so time lands on whatever waits for them unless you synchronise."
        ),
        evidence=_evidence(result),
        recovery=(
            "Data-bound: more DataLoader workers, cheaper or cached augmentation. Copy-bound: `pin_memory` and "
            "non-blocking copies. Compute-bound: a larger batch or a smaller model, mixed precision, compilation. "
            "Optimizer-bound: a fused or foreach optimizer. Then measure again: a change that does not beat the "
            "noise is not a win."
        ),
        trade_off=(
            "More workers and larger batches cost memory and CPU cores shared with other jobs; on a busy machine "
            "the fastest setting can differ from a quiet one."
        ),
        could_prove_wrong=(
            "If the step's wall time did not fall after the change the verdict points to, by more than the "
            "spread between repeated runs, the diagnosis was wrong."
        ),
    )


def _evidence(result: ProfileResult) -> str:
    medians = {p: statistics.median(s.phases.get(p, 0.0) for s in result.steps) for p in PHASES}
    wall = statistics.median(s.wall_ms for s in result.steps)
    phases = ", ".join(f"{phase} {ms(medians[phase])} ms" for phase in sorted(medians, key=medians.get, reverse=True))
    ratios = result.overhead_ratios
    return (
        f"On this run: the verdict is **{result.verdict}**; the median profiled step took {ms(wall)} ms ({phases}); "
        f"with the profiler, steps took {min(ratios):.2f}–{max(ratios):.2f}× as long as without it "
        f"over {len(ratios)} rounds."
    )
