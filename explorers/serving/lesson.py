"""The Serving lab's lesson: the page's sentences, the why-panel and the prediction, built only from a comparison.

Every sentence about this run reads the comparison it is given, and a sentence about a stage, a
shift or a mismatch appears only when the comparison shows it. What the lab says about PyTorch in
general is in STATEMENTS, each with its scope and source, and tested on the adversarial zoo
(tests/claims/test_serving.py). The checklist lives in `actions`, the answer card in `card`.
"""

from __future__ import annotations

from explorers.serving.actions import and_list, flagged, largest_drift, number, own_difference, psi_grade
from explorers.serving.drift import PSI_FLAG
from explorers.serving.experiment import Comparison
from explorers.serving.pipeline import STAGES, Mismatch
from explorers.statements import Statement
from explorers.units import percent

STATEMENTS: dict[str, Statement] = {
    "state_dict": Statement(
        text=(
            "A checkpoint saved from `model.state_dict()` holds the parameters and the persistent buffers "
            "(BatchNorm's running mean and variance among them); loading it with `load_state_dict`'s default "
            "`assign=False` copies those values into the model the serving code built, which keeps its own dtype and "
            "train/eval mode"
        ),
        scope=(
            "load_state_dict with its default assign=False (assign=True puts the checkpoint's own tensors, dtype "
            "included, into the model); buffers registered with persistent=False are left out"
        ),
        source="torch/nn/modules/module.py: Module.state_dict, Module.load_state_dict",
    ),
}

# --- Sentences the page shows around its controls and tables ---------------------------------------

SHIFT_HELP = "Moves the mean of monthly charges and support calls by this many training standard deviations."
TAKE_THE_CHECK = "Take the check to your own service: replay these inputs and compare every stage with these outputs."


def mismatch_help(mismatch: Mismatch) -> str:
    return f"{mismatch.what} It enters at {mismatch.stage}."


def mismatch_details(mismatch: Mismatch) -> str:
    return f"**{mismatch.title}** (enters at {mismatch.stage}): {mismatch.what}\n```python\n{mismatch.code}\n```"


def golden_verdict(c: Comparison) -> tuple[bool, str]:
    """(clean, the one-line verdict above the metrics)."""
    if c.first_divergent_stage is None:
        return True, f"**Golden set:** all {c.golden_size} requests match the recorded outputs at every stage."
    return False, f"**Golden set:** the first stage that differs is **{c.first_divergent_stage}**."


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
                f"`{stage}` differs by up to {number(report.largest)} because its input does: fed the "
                f"recorded input, {own_difference(report)}."
            )
        elif report.status == "not reached":
            lines.append(
                f"`{stage}` did not run: the stage before it raised; fed the recorded input, {own_difference(report)}."
            )
        elif report.status == "differs here" and stage != c.first_divergent_stage:
            lines.append(
                f"`{stage}` also differs on its own: fed the recorded input, {own_difference(report)}"
                + (f", and {report.isolated_flipped} golden labels flip." if report.isolated_flipped else ".")
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
            f"Drift (PSI over {_bins(c)}; flagged at {PSI_FLAG:g}): "
            + and_list([f"`{d.feature}` **{d.psi:.2f}** (mean {_moved(d)})" for d in moved])
            + _rest(c)
        )
    return f"Drift: no feature flagged; the largest PSI is {top.psi:.3f} (`{top.feature}`), {psi_grade(top.psi)}."


def _bins(c: Comparison) -> str:
    """The bins PSI used, from the artefact: the training deciles, fewer for a feature whose deciles coincide."""
    counts = {b.feature: len(b.edges) + 1 for b in c.artefact.feature_bins}
    most = max(counts.values())
    fewer = [f"{n} for `{feature}`" for feature, n in counts.items() if n < most]
    if not fewer:
        return f"{most} bins cut at the training deciles"
    return f"{most} bins cut at the training deciles, {and_list(fewer)}, whose deciles coincide"


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
            f"{100 * mismatch_cost:.1f} more. The golden set tells them apart: it replays recorded inputs, which the "
            "shift does not reach."
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


# --- The prediction --------------------------------------------------------------------------------


PREDICT_QUESTION = (
    "Live accuracy can fall because of a serving bug or because the traffic shifted. Which check tells the two apart?"
)
PREDICT_CHOICES = ("Live accuracy", "Input drift (PSI)", "Replaying the golden set")
PREDICT_ANSWER = "Replaying the golden set"


def evidence(c: Comparison) -> str:
    """This run in one sentence, from the fields the page shows: the golden verdict, drift, the three accuracies."""
    if c.first_divergent_stage is None:
        golden = f"golden set matched exactly at every stage ({c.golden_size} requests)"
    else:
        report = c.reports[c.first_divergent_stage]
        what = (
            f"raised {report.error.split(':')[0]}" if report.error else f"largest difference {number(report.largest)}"
        )
        golden = f"golden set first differs at {c.first_divergent_stage} ({what})"
    moved = flagged(c)
    top = largest_drift(c)
    drift = (
        "drift flags " + and_list([f"`{d.feature}` (PSI {d.psi:.2f})" for d in moved])
        if moved
        else f"drift flags nothing (largest PSI {top.psi:.3f}, {psi_grade(top.psi)})"
    )
    return (
        f"This run: {golden}; {drift}; live accuracy {percent(c.serving_accuracy)} served, "
        f"{percent(c.reference_accuracy)} for the recorded pipeline, {percent(c.validation_accuracy)} at validation."
    )


def predict_evidence(c: Comparison) -> str:
    return (
        f"{evidence(c)} Live accuracy moves with a shift and with a bug, and drift reads the inputs alone; the "
        "golden replay feeds recorded inputs, so traffic does not reach it and a difference there comes from the "
        "serving pipeline."
    )
