"""The Serving lab's lesson: the why-panel, the answer card and the prediction, built only from a comparison.

Every sentence reads the comparison it is given, and a sentence about a stage, a shift or a
mismatch appears only when the comparison shows it. The checklist lives in `checklist`.
"""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.serving.actions import and_list, checklist, flagged, largest_drift, number, percent
from explorers.serving.drift import PSI_FLAG, PSI_MODERATE
from explorers.serving.experiment import TOLERANCE, Comparison
from explorers.serving.pipeline import STAGES

QUESTION = "Why does a model that trained well fail in production?"


# --- The why-panel ---------------------------------------------------------------------------------


def golden_line(c: Comparison) -> str:
    golden = c.artefact.golden
    near = sum(golden.near_threshold)
    start = (
        f"The golden set ({len(golden)} recorded requests, {near} of them nearest the {c.recorded.threshold:g} "
        "threshold) went through the serving pipeline"
    )
    if c.first_divergent_stage is None:
        return (
            f"{start}: every stage reproduced the outputs training recorded **exactly** (largest difference 0), "
            "after the checkpoint's round trip through `torch.save` and `torch.load(weights_only=True)`."
        )
    report = c.reports[c.first_divergent_stage]
    what = f"it raised *{report.error}*" if report.error else f"largest difference **{number(report.largest)}**"
    return f"{start}: the first stage to differ is **{c.first_divergent_stage}** ({what})."


def stage_lines(c: Comparison) -> list[str]:
    lines = []
    for stage in STAGES:
        report = c.reports[stage]
        if report.status == "inherited":
            lines.append(
                f"`{stage}` differs by up to {number(report.largest)} only because its input does: fed the "
                f"recorded input, it matches (largest difference {number(report.isolated)})."
            )
        elif report.status == "not reached":
            own = (
                f"fed the recorded input it differs on its own too (by up to {number(report.isolated)})"
                if not report.isolated_matches
                else "fed the recorded input it matches"
            )
            lines.append(f"`{stage}` never ran: the stage before it raised; {own}.")
        elif report.status == "differs here" and stage != c.first_divergent_stage:
            lines.append(
                f"`{stage}` also differs on its own: fed the recorded input, by up to {number(report.isolated)}"
                + (f", and {report.flipped} golden labels flip." if report.flipped else ".")
            )
    return lines


def accuracy_line(c: Comparison) -> str:
    line = (
        f"On {c.requests:,} live requests the recorded pipeline scores **{percent(c.reference_accuracy)}** and the "
        f"serving pipeline **{percent(c.serving_accuracy)}** (validation at training: "
        f"{percent(c.validation_accuracy)}; {percent(c.live_churn_rate)} of these customers churn)."
    )
    if c.answered < c.requests:
        line += f" The service answered {c.answered:,} of them; the rest count as wrong."
    return line


def drift_line(c: Comparison) -> str:
    moved = flagged(c)
    top = largest_drift(c)
    if moved:
        return (
            f"Drift (PSI over the training deciles, flagged at {PSI_FLAG:g}): "
            + and_list([f"`{d.feature}` **{d.psi:.2f}** (mean {_moved(d)})" for d in moved])
            + _rest(c)
        )
    level = "no meaningful shift" if top.psi < PSI_MODERATE else f"a moderate shift, under the {PSI_FLAG:g} flag"
    return f"Drift: no feature flagged; the largest PSI is {top.psi:.3f} (`{top.feature}`), {level}."


def _moved(d) -> str:
    return f"{d.training_mean:.3g} → {d.live_mean:.3g}"


def _rest(c: Comparison) -> str:
    others = [d.psi for d in c.drift.values() if not d.flagged]
    return f"; the other features stay at or below {max(others):.3f}." if others else "."


