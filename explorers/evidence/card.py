"""The GPU evidence lab's answer card: "how would you debug a slow step?", answered from this trace's evidence.

Shown with the verdict, once every question is checked; its evidence quotes the reading's figures.
"""

from __future__ import annotations

import explorers.evidence.lesson as lesson
import explorers.evidence.questions as questions
from explorers.cards import AnswerCard
from explorers.evidence.reading import Reading

QUESTION = "How would you debug a slow GPU training step from its trace?"


def answer_card(reading: Reading) -> AnswerCard:
    bar, cause = questions.bound_key(reading)
    figure = questions.split_values(reading)[bar]
    said, remedy, _ = lesson.verdict(reading)
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "Name what bounds the step before changing anything, from a trace of steady-state steps on the card the "
            "job runs on. Assumed: one rank's trace stands for the others; out of scope: the model's accuracy."
        ),
        mechanism=(
            "The CPU queues kernels and copies and the GPU runs them later, in order per stream: the GPU idles when "
            "the queue runs dry or its work is held back, and the CPU waits for the GPU at a synchronize or a "
            "blocking copy."
        ),
        evidence=(
            f"{questions.SPLIT[bar]}: {lesson.percent(figure, reading.window_us)} of HTA's "
            f"{lesson.ms(reading.window_us)} window on {reading.card or 'a GPU the trace does not name'}. "
            f"{lesson.blocking_line(reading)} "
            + (f"{lesson.longest_blocking_line(reading)} " if reading.blocking else "")
            + said
        ),
        recovery=remedy,
        trade_off=(
            "A remedy for one bound moves the bottleneck: a faster kernel leaves a host-bound step no faster, and "
            "more overlap buys nothing while the GPU computes."
        ),
        could_prove_wrong=(
            "A trace of later steps (after warm-up) with a different largest bar, or the same step on another rank: "
            f"{'a slow peer shows as communication time on the others' if cause == 'data' else 'ranks can differ'}."
        ),
    )
