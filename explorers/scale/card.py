"""The Real-scale lab's answer card: "will fine-tuning this model fit on my GPU?", with this step as evidence."""

from __future__ import annotations

import explorers.scale.lesson as lesson
from explorers.cards import AnswerCard
from explorers.scale.experiment import Plan
from explorers.scale.lesson import STATEMENTS
from explorers.scale.remedies import Remedies
from explorers.scale.search import Limits

QUESTION = "Will fine-tuning this model fit on my GPU, and what do I change if not?"


def answer_card(plan: Plan, budget_gib: int, limits: Limits | None, remedies: Remedies | None) -> AnswerCard:
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "One training step (forward, backward, optimizer step) must fit in one GPU's memory at the batch and "
            "sequence length the run needs. Assumed: the library's own model code; out of scope: the CUDA context, "
            "the allocator's fragmentation and communication buffers."
        ),
        mechanism=" ".join(
            [
                STATEMENTS["fixed_parts"].text,
                STATEMENTS["checkpointing"].text,
                STATEMENTS["zero"].text,
            ]
        ),
        evidence=_evidence(plan, budget_gib, limits, remedies),
        recovery=(
            "Out of memory: measure the remedies in the order of what they save here, checkpointing first "
            "when activations dominate, sharding when the optimizer state does; keep the global batch with "
            "gradient accumulation."
        ),
        trade_off=(
            "Checkpointing buys memory with a second forward of each block during backward; ZeRO-3 with "
            "gathering parameters over the network every step. With memory to spare, neither is needed."
        ),
        could_prove_wrong=(
            "If torch.cuda.max_memory_allocated on a real GPU step at these settings were well above the peak "
            "measured here (benchmarks/gpu_memory_check.py compares them), the fake step would not stand for it."
        ),
    )


def _evidence(plan: Plan, budget_gib: int, limits: Limits | None, remedies: Remedies | None) -> str:
    facts = [f"{lesson.setting_words(plan.options)}: {lesson.verdict(plan, budget_gib)[1]}"]
    facts.append(f"At the peak: {lesson.peak_words(plan)}.")
    sharding = lesson.sharding_words(plan)
    if sharding:
        facts.append(sharding)
    if limits is not None and limits.budget_gib == budget_gib:
        facts += [lesson.limit_words(limits.batch, budget_gib), lesson.limit_words(limits.seq, budget_gib)]
    if remedies is not None and remedies.remedies:
        best = remedies.remedies[0]
        if best.saved > 0:
            facts.append(
                f"The change that saves the most ({lesson.remedy_how(best)}): {best.name}, "
                f"{lesson.gib(best.saved)} per GPU."
            )
        else:
            facts.append("None of the changes tried lowers the peak per GPU here.")
    return " ".join(facts)
