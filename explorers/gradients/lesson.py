"""The Gradients lab's lesson: sentences built from the measured numbers, and the general statements they use.

Every sentence about the run is a reading of the run it is given: a sentence about a finding appears
when that finding was made, and its numbers are the run's own. A sentence about PyTorch in general
is one of `STATEMENTS`, with when it holds and where PyTorch says so; tests/claims/test_gradients.py
tries to falsify each one. The answer card is in `card.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from explorers.gradients.clipping import Clipping, Training
from explorers.gradients.experiment import (
    DEAD_BIAS,
    IN_FEATURES,
    SCENARIOS,
    WIDTH,
    Accumulation,
    GradientsOptions,
    ScaleSweep,
    ScenarioRun,
)
from explorers.gradients.your_model import (
    EXPLODING_NORM,
    VANISHING_RATIO,
    Diagnosis,
    Finding,
    depth_layers,
)
from explorers.statements import Statement
from explorers.units import sci

AUTOGRAD_NOTES = "https://pytorch.org/docs/stable/notes/autograd.html"
STATEMENTS: dict[str, Statement] = {
    "accumulates": Statement(
        text="Backward adds each pass's gradient into a parameter's `.grad`; it never overwrites it.",
        scope="Leaves that require grad, with Tensor.backward(); a `.grad` of None counts as zero.",
        source="https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html",
    ),
    "none_stays_none": Statement(
        text=(
            "Rescaling the initial weights cannot give a gradient to a parameter that no path connects to the "
            "loss: its `.grad` stays None at every scale."
        ),
        scope=(
            "Models whose forward takes the same operations whatever the values (no `if` on a tensor's value); "
            "parameters behind detach(), no_grad or an integer output, or not read at all."
        ),
        source=f"{AUTOGRAD_NOTES}#how-autograd-encodes-the-history",
    ),
    "clip_one_factor": Statement(
        text=(
            "`clip_grad_norm_` multiplies every gradient by the same factor, max_norm / total norm, when the total "
            "norm is above max_norm, and leaves them as they were otherwise."
        ),
        scope="Finite total norms; the factor is max_norm / (total + 1e-6), clamped to 1; the parameters passed in.",
        source="torch/nn/utils/clip_grad.py: clip_grad_norm_",
    ),
    "broken_graph": Statement(
        text=(
            "Backward reaches a parameter through `grad_fn` links; a tensor made by detach(), under no_grad, or with "
            "an integer dtype (argmax, a cast) has no `grad_fn`, so a parameter reached only through one keeps "
            "`.grad` None."
        ),
        scope="Eager autograd; a custom autograd.Function or a straight-through trick can build a path of its own.",
        source=f"{AUTOGRAD_NOTES}#locally-disabling-gradient-computation",
    ),
    "unused": Statement(
        text=(
            "A parameter that no operation of the forward pass or the loss reads is not in the graph: its `.grad` "
            "stays None."
        ),
        scope="Any module; DDP with find_unused_parameters=False raises on such a parameter.",
        source=f"{AUTOGRAD_NOTES}#how-autograd-encodes-the-history",
    ),
    "frozen": Statement(
        text="A parameter with requires_grad=False gets no AccumulateGrad node: backward leaves its `.grad` None.",
        scope="When backward runs at all (some other tensor in the graph requires grad).",
        source=f"{AUTOGRAD_NOTES}#setting-requires-grad",
    ),
    "backward_error": Statement(
        text=(
            "Autograd records the version counter of each tensor it saves for backward; when an in-place op that "
            'moves the counter changes it before backward, backward raises "modified by an inplace operation" '
            "instead of using the new value. A write through `.data` moves no counter: backward then runs, without "
            "this error, on the new value."
        ),
        scope=(
            "Tensors saved by built-in ops and by save_for_backward, with no saved_tensors_hooks installed (a pack "
            "hook that returns a copy saves the copy, as torch.autograd.graph.allow_mutation_on_saved_tensors does); "
            "views share their base's version counter; a tensor stashed on ctx as a plain attribute is not checked."
        ),
        source="torch/csrc/autograd/saved_variable.cpp: SavedVariable::unpack",
    ),
    "dead_units": Statement(
        text=(
            "ReLU's derivative is 0 where its output is 0, so a unit that is 0 for every sample passes back exactly "
            "0 to the weights feeding it."
        ),
        scope="nn.ReLU and torch.relu (the derivative at exactly 0 is taken as 0); LeakyReLU, GELU and RReLU differ.",
        source="tools/autograd/derivatives.yaml: relu (threshold_backward)",
    ),
    "none_returned": Statement(
        text=(
            "A backward function may return None for one of its inputs; autograd then sends nothing along that edge, "
            "and a parameter reached only through it keeps `.grad` None although it is in the graph."
        ),
        scope=(
            "A custom autograd.Function's backward returning None for an input that requires grad; the graph still "
            "holds the parameter's AccumulateGrad node, so the parameter is reached, not cut off."
        ),
        source="https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd",
    ),
    "zero_gradient": Statement(
        text=(
            "A path that multiplies by zero (a mask, a dead unit) delivers a gradient of exactly 0: the parameter "
            "is reached, and its `.grad` is a tensor of zeros, not None."
        ),
        scope="Finite values on the path (0 × inf is nan).",
        source=f"{AUTOGRAD_NOTES}#how-autograd-encodes-the-history",
    ),
    "chain": Statement(
        text=(
            "Backward multiplies the gradient by one layer's local derivative at a time (its weight matrix, then its "
            "activation's derivative), so in a stack the gradient reaching an early layer has passed through the "
            "factors of every later layer."
        ),
        scope="Feed-forward stacks; a residual connection adds a path that skips the layer's factor.",
        source=f"{AUTOGRAD_NOTES}#how-autograd-encodes-the-history",
    ),
    "vanishing": Statement(
        text=(
            "Sigmoid's derivative is at most 0.25, so a sigmoid layer whose weight matrix has spectral norm below 4 "
            "shrinks the gradient's norm."
        ),
        scope="Linear layers followed by sigmoid; tanh's bound is 1, ReLU's is 1 on active units.",
        source="https://pytorch.org/docs/stable/generated/torch.nn.Sigmoid.html",
    ),
    "exploding": Statement(
        text=(
            "When each layer multiplies the gradient's norm by more than 1 on the way back (its weight matrix times "
            "its activation's derivative), the gradient grows geometrically with the number of layers it passes "
            "through, and the loss and the weights' updates grow with it."
        ),
        scope=(
            "Feed-forward stacks; the per-layer factor depends on the initial scale, the activation and the input, "
            "and a residual connection or a normalisation layer changes it."
        ),
        source=f"{AUTOGRAD_NOTES}#how-autograd-encodes-the-history",
    ),
    "homogeneous": Statement(
        text=(
            "A ReLU or identity stack without biases is positively homogeneous: multiplying every weight by c > 0 "
            "multiplies the output by c to the power of the depth."
        ),
        scope="Zero biases and ReLU or identity activations only; tanh and sigmoid saturate and are not homogeneous.",
        source="https://pytorch.org/docs/stable/generated/torch.nn.ReLU.html",
    ),
    "critical_gain": Statement(
        text=(
            "With weights drawn from N(0, s²/fan_in) and zero biases, a ReLU layer keeps its signal's expected "
            "squared norm at s = √2 (He et al.'s gain) and an identity layer at s = 1; above that scale the signal "
            "and the gradients grow with depth, below it they shrink."
        ),
        scope=(
            "Equal-width ReLU or identity stacks, in expectation over the weights; one draw of a narrow stack "
            "scatters around it."
        ),
        source="He et al. 2015, Delving Deep into Rectifiers (arXiv:1502.01852), section 2.2",
    ),
    "nonfinite": Statement(
        text=(
            "An inf or nan that enters a matrix product reaches every output it is multiplied into, and from there "
            "the loss and the gradients."
        ),
        scope="Sums and products such as Linear and matmul; relu(-inf) = 0, max or a mask can drop a non-finite value.",
        source="https://pytorch.org/docs/stable/notes/numerical_accuracy.html",
    ),
}

QUESTION = "Why is a gradient None, zero, vanishing or exploding?"
NO_FINDINGS = "None: every trainable parameter got a finite gradient, and no threshold was crossed."
KNOB_NOT_IN_MODEL = "This scenario's model does not have this knob."
_KNOB_WORDS = {"depth": "depth", "activation": "activation", "k": "k"}  # the disableable knobs, as the page names them


def knobs_not_in_model(scenario: str) -> str | None:
    """A caption under the controls naming the knobs this scenario's model ignores, or None when it uses them all."""
    ignored = [word for knob, word in _KNOB_WORDS.items() if knob not in SCENARIOS[scenario].knobs]
    if not ignored:
        return None
    names = ignored[0] if len(ignored) == 1 else ", ".join(ignored[:-1]) + " or " + ignored[-1]
    them = "it" if len(ignored) == 1 else "them"
    return f"This scenario does not use {names} (see its code), so changing {them} does not change the run."


