"""The slow-step lab's answer card: "how would you debug a slow training step?", answered from this run."""

from __future__ import annotations

import explorers.slowstep.catalogue as catalogue
import explorers.slowstep.lesson as lesson
from explorers.cards import AnswerCard
from explorers.slowstep.measure import EvidenceRun
from explorers.units import ms

QUESTION = "How would you debug a slow PyTorch training step?"


def answer_card(run: EvidenceRun) -> AnswerCard:
    drill = catalogue.DRILLS[run.drill]
    extra, noise = run.extra_ms()
    where = " and ".join(run.answer_phases) or "no phase beyond the noise"
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "Find what makes the step slow from a trace and a hypothesis, not a list of random flags; keep the "
            "training result the same. Assumed: steady-state steps after warm-up; out of scope: accuracy."
        ),
        mechanism=lesson.why(run.drill),
        evidence=(
            f"The median step took {ms(run.blocks.typical('slow'))} ms against {ms(run.blocks.typical('other'))} ms "
            f"for the correct loop on the same seed and data; paired step by step it took {ms(extra)} ± "
            f"{ms(noise)} ms more (the median difference), and the extra time was in {where}."
        ),
        recovery=f"{catalogue.FIXES[drill.fix].label}: `{catalogue.FIXES[drill.fix].code}`.",
        trade_off=(
            "A fix for one bottleneck moves it: once the slow part is gone the next phase leads, so profile again "
            "before the next change."
        ),
        could_prove_wrong=(
            "The same measurement with the fix applied showing a gain inside the noise, or the losses changing: "
            "then the fix was not the bottleneck's, or it changed training."
        ),
    )
