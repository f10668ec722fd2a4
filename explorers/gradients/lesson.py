"""The Gradients lab's lesson: sentences and the answer card, built only from the measured numbers.

Every sentence here is a reading of the run it is given: a sentence about a finding appears
only when that finding was made, and its numbers are the run's own.
"""

from __future__ import annotations

import math

from explorers.cards import AnswerCard
from explorers.gradients.clipping import Clipping, Training
from explorers.gradients.experiment import BATCH, Accumulation, ScaleSweep, ScenarioRun
from explorers.gradients.your_model import (
    EXPLODING_NORM,
    VANISHING_RATIO,
    Diagnosis,
    Finding,
    depth_layers,
)

QUESTION = "Why is a gradient None, zero, vanishing or exploding?"
MOVED_FACTOR = 1.5  # a norm that changed by less than this over the sweep "barely moved"
ALIGNED_SHARE = 0.8  # the accumulated norm at least this share of the summed batch norms: "nearly the same direction"


def sci(x: float | None) -> str:
    """2 significant figures in scientific notation: 3.1e-09; 'n/a' when there is no number."""
    if x is None:
        return "n/a"
    return f"{x:.1e}" if math.isfinite(x) else str(x)


def _names(names, shown: int = 3) -> str:
    names = list(names)
    quoted = ", ".join(f"`{n}`" for n in names[:shown])
    return quoted + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def status_line(diagnosis: Diagnosis) -> str:
    """How many trainable parameters got each kind of gradient, and how many are frozen."""
    trainable = [p for p in diagnosis.parameters.values() if p.requires_grad]
    counts = {s: sum(p.status == s for p in trainable) for s in ("finite", "none", "zero", "nonfinite")}
    words = {
        "finite": "a finite, non-zero gradient",
        "none": "`.grad` None",
        "zero": "a gradient of exactly 0",
        "nonfinite": "inf or nan",
    }
    parts = [f"**{counts[s]}** {words[s]}" for s in words if counts[s]]
    frozen = len(diagnosis.parameters) - len(trainable)
    line = f"Of {_plural(len(trainable), 'trainable parameter')}: " + ", ".join(parts) + "."
    if frozen:
        line += f" {frozen} more {'is' if frozen == 1 else 'are'} frozen (requires_grad=False)."
    return line


def depth_ratio(diagnosis: Diagnosis) -> tuple[float, str, str, int] | None:
    """(first/last gradient norm, first name, last name, layers compared) over the layers compared through depth."""
    layers = depth_layers(diagnosis.layers)
    if len(layers) < 2 or layers[-1].grad_norm == 0:
        return None
    return layers[0].grad_norm / layers[-1].grad_norm, layers[0].label, layers[-1].label, len(layers)


def _finding_line(finding: Finding, diagnosis: Diagnosis) -> str:
    kind = finding.kind
    if kind == "broken_graph":
        cuts = ", ".join(f"`{name}` (×{count})" for name, count in diagnosis.cuts[:3])
        return (
            f"{_names(finding.parameters)} {'was' if len(finding.parameters) == 1 else 'were'} read by the forward "
            "pass, yet their `.grad` is **None**: not a small number, no number at all, because no path leads from "
            "the loss back to them."
            + (
                f" Where this forward can cut a path: {cuts} (a tensor requiring grad went in, none came out)."
                if cuts
                else ""
            )
        )
    if kind == "unused":
        return (
            f"{_names(finding.parameters)}: no operation of the forward pass or the loss read them, so the "
            "loss does not depend on them and their `.grad` stays **None**."
        )
    if kind == "frozen":
        return (
            f"{_names(finding.parameters)} {'has' if len(finding.parameters) == 1 else 'have'} requires_grad=False: "
            "autograd records no path to them on purpose, and `.grad` stays **None**. Right for fine-tuning; a bug "
            "if they were meant to learn."
        )
    if kind == "backward_error":
        message = diagnosis.backward_error or ""
        reached = [n for n, p in diagnosis.parameters.items() if p.status != "none"]
        line = f"`backward()` raised PyTorch's own error: *{message.splitlines()[0]}*"
        if reached:
            line += f" It had already written gradients into {_names(reached)}, which it reached before the failure."
        return line
    if kind == "dead_units":
        dead = [d for d in diagnosis.dead_units if d.where in finding.modules]
        parts = "; ".join(
            f"`{d.where}`: **{d.dead} of {d.units}** units zero for all {d.samples} samples" for d in dead
        )
        zero = [n for n in finding.parameters]
        return f"Dead ReLUs: {parts}. ReLU's derivative is 0 where its output is 0" + (
            f", so {_names(zero)} got a gradient of **exactly 0**: a path exists, and it carries zero." if zero else "."
        )
    if kind == "zero_gradient":
        return f"{_names(finding.parameters)} got a gradient of **exactly 0**: a path exists, and it carries zero."
    if kind == "vanishing":
        ratio, first, last, count = depth_ratio(diagnosis)
        per_layer = ratio ** (1 / (count - 1))
        return (
            f"Vanishing: the first layer's (`{first}`) gradient norm is **{sci(ratio)}** of the last layer's "
            f"(`{last}`), a factor of about **{per_layer:.2f}** per layer over {count} layers (flagged below "
            f"{VANISHING_RATIO:.0e}). The norms are finite: the chain rule multiplies one small local "
            "derivative per layer."
        )
    if kind == "exploding":
        layers = [layer for layer in diagnosis.layers if set(layer.parameters) & set(finding.parameters)]
        top = max(layers, key=lambda layer: layer.grad_norm)
        ratio = f", **{sci(top.ratio)}×** its weight norm" if top.ratio is not None else ""
        return (
            f"Exploding: {_plural(len(layers), 'layer')} with a gradient norm above {EXPLODING_NORM:.0e}; the "
            f"largest, `{top.label}`, is **{sci(top.grad_norm)}**{ratio}. The loss is {sci(diagnosis.loss)}; "
            "the norms are finite, just huge."
        )
    if kind == "nonfinite":
        return f"Non-finite: {finding.observation}"
    return finding.observation