MOVED_FACTOR = 1.5  # a norm that changed by less than this over the sweep "barely moved"
ALIGNED_SHARE = 0.8  # the accumulated norm at least this share of the summed batch norms: "nearly the same direction"


@dataclass(frozen=True)
class ScenarioText:
    title: str
    pathology: str  # what was set up, in words, from the live options
    code: str  # the lines that build it, from the live options


_MODULES = {"tanh": "nn.Tanh()", "sigmoid": "nn.Sigmoid()", "relu": "nn.ReLU()", "linear": "nn.Identity()"}
_PLANTED = {
    "detached": (
        "A side branch is detached before it rejoins the trunk.",
        "b = torch.tanh(self.branch(h)).detach()\nreturn self.head(h + b)",
    ),
    "unused": (
        "A layer is defined in __init__ and not called in forward.",
        f"self.skip = nn.Linear({WIDTH}, {WIDTH})  # forward does not call it",
    ),
    "frozen": (
        "The encoder is frozen with requires_grad_(False), as for fine-tuning.",
        "self.encoder.requires_grad_(False)",
    ),
    "inplace": (
        "The sigmoid's output, which sigmoid saved for backward, is changed in place.",
        "h = torch.sigmoid(self.fc1(x))\nh[:, 0] = 0  # in place: SigmoidBackward needs the old h",
    ),
    "dead_relu": (
        f"Every bias of the first layer is {DEAD_BIAS:g}, as after one too-large update.",
        f"self.net[0].bias.fill_({DEAD_BIAS:g})  # a unit is dead for a sample where w·x < {-DEAD_BIAS:g}",
    ),
    "argmax": (
        "The model picks a row with argmax: an integer index.",
        "choice = self.scorer(h).argmax(dim=1)  # int64\nreturn self.table(choice)",
    ),
}
_STACK_INTENT = {
    "healthy": "Nothing planted.",
    "no_zero_grad": "The training loop calls backward() on k batches without zero_grad() in between.",
}


