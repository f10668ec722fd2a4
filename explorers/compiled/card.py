"""The compile lab's answer card: "would torch.compile speed up this training step?", with this run as evidence."""

from __future__ import annotations

import explorers.compiled.lesson as lesson
from explorers.cards import AnswerCard
from explorers.compiled.experiment import Analysis, PayoffRun

QUESTION = "Your training step is slow. Would `torch.compile` help, and how would you know it is working?"


def answer_card(analysis: Analysis, payoff: PayoffRun | None) -> AnswerCard:
    evidence = lesson.breaks_sentences(analysis.breaks) + lesson.recompile_sentences(analysis.recompiles)
    if payoff is not None:
        evidence += lesson.payoff_sentences(payoff)
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "A faster step at the same result, counted over the whole run: the compile is paid once per "
            "process and again at every recompile. Assumed: one CPU process; out of scope: CUDA graphs, "
            "distributed compile."
        ),
        mechanism=" ".join(
            STATEMENT.text for STATEMENT in (lesson.STATEMENTS["first_call"], lesson.STATEMENTS["break_splits"])
        )
        + " "
        + lesson.STATEMENTS["guards"].text,
        evidence="On this run: " + " ".join(evidence),
        recovery=(
            "Find the breaks with `torch._dynamo.explain` and move `.item()`, prints and data-dependent branches "
            "out of forward; watch recompiles with `TORCH_LOGS=recompiles`; mark changing sizes dynamic or pad "
            "them to a few buckets; then time eager against compiled steps after warm-up."
        ),
        trade_off=(
            "Compile time against step time: a short job or a model that keeps recompiling can spend more on "
            "compiling than it saves; `fullgraph=True` finds every break but makes each one an error."
        ),
        could_prove_wrong=(
            "If compiled steps, timed after warm-up beside eager ones, were not faster by more than their noise, "
            "compiling would not be the answer for this step on this machine."
        ),
    )