def explain(
    run: ScenarioRun,
    sweep: ScaleSweep | None = None,
    clipping: Clipping | None = None,
    training: Training | None = None,
) -> list[str]:
    """The lesson of this run, one markdown sentence per fact, from its live numbers."""
    diagnosis = run.diagnosis
    lines = [status_line(diagnosis)]
    lines += [_finding_line(f, diagnosis) for f in diagnosis.findings]
    if not diagnosis.findings:
        ratio = depth_ratio(diagnosis)
        line = "No findings: every trainable parameter got a finite gradient"
        if ratio is not None:
            line += f", and the first layer's norm is {sci(ratio[0])}× the last layer's"
        lines.append(line + ".")
    if sweep is not None:
        lines += sweep_lines(sweep)
    if run.accumulation is not None:
        lines += accumulation_lines(run.accumulation)
    if clipping is not None:
        lines.append(clipping_line(clipping))
    if training is not None:
        lines.append(training_line(training))
    return lines


def sweep_lines(sweep: ScaleSweep) -> list[str]:
    """What moved with the initial scale and what did not: the observation that separates the two families."""
    points = sweep.points
    scales = ", ".join(f"{p.init_scale:g}" for p in points)
    lines = []
    stuck_none = (
        sorted(set.intersection(*(set(p.none) for p in points)))
        if all(p.backward_error is None for p in points)
        else []
    )
    if stuck_none:
        lines.append(
            f"At init scales {scales}, {_names(stuck_none)} got `.grad` **None every time**: the scale cannot "
            "change a missing path. That is the mark of a broken graph."
        )
    stuck_zero = sorted(set.intersection(*(set(p.zero) for p in points)))
    if stuck_zero:
        lines.append(f"{_names(stuck_zero)} got a gradient of **exactly 0** at every scale ({scales}).")
    if all(p.backward_error for p in points):
        lines.append(f"Backward raised at every scale ({scales}): the error is in the graph, not in the numbers.")
    firsts = [_first_finite(p) for p in points]
    if all(f is not None for f in firsts):
        name = firsts[0][0]
        if all(f[0] == name for f in firsts):
            values = " → ".join(sci(f[1]) for f in firsts)
            change = firsts[-1][1] / firsts[0][1]
            if max(change, 1 / change) >= MOVED_FACTOR:
                lines.append(
                    f"The first layer with a gradient (`{name}`) went **{values}** over the same scales "
                    f"(×{change:.3g} end to end): finite norms move with the scale. When they are tiny or huge, that "
                    "movement is what marks unstable optimisation rather than a broken graph."
                )
            else:
                lines.append(
                    f"The first layer with a gradient (`{name}`) went {values} over the same scales: it barely "
                    "moved, because nothing it depends on was rescaled."
                )
    return lines


def _first_finite(point) -> tuple[str, float] | None:
    for name, norm in zip(point.layer_names, point.layer_norms, strict=True):
        if norm > 0 and math.isfinite(norm):
            return name, norm
    return None


