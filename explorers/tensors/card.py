"""The tensor drills' answer card: "turn this tensor into that one", answered with the checks an interviewer probes.

Shown once the puzzle is solved; its evidence is the learner's own answer's trace.
"""

from __future__ import annotations

import explorers.tensors.lesson as lesson
from explorers.cards import AnswerCard
from explorers.tensors.catalogue import PUZZLES
from explorers.tensors.figures import relation_words
from explorers.tensors.grading import Verdict

QUESTION = "Write this tensor transformation, then say what it costs: which steps copy, and what the shapes are."


def answer_card(result: Verdict) -> AnswerCard:
    puzzle = PUZZLES[result.puzzle]
    steps = "; ".join(f"`{s.text}` {tuple(s.shape)}, {relation_words(s)}" for s in result.steps if s.depth <= 2)
    copies = sum(s.relation == "new" for s in result.steps)
    return AnswerCard(
        question=f"{QUESTION} The task: {puzzle.task}",
        requirement=(
            f"A tensor of shape {puzzle.output} with the reference's dtype and values on every input, including "
            "size-1 dimensions, the largest sizes and non-contiguous inputs. Assumed: CPU tensors; out of scope: "
            "autograd through the result."
        ),
        mechanism=lesson.STATEMENTS[puzzle.concept].text,
        evidence=(
            f"`{result.expression}` passed all {result.passed} inputs (seed {result.seed}). On the first: {steps}. "
            f"{copies} of its {len(result.steps)} traced steps made a new tensor."
        ),
        recovery=(
            "When a shape is wrong, print the shape and strides after each step (the trace above); when `view` "
            "raises, the tensor is not contiguous in the order asked: `reshape`, or `contiguous()` first."
        ),
        trade_off=(
            "A view costs no memory but leaves a non-contiguous tensor that a later op may copy anyway; one copy "
            "up front can be cheaper than many strided reads."
        ),
        could_prove_wrong=(
            "An input with two equal sizes, or a size of 1, on which a swapped axis or a broadcast gives the "
            "same numbers: the grader draws distinct sizes for that reason."
        ),
    )
