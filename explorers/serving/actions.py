"""The Serving lab's checklist: the next action to take, generated from a comparison, earliest stage first.

An item appears only for a stage that differs on its own (fed the recorded input, it still
differs), or for drift that was flagged; it names what the serving contract does differently from
the recorded one (the contract each side ran) and quotes the golden set's numbers. Also the
number formatting every sentence of the lab shares.
"""

from __future__ import annotations

import math

from explorers.serving.drift import PSI_FLAG
from explorers.serving.experiment import TOLERANCE, Comparison
from explorers.serving.pipeline import STAGES


def number(x: float) -> str:
    """A difference for people: '0' when exact, 3 significant figures otherwise, 'no output' for inf."""
    if x == 0:
        return "0"
    if math.isinf(x):
        return "no output"
    return f"{x:.3g}"


def percent(x: float) -> str:
    return f"{100 * x:.1f}%"


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


# --- The checklist: the next actions, earliest stage first ----------------------------------------


def _preprocess_items(c: Comparison) -> list[str]:
    report = c.reports["preprocess"]
    items = []
    swaps = swapped_features(c)
    if swaps:
        positions = " and ".join(str(i + 1) for i, *_ in swaps)
        names = [served for _, _, served in swaps]
        pairs = (
            f"`{names[1]}` ↔ `{names[0]}`"
            if len(swaps) == 2 and swaps[0][1] == swaps[1][2]
            else and_list([f"`{served}` where training put `{recorded}`" for _, recorded, served in swaps])
        )
        columns = and_list([f"{number(report.columns[i])} in column {i + 1}" for i, *_ in swaps])
        items.append(
            f"**Preprocessing differs from training: features {positions} are swapped** ({pairs}). On the golden "
            f"set the model input differs by up to {columns}. Build the vector in the recorded order: "
            f"{_names(c.recorded.features)}."
        )
    if c.serving.means is None and c.recorded.means is not None:
        worst = max(range(len(report.columns)), key=lambda i: report.columns[i])
        items.append(
            f"**Preprocessing skips normalisation:** the model receives raw values where training fed standardised "
            f"ones; column {worst + 1} (`{c.serving.features[worst]}`) differs by up to "
            f"{number(report.columns[worst])}. "
            "Apply the recorded means and standard deviations (in the pipeline JSON below)."
        )
    if not items:
        columns = and_list([str(i + 1) for i in differing_columns(c)])
        items.append(
            f"**Preprocessing differs from training in columns {columns}** (largest difference "
            f"{number(report.largest)}): compare the feature code with the recorded pipeline."
        )
    return items


def _model_items(c: Comparison) -> list[str]:
    report = c.reports["model"]
    raised = report.error or report.isolated_error
    if raised:  # nothing else about the model can be measured until it runs
        alone = "not measurable until the model runs"
    else:
        alone = f"fed the recorded model inputs, its logits differ by up to {number(report.isolated)}"
    items = []
    if c.serving.requests_per_forward != c.recorded.requests_per_forward:
        failed = c.requests - c.answered
        what = (
            f"PyTorch raised *{raised}* for every golden request and failed {failed:,} of {c.requests:,} live ones"
            if raised
            else f"{alone}"
        )
        fix = (
            "Call `model.eval()`: BatchNorm then uses its running statistics, so a batch of one works and gives "
            "the same answer as in a batch."
            if c.serving.mode != "eval"
            else "Batch requests as recorded."
        )
        bn = "BatchNorm in train mode" if c.serving.mode != "eval" else "this model"
        items.append(f"**Requests run one at a time with {bn}:** {what}. {fix}")
    if c.serving.dtype != c.recorded.dtype:
        tolerance = "" if raised else f" (tolerance {TOLERANCE:g})"
        items.append(
            f"**The model runs in {c.serving.dtype}; training recorded {c.recorded.dtype}:** {alone}{tolerance}. "
            f"Serve in {c.recorded.dtype}, or adopt {c.serving.dtype} on purpose and record golden outputs and a "
            "tolerance for it."
        )
    if c.serving.mode == "train":
        items.append(
            "**The model is in train mode:** dropout drops units and BatchNorm normalises with each batch's "
            f"statistics; {alone}. Call `model.eval()` after loading the checkpoint."
        )
    if c.missing_keys or c.unexpected_keys:
        refusal = f", which refuses this checkpoint: *{c.strict_error}*" if c.strict_error else ""
        items.append(
            f"**The checkpoint loaded with strict=False:** missing {_names(c.missing_keys) or 'none'} (these kept "
            f"their random initialisation), unexpected {_names(c.unexpected_keys) or 'none'} (ignored); {alone}. "
            f"Load with `strict=True`{refusal}; then fix the layer's name."
        )
    if not items:
        items.append(f"**The model stage differs on its own:** {alone}. Compare how serving builds and loads it.")
    return items


def _postprocess_items(c: Comparison) -> list[str]:
    report = c.reports["postprocess"]
    items = []
    golden = c.golden_size
    flips = report.flipped if report.reached else None
    if c.serving.postprocess != c.recorded.postprocess:
        flipped = (
            f"{flips} of {golden} golden labels flip"
            if flips is not None
            else f"fed the recorded logits, scores differ by up to {number(report.isolated)}"
        )
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
        items.append(f"**Postprocessing differs on its own** by up to {number(report.isolated)}.")
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
            f"Then replay the golden set again: {and_list([f'`{s}`' for s in inherited])} only "
            f"{'inherits' if len(inherited) == 1 else 'inherit'} the earlier difference (fed the recorded "
            f"input, largest difference {and_list([number(c.reports[s].isolated) for s in inherited])}), so "
            f"{'it' if len(inherited) == 1 else 'they'} will match once the earlier stage does."
        )
    items += _drift_items(c)
    return items


def _drift_items(c: Comparison) -> list[str]:
    moved = flagged(c)
    clean = c.first_divergent_stage is None
    if moved:
        features = and_list([f"`{d.feature}` (PSI {d.psi:.2f})" for d in moved])
        if clean:
            return [
                f"**Live inputs moved:** {features} past {PSI_FLAG:g}, and the golden set matches, so the service is "
                f"faithful and the data changed: the recorded pipeline itself scores "
                f"{percent(c.reference_accuracy)} on this traffic against {percent(c.validation_accuracy)} at "
                "validation. Collect labelled recent traffic, then retrain or recalibrate; no code fix will help."
            ]
        return [
            f"**Live inputs also moved:** {features} past {PSI_FLAG:g}. Fix the serving mismatch first, then judge "
            f"the shift on its own: the recorded pipeline scores {percent(c.reference_accuracy)} on this traffic "
            f"against {percent(c.validation_accuracy)} at validation."
        ]
    if clean:
        top = largest_drift(c)
        return [
            f"**Nothing to fix:** every stage matches the recorded outputs and no feature drifts (largest PSI "
            f"{top.psi:.3f}, `{top.feature}`). Keep the golden replay as a deployment test and keep watching drift."
        ]
    return []