def accumulation_lines(accumulation: Accumulation) -> list[str]:
    k = accumulation.k
    if k < 2:
        return [
            "With k = 1 there is nothing to accumulate: `.grad` holds one batch's gradient "
            f"({sci(accumulation.accumulated_norms[0])})."
        ]
    growth = accumulation.growth[-1]
    own = accumulation.batch_norms
    total = accumulation.accumulated_norms[-1]
    share = total / sum(own)
    direction = "nearly the same direction" if share >= ALIGNED_SHARE else "partly different directions"
    return [
        f"Without `zero_grad`, `‖.grad‖` after {k} batches is **{sci(total)}**, **{growth:.2f}×** the first batch's "
        f"gradient, while each batch's own gradient stayed between {sci(min(own))} and {sci(max(own))}: backward "
        "adds into `.grad`, it never overwrites.",
        f"The {k} batch gradients' norms add up to {sci(sum(own))}; their sum's norm is {share:.0%} of that, so they "
        f"point in {direction}. One diagnosis of one batch cannot see this bug: it looks healthy.",
    ]


def clipping_line(clipping: Clipping) -> str:
    if clipping.total_before is None or not math.isfinite(clipping.total_before):
        return clipping.note
    if not clipping.clipped:
        return (
            f"The total gradient norm is {sci(clipping.total_before)}, below max_norm = {clipping.max_norm:g}: "
            "`clip_grad_norm_` left every gradient as it was."
        )
    factor = clipping.total_after / clipping.total_before
    line = (
        f"`clip_grad_norm_(max_norm={clipping.max_norm:g})` scaled the total norm from "
        f"**{sci(clipping.total_before)}** to **{sci(clipping.total_after)}**: every gradient multiplied by the "
        f"same {sci(factor)}."
    )
    if clipping.imbalance_before is not None:
        line += (
            f" The first/last layer ratio was **{sci(clipping.imbalance_before)}** before and "
            f"**{sci(clipping.imbalance_after)}** after: clipping changes the size, not the balance between layers, "
            "so whatever made that balance is still there."
        )
    return line


def training_line(training: Training) -> str:
    init_scale = training.options.init_scale
    plain, clipped = training.losses_plain, training.losses_clipped
    steps = training.steps
    if training.diverged_at is not None:
        without = (
            f"without clipping the loss went from {sci(plain[0])} to **{plain[training.diverged_at]}** "
            f"at step {training.diverged_at}, where the run stopped"
        )
    else:
        without = f"without clipping the loss went from {sci(plain[0])} to **{sci(plain[-1])}**"
    clipped_end = clipped[-1]
    with_clip = (
        f"with clipping at {training.max_norm:g}, to **{sci(clipped_end)}**"
        if math.isfinite(clipped_end)
        else f"with clipping at {training.max_norm:g} it still reached **{clipped_end}**"
    )
    first_norm = training.grad_norms_plain[0]
    if first_norm > EXPLODING_NORM:
        cause = (
            f" Clipping capped each step at lr × max_norm = {training.learning_rate * training.max_norm:.2g}; the "
            f"initial weights that made the first gradient {sci(first_norm)} are still the model's."
        )
    else:
        cause = (
            f" At these settings the first gradient norm is {sci(first_norm)}, below {EXPLODING_NORM:.0e}: "
            "not exploding."
        )
    return (
        f"Training the exploding case (init scale {init_scale:g}, lr {training.learning_rate:g}) for {steps} steps: "
        f"{without}; {with_clip}.{cause}"
    )


# --- The answer card ---------------------------------------------------------------------------

