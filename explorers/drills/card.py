"""The Fix-the-loop lab's answer card: "this loop trains badly: why?", with the run on screen as evidence.

Shown once the answer is given (its mechanism names the bug).
"""

from __future__ import annotations

import explorers.drills.lesson as lesson
from explorers.cards import AnswerCard
from explorers.drills.catalogue import DRILLS
from explorers.drills.fixes import FIXES
from explorers.drills.symptoms import Comparison

QUESTION = "This training loop trains badly, or fails. How do you find the bug, and how do you prove the fix?"


def answer_card(drill: str, comparison: Comparison, seed: int) -> AnswerCard:
    symptoms = [lesson.symptom(f) for f in comparison.findings]
    evidence = " ".join(symptoms) if symptoms else lesson.NOT_SHOWN
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "A loop that trains the model it builds, on every batch, in the mode it means to, and reports numbers "
            "that are true. Assumed: a small model on one CPU; out of scope: mixed precision and compilation."
        ),
        mechanism=" ".join(lesson.explanation(drill)),
        evidence=f"On this run (seed {seed}): {evidence}",
        recovery=(
            f"{FIXES[DRILLS[drill].fix].label}. Then rerun on the same seed and data beside the loop you trust: "
            "the losses should agree bit for bit where the two loops differ in the fix alone."
        ),
        trade_off=(
            "A fix that brings the loss back (clipping, a lower learning rate) can hide a bug whose source is "
            "still there; read the gradients, the modes and the memory, not the loss alone."
        ),
        could_prove_wrong=(
            "If the fixed loop, on the same seed, still differed from the correct loop in a reading the bench "
            "takes (the gradient at a step, a mode, memory, the data order), the fix would not be the whole answer."
        ),
    )
