"""The Profiler lab's answer card: "Where does a slow training step spend its time?", with this run as evidence.

The evidence quotes the very sentences the page shows beside it (the verdict and the profiler's
cost), so the card and the verdict of one run cannot disagree on a number.
"""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.profiler.lesson import STATEMENTS, overhead
from explorers.profiler.your_model import ProfileResult

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
            f"`torch.profiler` record a few active steps and compare the phases' shares. "
            f"{STATEMENTS['record_function'].text}. {STATEMENTS['cuda_async'].text}."
        ),
        evidence=evidence(result),
        recovery=(
            "Data-bound: more DataLoader workers, cheaper or cached augmentation. Copy-bound: `pin_memory` and "
            "non-blocking copies. Compute-bound: a smaller model, mixed precision, compilation, more threads. "
            f"Optimizer-bound: a fused or foreach optimizer. {STATEMENTS['larger_batch'].text}. Then "
            "measure again: a change that does not beat the noise is not a win."
        ),
        trade_off=(
            "More workers and larger batches cost memory and CPU cores shared with other jobs; on a busy machine "
            "the fastest setting can differ from a quiet one."
        ),
        could_prove_wrong=(
            "Profile the same settings again: if another part of the step now leads beyond the noise margin, this "
            "run's verdict measured the machine's load more than the job. A change that does not shorten the step "
            "proves little on a busy machine: repeat both runs before calling the diagnosis wrong."
        ),
    )


def evidence(result: ProfileResult) -> str:
    """The verdict line and the profiler's cost, word for word as the page shows them."""
    return f"On this run: **{result.verdict}**: {result.evidence} {overhead(result)}"