_MECHANISMS = {
    "broken_graph": "Backward follows grad_fn links from the loss to the leaves; detach, no_grad, argmax and integer "
    "casts produce tensors without a grad_fn, so the parameters behind them are never reached and `.grad` stays None.",
    "unused": "Only parameters on a path from the loss get a gradient; a parameter the forward never reads is not in "
    "the graph, so `.grad` stays None.",
    "frozen": "requires_grad=False makes autograd skip a parameter: no AccumulateGrad node, `.grad` stays None.",
    "backward_error": "Autograd saves tensors for backward and checks each one's version counter; an in-place change "
    "after saving bumps the counter, and backward refuses to use the stale value.",
    "dead_units": "ReLU's derivative is 0 where its output is 0; a unit that is 0 for every sample passes back "
    "exactly 0, so the weights feeding it get a zero gradient through a connected graph.",
    "zero_gradient": "A connected path that multiplies by zero (a mask, a dead unit) gives a gradient of exactly 0.",
    "vanishing": "The chain rule multiplies one local derivative per layer; sigmoid's is at most 0.25, so with small "
    "weights the product shrinks geometrically with depth.",
    "exploding": "Large weights amplify the forward signal layer by layer; the loss and every gradient scale with "
    "the output, so the norms grow with depth and initial scale.",
    "nonfinite": "Once an inf or nan enters the forward or backward pass it propagates through every later product.",
}
_RECOVERIES = {
    "broken_graph": "Remove the detach/no_grad on the training path; replace a hard argmax with a differentiable "
    "relaxation (softmax, Gumbel-softmax, a straight-through estimator).",
    "unused": "Delete the parameter or wire it into forward; DDP with find_unused_parameters=False raises on it.",
    "frozen": "Keep it frozen if fine-tuning is intended and leave it out of the optimizer; else requires_grad_(True).",
    "backward_error": "Make the op out of place (h = h * mask, torch.where) or clone before changing; "
    "torch.autograd.set_detect_anomaly(True) names the forward op.",
    "dead_units": "Lower the learning rate, use He initialisation and small positive biases, or LeakyReLU/GELU.",
    "zero_gradient": "Find the multiply-by-zero on the path (mask, saturation) for this batch.",
    "vanishing": "Scale the initialisation to the activation (Xavier for tanh/sigmoid, He for ReLU), use ReLU-family "
    "activations, normalisation layers or residual connections.",
    "exploding": "Fix the initial scale, add normalisation, lower the learning rate; keep clip_grad_norm_ as a guard, "
    "not the fix.",
    "nonfinite": "Find the first op producing inf/nan (anomaly mode), then lower the learning rate or fix the scale.",
}


def answer_card(run: ScenarioRun, sweep: ScaleSweep | None = None, clipping: Clipping | None = None) -> AnswerCard:
    """The four-part answer (requirement, mechanism, evidence, recovery) for this run; evidence quotes its numbers."""
    diagnosis = run.diagnosis
    kinds = list(diagnosis.kinds) or (["accumulation"] if run.accumulation is not None else [])
    requirement = (
        f"Every trainable parameter should get a finite, useful gradient from one small reproducible batch "
        f"(here the scenario {run.scenario.title!r}: a batch of {BATCH}, mean-squared-error loss, seed "
        f"{run.options.seed}). "
        "Assumed: the model and batch are representative; out of scope: optimizer state and learning-rate schedules."
    )
    if run.accumulation is not None:
        mechanism = (
            "Backward adds into `.grad`; it never overwrites. Without zero_grad each step sums every batch so far."
        )
    elif diagnosis.findings:
        mechanism = " ".join(_MECHANISMS[kind] for kind in dict.fromkeys(kinds) if kind in _MECHANISMS)
    else:
        mechanism = (
            "Backward reaches every trainable parameter, and no layer's local derivatives shrink or grow the "
            "norm by orders of magnitude."
        )
    evidence = [status_line(diagnosis)]
    ratio = depth_ratio(diagnosis)
    if ratio is not None:
        evidence.append(f"First/last layer gradient norm: {sci(ratio[0])} (`{ratio[1]}` vs `{ratio[2]}`).")
    if diagnosis.backward_error:
        evidence.append(f"PyTorch: *{diagnosis.backward_error.splitlines()[0]}*")
    if run.accumulation is not None:
        evidence.append(
            f"‖.grad‖ after {run.accumulation.k} batches without zero_grad: "
            f"{run.accumulation.growth[-1]:.2f}× the first batch's."
        )
    if sweep is not None:
        evidence += sweep_lines(sweep)[:1]
    if clipping is not None and clipping.clipped and clipping.imbalance_before is not None:
        evidence.append(
            f"Clipping at {clipping.max_norm:g}: total norm {sci(clipping.total_before)} → "
            f"{sci(clipping.total_after)}, "
            f"first/last ratio {sci(clipping.imbalance_before)} → {sci(clipping.imbalance_after)}."
        )
    if run.accumulation is not None:
        recovery = (
            "Call optimizer.zero_grad(set_to_none=True) once per optimizer step; accumulate on purpose only, "
            "dividing the loss by the number of micro-batches."
        )
    elif diagnosis.findings:
        recovery = " ".join(_RECOVERIES[kind] for kind in dict.fromkeys(kinds) if kind in _RECOVERIES)
    else:
        recovery = "Nothing to fix; keep the check as a test on one fixed batch so a regression shows at once."
    return AnswerCard(
        question=QUESTION,
        requirement=requirement,
        mechanism=mechanism,
        evidence=" ".join(evidence),
        recovery=recovery,
        trade_off=(
            "Clipping keeps training alive while the cause is found, at the price of hiding it: a run that only "
            "trains with clipping has a scale or architecture problem left to fix."
        ),
        could_prove_wrong=(
            "Rerun at half and twice the initial scale: a None or exact 0 that does not move is a graph bug; "
            "a norm that moves with the scale is optimisation."
        ),
    )
