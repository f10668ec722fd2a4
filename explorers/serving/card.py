"""The Serving lab's answer card: "Why does a model that trained well fail in production?", with this run as evidence.

The evidence is `lesson.evidence`, the sentence the prediction reveals too, so the card and the page
quote the same fields; the mechanism quotes the lab's Statement about what a checkpoint holds.
"""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.serving.actions import checklist
from explorers.serving.experiment import TOLERANCE, Comparison
from explorers.serving.lesson import STATEMENTS, evidence
from explorers.units import percent

QUESTION = "Why does a model that trained well fail in production?"


def answer_card(c: Comparison) -> AnswerCard:
    items = checklist(c)
    return AnswerCard(
        question=QUESTION,
        requirement=(
            f"Serving must reproduce training's input-to-output contract: the same {c.golden_size} golden requests "
            f"give the same model inputs, logits and labels (within {TOLERANCE:g}), and live accuracy stays near "
            f"validation ({percent(c.validation_accuracy)}). Assumed: labels for live traffic arrive later; out of "
            "scope: latency and scaling."
        ),
        mechanism=(
            "A prediction is a chain: preprocess (feature order, normalisation statistics) → model (weights and "
            "buffers loaded from the checkpoint, dtype, train/eval mode, batch) → postprocess (softmax, threshold). "
            f"{STATEMENTS['state_dict'].text}; the feature code, the dtype, the mode and the postprocessing are code "
            "that training and serving must share. A golden set with each stage's recorded output finds the first "
            "link that breaks; a drift statistic compares input distributions and needs no labels."
        ),
        evidence=evidence(c),
        recovery=items[0].replace("**", ""),
        trade_off=(
            "Exact equality is the right bar when training and serving run the same stack; a service that changes "
            "dtype (float16, quantisation) or hardware on purpose needs its own recorded golden outputs and a "
            "tolerance, or the check fails on every deploy and gets ignored."
        ),
        could_prove_wrong=(
            "Replay the golden set through the live service: if every stage matches and live accuracy still falls, "
            "the serving code is ruled out for these requests and the traffic is the suspect, which a model "
            "retrained on recent labelled traffic can confirm; if a stage differs, retraining leaves that difference "
            "in place."
        ),
    )