def contrast_line(c: Comparison) -> str:
    """How this run tells shift and mismatch apart."""
    mismatch = c.first_divergent_stage is not None
    shift_cost = c.validation_accuracy - c.reference_accuracy
    mismatch_cost = c.reference_accuracy - c.serving_accuracy
    if c.options.shift > 0 and not mismatch:
        return (
            f"A pure shift of {c.options.shift:g} standard deviations: the golden set is untouched (it replays "
            f"recorded inputs), while drift and accuracy move; the faithful service lost {100 * shift_cost:.1f} "
            "points to the data, not to the code."
        )
    if mismatch and c.options.shift > 0:
        return (
            f"Two causes at once: the shift costs the recorded pipeline {100 * shift_cost:.1f} points; the mismatch "
            f"changes {c.changed_answers:,} of {c.requests:,} answers on the same traffic and costs "
            f"{100 * mismatch_cost:.1f} more. Only the golden set separates them."
        )
    if mismatch:
        return (
            f"No shift, so what separates the recorded pipeline from the serving one on the same traffic is the "
            f"mismatch alone: {c.changed_answers:,} of {c.requests:,} answers differ, "
            f"{100 * mismatch_cost:.1f} points of accuracy."
        )
    return "No mismatch and no shift: serving and the recorded pipeline agree on every live request."


def explain(c: Comparison) -> list[str]:
    return [golden_line(c), *stage_lines(c), accuracy_line(c), drift_line(c), contrast_line(c)]


# --- The answer card and the prediction --------------------------------------------------------------


def evidence(c: Comparison) -> str:
    if c.first_divergent_stage is None:
        golden = f"golden set matched exactly at every stage ({c.golden_size} requests)"
    else:
        report = c.reports[c.first_divergent_stage]
        what = (
            f"raised {report.error.split(':')[0]}" if report.error else f"largest difference {number(report.largest)}"
        )
        golden = f"golden set first differs at {c.first_divergent_stage} ({what})"
    moved = flagged(c)
    drift = (
        "drift flags " + and_list([f"`{d.feature}` (PSI {d.psi:.2f})" for d in moved])
        if moved
        else f"drift flags nothing (largest PSI {largest_drift(c).psi:.3f})"
    )
    return (
        f"This run: {golden}; {drift}; live accuracy {percent(c.serving_accuracy)} served, "
        f"{percent(c.reference_accuracy)} for the recorded pipeline, {percent(c.validation_accuracy)} at validation."
    )


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
            "A prediction is a chain: preprocess (feature order, normalisation statistics) → model (weights loaded "
            "from the checkpoint, dtype, train/eval mode, batch) → postprocess (softmax, threshold). Only the "
            "weights travel in the checkpoint; every other link is code that training and serving must share. A "
            "golden set with each stage's recorded output finds the first link that breaks; a drift statistic "
            "compares input distributions and needs no labels."
        ),
        evidence=evidence(c),
        recovery=items[0].replace("**", "") if items else "Nothing to fix.",
        trade_off=(
            "Exact equality is the right bar when training and serving run the same stack; a service that changes "
            "dtype (float16, quantisation) or hardware on purpose needs its own recorded golden outputs and a "
            "tolerance, or the check fails on every deploy and gets ignored."
        ),
        could_prove_wrong=(
            "Replay the golden set through the live service: if every stage matches and accuracy still falls, the "
            "code is not the cause and retraining on recent data is; if a stage differs, retraining will not fix it."
        ),
    )


PREDICT_QUESTION = (
    "Live accuracy can fall because of a serving bug or because the traffic shifted. Which check tells the two apart?"
)
PREDICT_CHOICES = ("Live accuracy", "Input drift (PSI)", "Replaying the golden set")
PREDICT_ANSWER = "Replaying the golden set"


def predict_evidence(c: Comparison) -> str:
    return (
        f"{evidence(c)} Accuracy moves with either cause, and drift looks at inputs only; the golden replay "
        "feeds recorded inputs, so only a difference in the serving code can move it."
    )