def scale_words(init_scale: float) -> str:
    """The initial scale against the two named ones: LeCun std 1/√fan_in, He std √2/√fan_in."""
    return f"{init_scale:g}× LeCun scale, {init_scale / math.sqrt(2):.2g}× He scale"


def scenario_text(options: GradientsOptions) -> ScenarioText:
    """The scenario's heading, description and code, written from the options the model was built with."""
    name, scale = options.scenario, options.init_scale
    init = f"# every weight ~ N(0, {scale:g}² / fan_in) ({scale_words(scale)}), every bias 0"
    if name in _PLANTED:
        pathology, code = _PLANTED[name]
        return ScenarioText(SCENARIOS[name].label, pathology, f"{init}\n{code}")
    depth, module = options.depth, _MODULES[options.activation]
    stack = f"{depth} Linear layers, {options.activation}, {scale:g}× LeCun"  # one line: the figure stays on screen
    title = f"{SCENARIOS[name].label.split(':')[0]}: {stack}" if name in _STACK_INTENT else f"A stack of {stack}"
    pathology = (
        f"{depth} Linear layers ({IN_FEATURES} → {WIDTH} … → 1) with {options.activation} between them, weights "
        f"at {scale_words(scale)}."
    )
    if name in _STACK_INTENT:  # vanishing and exploding say what was built; the verdict says what it measured
        pathology = f"{_STACK_INTENT[name]} {pathology}"
    code = (
        f"layers = []\nfor i in range({depth}):\n"
        f"    layers.append(nn.Linear({IN_FEATURES} if i == 0 else {WIDTH}, 1 if i == {depth - 1} else {WIDTH}))\n"
        f"    if i < {depth - 1}:\n        layers.append({module})\n{init}"
    )
    if name == "no_zero_grad":
        code += (
            f"\nfor x, y in batches[:{options.k}]:\n    mse_loss(model(x), y).backward()  # no optimizer.zero_grad()"
        )
    return ScenarioText(title, pathology, code)


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
    if len(layers) < 2 or layers[-1].depth_norm == 0:
        return None
    return layers[0].depth_norm / layers[-1].depth_norm, layers[0].label, layers[-1].label, len(layers)


