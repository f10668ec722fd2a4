"""The Serving lab's checklist: the next action to take, generated from a comparison, earliest stage first.

An item appears for a stage that differs on its own (fed the recorded input, it still differs),
and one more says what the traffic did (drift graded by PSI, and the accuracy it cost). A
mismatch's item quotes that mismatch replayed alone (`Comparison.solo`), so with several at one
stage each gets its own number. Also the number formatting every sentence of the lab shares.
"""

from __future__ import annotations

import math

from explorers.serving.data import TRAINING_SIZE
from explorers.serving.drift import PSI_FLAG, PSI_MODERATE
from explorers.serving.experiment import TOLERANCE, Comparison
from explorers.serving.pipeline import STAGES
from explorers.units import percent


def number(x: float) -> str:
    """A difference for people: '0' when exact, 3 significant figures otherwise, 'no output' for inf."""
    if x == 0:
        return "0"
    if math.isinf(x):
        return "no output"
    return f"{x:.3g}"


def _sentence(clause: str) -> str:
    return clause[0].upper() + clause[1:] + "."


def _names(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def swapped_features(c: Comparison) -> list[tuple[int, str, str]]:
    """(position, recorded name, serving name) wherever the serving vector puts another feature."""
    return [
        (i, recorded, served)
        for i, (recorded, served) in enumerate(zip(c.recorded.features, c.serving.features, strict=True))
        if recorded != served
    ]


def differing_columns(c: Comparison) -> list[int]:
    return [i for i, d in enumerate(c.reports["preprocess"].columns) if d > TOLERANCE]


def flagged(c: Comparison) -> list:
    return sorted((d for d in c.drift.values() if d.flagged), key=lambda d: -d.psi)


def largest_drift(c: Comparison):
    return max(c.drift.values(), key=lambda d: d.psi)


def psi_grade(psi: float) -> str:
    """The usual reading of a PSI value (see `drift`)."""
    if psi >= PSI_FLAG:
        return f"a significant shift, past the {PSI_FLAG:g} flag"
    if psi >= PSI_MODERATE:
        return f"a moderate shift, under the {PSI_FLAG:g} flag"
    return "no meaningful shift"


def points(x: float) -> str:
    """An accuracy difference in percentage points, signed: '-1.2 points'."""
    return f"{100 * x:+.1f} points"


def own_difference(report) -> str:
    """What a stage did fed the recorded input for it: raised, differed, or matched; never 'by up to no output'."""
    if report.isolated_error:
        return f"it raised *{report.isolated_error}*"
    if report.isolated_matches:
        return f"it matches (largest difference {number(report.isolated)})"
    return f"it differs by up to {number(report.isolated)}"


# --- The checklist: the next actions, earliest stage first ----------------------------------------


def _preprocess_items(c: Comparison) -> list[str]:
    report = c.reports["preprocess"]
    items = []
    swaps = swapped_features(c)
    if swaps and "feature_order" in c.solo:
        alone = c.solo["feature_order"]
        positions = " and ".join(str(i + 1) for i, *_ in swaps)
        names = [served for _, _, served in swaps]
        pairs = (
            f"`{names[1]}` ↔ `{names[0]}`"
            if len(swaps) == 2 and swaps[0][1] == swaps[1][2]
            else and_list([f"`{served}` where training put `{recorded}`" for _, recorded, served in swaps])
        )
        columns = and_list([f"{number(alone.columns[i])} in column {i + 1}" for i, *_ in swaps])
        items.append(
            f"**Preprocessing differs from training: features {positions} are swapped** ({pairs}). On the golden "
            f"set, with this swap alone, the model input differs by up to {columns}. Build the vector in the "
            f"recorded order: {_names(c.recorded.features)}."
        )
    if c.serving.means is None and c.recorded.means is not None and "normalization" in c.solo:
        columns = c.solo["normalization"].columns
        worst = max(range(len(columns)), key=lambda i: columns[i])
        items.append(
            f"**Preprocessing skips normalisation:** the model receives raw values where training fed standardised "
            f"ones; with this alone, column {worst + 1} (`{c.recorded.features[worst]}`) differs by up to "
            f"{number(columns[worst])}. "
            "Apply the recorded means and standard deviations (in the pipeline JSON below)."
        )
    if not items:
        columns = and_list([str(i + 1) for i in differing_columns(c)])
        items.append(
            f"**Preprocessing differs from training in columns {columns}** (largest difference "
            f"{number(report.largest)}): compare the feature code with the recorded pipeline."
        )
    return items


def _alone(c: Comparison, name: str) -> str:
    """What one model-stage mismatch does on its own, fed the recorded model inputs."""
    report = c.solo[name]
    if report.isolated_error:
        return f"alone, it makes PyTorch raise *{report.isolated_error}*"
    return f"alone, fed the recorded model inputs, it moves the logits by up to {number(report.isolated)}"


def _model_items(c: Comparison) -> list[str]:
    items = []
    if "batch_of_one" in c.solo:
        failed = c.requests - c.answered
        served = f"; the service failed {failed:,} of {c.requests:,} live requests" if failed else ""
        if c.serving.mode != "eval":
            fix = (
                "Call `model.eval()`: BatchNorm then uses its running statistics and a batch of one runs; measured "
                "here in eval mode, the golden requests served one at a time differ from the same requests served "
                f"as one batch by up to {number(c.one_at_a_time_difference)}."
            )
        else:
            fix = "Batch requests as recorded."
        alone = _alone(c, "batch_of_one")
        items.append(f"**Requests run one at a time with BatchNorm in train mode:** {alone}{served}. {fix}")
    if "dtype" in c.solo:
        tolerance = "" if c.solo["dtype"].isolated_error else f" (tolerance {TOLERANCE:g})"
        items.append(
            f"**The model runs in {c.serving.dtype}; training recorded {c.recorded.dtype}:** "
            f"{_alone(c, 'dtype')}{tolerance}. Serve in {c.recorded.dtype}, or adopt {c.serving.dtype} on purpose "
            "and record golden outputs and a tolerance for it."
        )
    if "train_mode" in c.solo:
        items.append(
            "**The model is in train mode:** dropout drops units and BatchNorm normalises with each batch's "
            f"statistics; {_alone(c, 'train_mode')}. Call `model.eval()` after loading the checkpoint."
        )
    if "missing_keys" in c.solo:
        refusal = f", which refuses this checkpoint: *{c.strict_error}*" if c.strict_error else ""
        items.append(
            f"**The checkpoint loaded with strict=False:** missing {_names(c.missing_keys) or 'none'} (these kept "
            f"their random initialisation), unexpected {_names(c.unexpected_keys) or 'none'} (ignored); "
            f"{_alone(c, 'missing_keys')}. Load with `strict=True`{refusal}; then fix the layer's name."
        )
    if not items:
        report = c.reports["model"]
        items.append(
            f"**The model stage differs on its own:** fed the recorded model inputs, {own_difference(report)}. "
            "Compare how serving builds and loads it."
        )
    return items


def _postprocess_items(c: Comparison) -> list[str]:
    report = c.reports["postprocess"]
    items = []
    golden = c.golden_size
    if "threshold" in c.solo:
        alone = c.solo["threshold"]
        flipped = f"with this alone, {alone.flipped} of {golden} golden labels flip"
        items.append(
            f"**Postprocessing differs from training:** serving thresholds the raw churn logit at "
            f"{c.serving.threshold:g} instead of the softmax probability; {flipped}. Apply "
            f"{c.recorded.postprocess} before the threshold {c.recorded.threshold:g}."
        )
    if c.serving.threshold != c.recorded.threshold:
        items.append(
            f"**The decision threshold is {c.serving.threshold:g}; training recorded {c.recorded.threshold:g}.**"
        )
    if not items:
        items.append(f"**Postprocessing differs on its own:** fed the recorded logits, {own_difference(report)}.")
    return items


STAGE_ITEMS = {"preprocess": _preprocess_items, "model": _model_items, "postprocess": _postprocess_items}


def checklist(c: Comparison) -> list[str]:
    """The next actions, earliest stage first, each a sentence with this run's numbers."""
    items = []
    for stage in STAGES:
        report = c.reports[stage]
        if report.matches or (report.reached and report.isolated_matches):
            continue
        if not report.reached and report.isolated_matches:
            continue  # never ran, and fed the recorded input it matches: nothing to fix here
        items += STAGE_ITEMS[stage](c)
    inherited = [s for s in STAGES if c.reports[s].status == "inherited"]
    if inherited and items:
        items.append(
            f"Then replay the golden set again: {and_list([f'`{s}`' for s in inherited])} "
            f"{'inherits' if len(inherited) == 1 else 'inherit'} the earlier difference (fed the recorded "
            f"input, largest difference {and_list([number(c.reports[s].isolated) for s in inherited])}), so "
            f"{'it' if len(inherited) == 1 else 'they'} will match once the earlier stage does."
        )
    items += _drift_items(c)
    return items


def _accuracy_change(c: Comparison) -> str:
    return (
        f"the recorded pipeline scores {percent(c.reference_accuracy)} on this traffic against "
        f"{percent(c.validation_accuracy)} at validation ({points(c.reference_accuracy - c.validation_accuracy)})"
    )


def retraining(c: Comparison) -> str:
    """What retraining won back on this traffic and what it cannot, measured; empty when nothing was retrained."""
    if c.retrained_accuracy is None:
        return ""
    fell = c.unshifted_bayes_accuracy - c.bayes_accuracy
    lost = (
        f": those {100 * fell:.1f} points went to the traffic becoming harder to predict, and retraining does not "
        "win them back"
        if fell > 0
        else ""
    )
    return (
        f"Measured on this traffic: a model retrained on {TRAINING_SIZE:,} records drawn at this shift scores "
        f"{percent(c.retrained_accuracy)} (the recorded pipeline: {percent(c.reference_accuracy)}). The rule the "
        f"data were generated with, the best any model can learn, scores {percent(c.bayes_accuracy)}, against "
        f"{percent(c.unshifted_bayes_accuracy)} on the same customers without the shift{lost}."
    )


def _drift_items(c: Comparison) -> list[str]:
    moved = flagged(c)
    clean = c.first_divergent_stage is None
    if moved:
        features = and_list([f"`{d.feature}` (PSI {d.psi:.2f})" for d in moved])
        if clean:
            return [
                f"**Live inputs moved:** {features} past {PSI_FLAG:g}, and the golden set matches, so the service "
                f"follows the recorded contract and the data changed: {_accuracy_change(c)}. "
                + (retraining(c) or "Collect labelled recent traffic and measure a retrained model against it.")
            ]
        return [
            f"**Live inputs also moved:** {features} past {PSI_FLAG:g}. Fix the serving mismatch first, then judge "
            f"the shift on its own: {_accuracy_change(c)}."
        ]
    if clean:
        top = largest_drift(c)
        return [
            f"**No serving mismatch:** every stage matches the recorded outputs. Largest PSI {top.psi:.3f} "
            f"(`{top.feature}`): {psi_grade(top.psi)}; {_accuracy_change(c)}. "
            + (f"{retraining(c)} " if c.retrained_accuracy is not None else "")
            + "Keep the golden replay as a deployment test, and keep watching drift and live accuracy."
        ]
    return []
