"""The Gradients lab's answer card: "Why is a gradient None, zero, vanishing or exploding?", with this run's numbers.

The evidence quotes the same result fields the page shows: the verdict and status counts of the
diagnosis, the first/last layer ratio, the sweep's first line and the clipping before and after.
"""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.gradients.clipping import Clipping
from explorers.gradients.experiment import BATCH, ScaleSweep, ScenarioRun
from explorers.gradients.lesson import (
    QUESTION,
    STATEMENTS,
    balance_kept,
    depth_ratio,
    ratio_layers,
    scenario_text,
    status_line,
    step_factor,
    sweep_lines,
)
from explorers.units import sci

# The activation whose derivative bound the "vanishing" Statement states; advice to replace it rests on that bound.
SATURATING = ("Sigmoid",)
# The activations the "homogeneous" and "critical_gain" Statements hold for (the lab's stacks start with zero
# biases), each with its critical gain as written and as a number.
HOMOGENEOUS = {"ReLU": ("√2", 2**0.5), "Identity": ("1", 1.0)}

_RECOVERIES = {
    "broken_graph": "Remove the detach/no_grad on the training path; replace a hard argmax with a differentiable "
    "relaxation (softmax, Gumbel-softmax, a straight-through estimator).",
    "none_returned": "Make the backward of the node named return a gradient for every input that needs one "
    "(a custom autograd.Function's backward returns one value per forward input).",
    "unused": "Delete the parameter or wire it into forward; DDP with find_unused_parameters=False raises on it.",
    "frozen": "Keep it frozen if fine-tuning is intended and leave it out of the optimizer; else requires_grad_(True).",
    "backward_error": "Make the op out of place (h = h * mask, torch.where) or clone before changing; "
    "torch.autograd.set_detect_anomaly(True) names the forward op.",
    "dead_units": "Lower the learning rate, use He initialisation and small positive biases, or LeakyReLU/GELU.",
    "zero_gradient": "Find the multiply-by-zero on the path (mask, saturation) for this batch.",
    "vanishing": "Scale the initialisation to the activation (Xavier for tanh/sigmoid, He for ReLU), use "
    "normalisation layers or residual connections.",
    "exploding": "Fix the initial scale, add normalisation, lower the learning rate; keep clip_grad_norm_ as a guard, "
    "not the fix.",
    "nonfinite": "Find the first op producing inf/nan (anomaly mode), then lower the learning rate or fix the scale.",
}


def _mechanism(kind: str, run: ScenarioRun) -> str:
    """The Statement behind a finding. For vanishing and exploding: the chain rule and this run's measured
    per-layer factor, the growth statement only where that factor grows toward the input, and the statements on
    homogeneous stacks only where every activation is in their scope."""
    if kind not in ("vanishing", "exploding"):
        return STATEMENTS[kind].text
    text = STATEMENTS["chain"].text
    factor = step_factor(run.diagnosis)
    if factor is not None:
        text += f" Measured here: {factor}."
    ratio = depth_ratio(run.diagnosis)
    if kind == "exploding" and ratio is not None and ratio[0] > 1:
        text += " " + STATEMENTS["exploding"].text
    if kind == "vanishing" and "Sigmoid" in run.activations:
        text += " " + STATEMENTS["vanishing"].text
    if run.activations and all(name in HOMOGENEOUS for name in run.activations):
        gain, value = HOMOGENEOUS["ReLU" if "ReLU" in run.activations else "Identity"]
        side = "above" if run.options.init_scale > value else "not above"
        text += (
            f" {STATEMENTS['homogeneous'].text} {STATEMENTS['critical_gain'].text} This stack was drawn at "
            f"s = {run.options.init_scale:g}, {side} {gain}."
        )
    return text


def answer_card(run: ScenarioRun, sweep: ScaleSweep | None = None, clipping: Clipping | None = None) -> AnswerCard:
    """The four-part answer (requirement, mechanism, evidence, recovery) for this run; evidence quotes its numbers."""
    diagnosis = run.diagnosis
    kinds = list(dict.fromkeys(diagnosis.kinds))
    requirement = (
        f"Every trainable parameter should get a finite, useful gradient from one small reproducible batch "
        f"(here {scenario_text(run.options).title!r}: a batch of {BATCH}, mean-squared-error loss, seed "
        f"{run.options.seed}). "
        "Assumed: the model and batch are representative; out of scope: optimizer state and learning-rate schedules."
    )
    if run.accumulation is not None:
        mechanism = STATEMENTS["accumulates"].text + " Without zero_grad each step sums every batch so far."
    elif diagnosis.findings:
        mechanism = " ".join(_mechanism(kind, run) for kind in kinds if kind in STATEMENTS or kind == "vanishing")
    else:
        mechanism = (
            "Backward reached every trainable parameter, and no layer's gradient norm crossed the lab's vanishing "
            "or exploding thresholds."
        )
    evidence = [f"Verdict: {diagnosis.verdict}.", status_line(diagnosis)]
    ratio = depth_ratio(diagnosis)
    if ratio is not None:
        evidence.append(f"First/last layer weight gradient norm: {sci(ratio[0])} (`{ratio[1]}` vs `{ratio[2]}`).")
    if diagnosis.backward_error:
        evidence.append(f"PyTorch: *{diagnosis.backward_error.splitlines()[0]}*")
    if run.accumulation is not None:
        evidence.append(
            f"‖.grad‖ after {run.accumulation.k} batches without zero_grad: "
            f"{run.accumulation.growth[-1]:.2f}× the first batch's."
        )
    if sweep is not None:
        evidence += sweep_lines(sweep)[:1]
    if clipping is not None and clipping.clipped and balance_kept(clipping) is not None:
        evidence.append(
            f"Clipping at {clipping.max_norm:g}: total norm {sci(clipping.total_before)} → "
            f"{sci(clipping.total_after)}, "
            f"first/last layer weight gradient norm ({ratio_layers(clipping)}) {sci(clipping.imbalance_before)} → "
            f"{sci(clipping.imbalance_after)}."
        )
    if run.accumulation is not None:
        recovery = (
            "Call optimizer.zero_grad(set_to_none=True) once per optimizer step; accumulate on purpose, "
            "dividing the loss by the number of micro-batches."
        )
    elif diagnosis.findings:
        recovery = " ".join(_RECOVERIES[kind] for kind in kinds if kind in _RECOVERIES)
        saturating = [name for name in run.activations if name in SATURATING]
        if "vanishing" in kinds and saturating:  # activation advice only with a Sigmoid in the model
            recovery += f" Try a ReLU-family activation in place of {', '.join(saturating)}."
    else:
        recovery = "Nothing to fix; keep the check as a test on one fixed batch so a regression shows at once."
    return AnswerCard(
        question=QUESTION,
        requirement=requirement,
        mechanism=mechanism,
        evidence=" ".join(evidence),
        recovery=recovery,
        trade_off=(
            "Clipping can keep training going while the source of large gradients is found, at the price of hiding "
            "it: a run that trains with clipping and diverges without it has a scale or architecture problem left."
        ),
        could_prove_wrong=(
            "The scale sweep reruns at half and twice the initial scale: a `.grad` of None that became a number "
            "there would refute the missing-path reading; a first-layer norm that did not move would refute the "
            "scale reading."
        ),
    )