def step_factor(diagnosis: Diagnosis) -> str | None:
    """The first/last ratio spread evenly over the steps between neighbouring layers, in words: one text for all."""
    ratio = depth_ratio(diagnosis)
    if ratio is None:
        return None
    steps = ratio[3] - 1
    return (
        f"about ×{ratio[0] ** (1 / steps):.2g} per step between neighbouring layers, over "
        f"{_plural(steps, 'step')} ({ratio[3]} layers)"
    )


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
    if kind == "none_returned":
        nodes = list(dict.fromkeys(n for name in finding.parameters for n in diagnosis.parameters[name].linked_from))
        return (
            f"{_names(finding.parameters)} {'is' if len(finding.parameters) == 1 else 'are'} in the graph (linked "
            f"from {_names(nodes)}), yet `.grad` is **None**: a path exists, and a backward function on it returned "
            "no gradient."
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
        zero = list(finding.parameters)
        line = f"Dead ReLUs: {parts}."
        if zero:
            line += (
                f" {_names(zero)} got a gradient of **exactly 0**, and a non-zero one when these ReLUs are replaced "
                "by the identity (same batch, same weights)."
            )
        return line
    if kind == "zero_gradient":
        return f"{_names(finding.parameters)} got a gradient of **exactly 0**: a path exists, and it carries zero."
    if kind == "vanishing":
        ratio, first, last, _ = depth_ratio(diagnosis)
        return (
            f"Vanishing: the first layer's (`{first}`) weight gradient norm is **{sci(ratio)}** of the last layer's "
            f"(`{last}`), {step_factor(diagnosis)} (flagged below {VANISHING_RATIO:.0e}). The norms are finite: "
            "small, not missing."
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
            line += f", and the first layer's weight gradient norm is {sci(ratio[0])}× the last layer's"
        lines.append(line + ".")
    if sweep is not None:
        lines += sweep_lines(sweep)
    if run.accumulation is not None:
        lines += accumulation_lines(run.accumulation)
        if diagnosis.verdict == "healthy":
            lines.append("The diagnosis of one batch above says healthy: one batch does not show this bug.")
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
            f"At init scales {scales}, {_names(stuck_none)} got `.grad` **None every time**. "
            + STATEMENTS["none_stays_none"].text
        )
    stuck_zero = sorted(set.intersection(*(set(p.zero) for p in points)))
    if stuck_zero:
        lines.append(
            f"{_names(stuck_zero)} got a gradient of **exactly 0** at every scale ({scales}): a tensor of zeros, "
            "so a path reaches them; it carries zero at each scale."
        )
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
                    f"(×{change:.3g} end to end): this finite norm moved with the scale, where a missing path "
                    "would have stayed None."
                )
            else:
                lines.append(
                    f"The first layer with a gradient (`{name}`) went {values} over the same scales: it changed by "
                    f"less than ×{MOVED_FACTOR:g}."
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
    fell = accumulation.fell_at
    path = (
        "it grew after every batch"
        if not fell
        else f"it fell after batch {_and(fell)}, whose gradient pointed partly against the sum so far"
    )
    return [
        f"Without `zero_grad`, `‖.grad‖` after {k} batches is **{sci(total)}**, **{growth:.2f}×** the first batch's "
        f"gradient ({path}), while each batch's own gradient stayed between {sci(min(own))} and {sci(max(own))}. "
        + STATEMENTS["accumulates"].text,
        f"The {k} batch gradients' norms add up to {sci(sum(own))}; their sum's norm is {share:.0%} of that, so they "
        f"point in {direction}.",
    ]


def _and(numbers: tuple[int, ...]) -> str:
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


BALANCE_KEPT = 1e-3  # ratios this close (relative) before and after clipping count as the same balance


def balance_kept(clipping: Clipping) -> bool | None:
    """Whether the first/last layer ratio measured the same before and after clipping; None with no ratio."""
    before, after = clipping.imbalance_before, clipping.imbalance_after
    if before is None or after is None:
        return None
    return math.isclose(before, after, rel_tol=BALANCE_KEPT)


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
    kept = balance_kept(clipping)
    if kept is not None:
        line += (
            f" The first/last layer weight gradient norm ({ratio_layers(clipping)}) was "
            f"**{sci(clipping.imbalance_before)}** before and "
            f"**{sci(clipping.imbalance_after)}** after: "
            + ("clipping changed the size, not the balance between layers." if kept else "the balance moved.")
        )
    return line


def ratio_layers(clipping: Clipping) -> str:
    return f"`{clipping.layer_names[0]}` vs `{clipping.layer_names[-1]}`"


def predict_question(max_norm: float) -> str:
    return (
        f"clip_grad_norm_ scales the whole gradient to at most {max_norm:g}. What happens to the ratio "
        "of the first layer's gradient norm to the last layer's?"
    )


def predict_reveal(clipping: Clipping) -> str:
    return (
        f"Measured just now: {sci(clipping.imbalance_before)} before, {sci(clipping.imbalance_after)} after. "
        + STATEMENTS["clip_one_factor"].text
    )


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
        norms = training.grad_norms_clipped
        moved = training.weights_moved_clipped
        cause = (
            f" With clipping, the largest step moved the weights by {sci(training.largest_step_clipped)} "
            f"(lr × max_norm = {training.learning_rate * training.max_norm:.2g})"
            + (f"; over the run they moved {moved:.0%} of their initial norm" if math.isfinite(moved) else "")
            + f", and the gradient norm went from {sci(norms[0])} at the first step to {sci(norms[-1])} at the last"
            + (f" (still above {EXPLODING_NORM:.0e})." if norms[-1] > EXPLODING_NORM else ".")
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
