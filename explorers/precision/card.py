"""The precision lab's answer card: "you are out of memory: would mixed precision help, and what can go wrong?"."""

from __future__ import annotations

import explorers.precision.lesson as lesson
from explorers.cards import AnswerCard
from explorers.precision.experiment import PrecisionResult

QUESTION = "Training runs out of memory or is slow: would mixed precision help, and what can go wrong with it?"


def _scale_fell(run) -> bool:
    return bool(run.scales) and run.scales[-1][1] < run.scales[0][0]


def answer_card(result: PrecisionResult) -> AnswerCard:
    scaled = result.run("fp16 + GradScaler")
    evidence = [lesson.loss_sentence(result)]
    for run in result.runs.values():
        evidence += lesson.run_sentences(run)
    evidence += lesson.scaler_sentences(scaled) + [lesson.bf16_sentence(result)]
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "The same model trained to the same loss in less memory and time; no step lost to overflow, no "
            "gradient lost to underflow. Assumed: a CPU here; the same autocast and GradScaler calls on a GPU, whose "
            "autocast op lists differ from the CPU's (CUDA's float32 list holds layer_norm, for one)."
        ),
        mechanism=" ".join(lesson.STATEMENTS[k].text for k in ("autocast", "formats", "scaler")),
        evidence="On this run: " + " ".join(evidence),
        recovery=(
            "Prefer bf16 autocast where the hardware has it; with fp16, use GradScaler, step the scheduler after a "
            "step that ran (or accept the warning), and watch the scale. "
            + lesson.STATEMENTS["fp16_loss_outside_autocast"].text
            + " "
            + (lesson.falling_scale_sentence(scaled) if _scale_fell(scaled) else "")
        ).strip(),
        trade_off=(
            "Lower precision halves activation bytes and speeds matmuls on hardware built for it, at the cost "
            "of precision (bf16: 8 bits) or range (fp16: 65504); GradScaler buys range back for the gradients, "
            "not for the activations."
        ),
        could_prove_wrong=(
            "If the mixed-precision loss curve left fp32's on the same weights and batches, or the scaler "
            "skipped step after step, mixed precision would be costing this model accuracy, not memory alone."
        ),
    )
