"""The Fix-the-loop lab's sentences: each symptom from a finding's measured numbers, each mechanism a Statement.

A symptom sentence is built from a `Finding` (explorers/drills/symptoms.py), which holds the
numbers that witnessed it; with no finding there is no symptom sentence, and the lab says the run
did not show the bug. What each bug *is* is said after the answer, by the Statements below, each
with its scope and source and a claims test that tries to falsify it (tests/claims/test_drills.py).
"""

from __future__ import annotations

import re

from explorers.drills.fixes import FIXES
from explorers.drills.symptoms import MEMORY_GAP_BYTES, Comparison, Finding
from explorers.statements import Statement
from explorers.units import format_bytes

AUTOGRAD = "https://pytorch.org/docs/stable/notes/autograd.html"
STATEMENTS: dict[str, Statement] = {
    "grad_accumulates": Statement(
        text=(
            "`backward()` adds each parameter's gradient into its `.grad`; it does not clear what is there. "
            "Without `zero_grad()` between two steps, the second step uses the sum of both batches' gradients "
            "(of what `.grad` held after the first step, if something such as clipping rescaled it in place)."
        ),
        scope="leaf tensors that require grad (parameters); a non-leaf tensor keeps no .grad unless retain_grad()",
        source=f"{AUTOGRAD} and torch/optim/optimizer.py: Optimizer.zero_grad",
    ),
    "zero_grad_clears": Statement(
        text=(
            "`optimizer.zero_grad()` sets the `.grad` of every parameter the optimizer holds to None "
            "(`set_to_none=True`, the default since PyTorch 2.0); a `step()` after it finds no gradient and "
            "leaves those parameters as they are."
        ),
        scope="the optimizer's own parameters, for SGD and Adam (which skip a parameter whose .grad is None)",
        source="torch/optim/optimizer.py: Optimizer.zero_grad; torch/optim/sgd.py",
    ),
    "optimizer_holds_tensors": Statement(
        text=(
            "An optimizer keeps the parameter tensors it was given when it was built. A layer assigned to the "
            "model afterwards brings new tensors: the optimizer's `step()` and `zero_grad()` never touch them."
        ),
        scope="until the new parameters are added with optimizer.add_param_group or a new optimizer is built; a "
        "new layer that reuses a Parameter the optimizer holds (a tied weight) is stepped through that Parameter",
        source="torch/optim/optimizer.py: Optimizer.__init__ and add_param_group",
    ),
    "train_eval": Statement(
        text=(
            "`model.eval()` turns Dropout off and makes BatchNorm normalise with, and leave alone, its running "
            "statistics, until `model.train()` turns them back; `torch.no_grad()` changes neither."
        ),
        scope="nn.Dropout, and nn.BatchNorm built with track_running_stats=True (the default: with False it keeps "
        "no running statistics and normalises with each batch's own in eval() too); other modules read "
        "self.training as their own forward decides",
        source="torch/nn/modules/module.py: Module.train; torch/nn/modules/batchnorm.py",
    ),
    "softmax_in_cross_entropy": Statement(
        text=(
            "`F.cross_entropy` applies `log_softmax` to its input itself. Given probabilities, which lie in "
            "[0, 1], it takes a softmax of a softmax: with C classes its loss cannot fall below "
            "log(1 + (C − 1)/e) (0.744 for 4 classes), however right the model is."
        ),
        scope="class-index targets without label smoothing or weights, not all of them ignore_index (then the "
        "summed loss is 0); inputs in [0, 1]",
        source="https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",
    ),
    "mse_broadcast": Statement(
        text=(
            "`F.mse_loss` of an (N, 1) input against an (N,) target broadcasts both to (N, N) and averages all "
            "N² squared differences (with reduction='sum', adds them), with a UserWarning about the sizes: every "
            "prediction is pulled towards every target, and the best it can do is predict their mean."
        ),
        scope="reduction='mean' or 'sum', N > 1; with N = 1 the shapes broadcast to (1, 1) and the loss is right",
        source="torch/nn/functional.py: mse_loss",
    ),
    "detach_stops": Statement(
        text=(
            "`.detach()` returns a tensor with no `grad_fn`: backward stops there, and parameters reached only "
            "through it get no gradient from that backward: a `.grad` that was None stays None (one zeroed with "
            "`zero_grad(set_to_none=False)` stays zero)."
        ),
        scope="for paths through the detached tensor; a parameter also reached another way still gets that "
        "path's gradient",
        source=f"{AUTOGRAD} and torch.Tensor.detach",
    ),
    "accumulation_sum": Statement(
        text=(
            "Over k micro-batches, backward on each undivided loss leaves k times the gradient of the mean of "
            "the k losses; dividing each loss by k leaves that gradient, up to float rounding. Plain SGD's step is "
            "lr times the gradient, so an undivided loss is k times the learning rate. The mean of the k losses is "
            "the loss of one batch of them all only for equal micro-batches of samples that do not interact: "
            "BatchNorm in training mode, as in this lab's model, normalises each micro-batch by its own "
            "statistics, so here accumulating is not one larger batch."
        ),
        scope="reduction='mean' for the one-batch equality, which BatchNorm in train() breaks (it normalises "
        "each micro-batch by its own statistics), and so do class weights and ignore_index (each micro-batch's "
        "mean divides by its own weight sum or count); SGD without momentum or weight decay for the step (momentum "
        "and Adam respond otherwise)",
        source="torch/optim/sgd.py; https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation",
    ),
    "sgd_step_scales": Statement(
        text=(
            "Plain SGD moves each parameter by lr × its gradient: the step grows in proportion to the learning "
            "rate, up to float rounding."
        ),
        scope="torch.optim.SGD without momentum, weight decay or nesterov, on the same gradient; a step far below "
        "a weight's float precision rounds away (float32 w = 1024 does not move for lr × g = 1e-6)",
        source="torch/optim/sgd.py",
    ),
    "clipping_scales": Statement(
        text=(
            "`clip_grad_norm_` multiplies every gradient by one factor, max_norm / (total norm + 1e-6) capped "
            "at 1: above max_norm the gradients' total norm becomes max_norm (up to that 1e-6, which also scales "
            "a norm just under max_norm by a hair), well below it they stay as they are. "
            "It changes nothing that produced the gradient. Plain SGD's step is then at most lr × max_norm; "
            "Adam divides by its own running gradient size, so clipping does not bound its step that way."
        ),
        scope="the 2-norm over all the parameters passed, finite gradients (a nan or inf total norm makes the "
        "factor nan or 0 with error_if_nonfinite=False); the Adam remark for its "
        "first step, where scaling every gradient by one factor leaves the step as it was (up to eps)",
        source="torch/nn/utils/clip_grad.py: clip_grad_norm_",
    ),
    "in_place_saved": Statement(
        text=(
            "An in-place op on a tensor autograd saved for backward bumps its version counter, and backward "
            "raises *one of the variables needed for gradient computation has been modified by an inplace "
            "operation*. Doing it under `torch.no_grad()` still bumps the counter; `retain_graph` does not help."
        ),
        scope="tensors saved by PyTorch's own backward formulas (sigmoid and softmax save their output) and "
        "changed through the tensor itself; ops that save nothing (add) do not check, a saved_tensors_hooks pack "
        "that copies is not checked, and a change through .data bumps no counter: the gradient is then silently "
        "wrong",
        source=f"{AUTOGRAD}#in-place-operations-with-autograd",
    ),
    "set_epoch": Statement(
        text=(
            "`DistributedSampler` shuffles with a generator seeded by `seed + epoch`. Without `set_epoch`, "
            "epoch stays 0 and every epoch reads the same order; reseeding torch's global RNG does not change it."
        ),
        scope="shuffle=True; the order is the same on every rank for the same seed and epoch",
        source="torch/utils/data/distributed.py: DistributedSampler.__iter__ and set_epoch",
    ),
    "batchnorm_needs_two": Statement(
        text=(
            "BatchNorm in training mode normalises each channel with the batch's own statistics, so it needs "
            "more than one value per channel. On (N, C) input, as this lab's `BatchNorm1d` gets, a batch of one "
            "sample has one value per channel and raises *Expected more than 1 value per channel when "
            "training*; one sample of (N, C, L) input with L > 1, or of an image larger than one pixel, has a value "
            "per position, and trains. "
            "`drop_last=True` drops the short last batch."
        ),
        scope="nn.BatchNorm1d and nn.BatchNorm2d in train(); in eval() with running statistics (the default) a "
        "batch of one works, and with track_running_stats=False it raises in eval() too",
        source="torch/nn/functional.py: _verify_batch_size",
    ),
    "graph_keeps_saved": Statement(
        text=(
            "A loss computed outside `no_grad` keeps its graph, and every tensor the graph saved for backward, "
            "alive as long as the loss tensor is: summing such losses keeps all their graphs. "
            "`loss.item()` is a Python float and keeps nothing."
        ),
        scope="graphs not yet run backward on (backward frees the saved tensors unless retain_graph=True)",
        source=f"https://pytorch.org/docs/stable/notes/faq.html and {AUTOGRAD}",
    ),
    "no_grad_records_nothing": Statement(
        text=(
            "Under `torch.no_grad()` a forward records no graph and saves nothing for backward: validation, "
            "which never calls backward, needs neither. Outside it, every forward on parameters that require grad "
            "builds a graph that lives as long as its output, or a loss computed from it."
        ),
        scope="tensors that require grad reaching the forward (a model's parameters); torch.inference_mode() "
        "records nothing too, and its outputs cannot enter autograd later",
        source=f"{AUTOGRAD}#locally-disabling-gradient-computation",
    ),
    "item_still_builds": Statement(
        text=(
            "Summing `.item()` lets each validation graph go after its batch, but every forward outside "
            "`torch.no_grad()` still records a graph and saves tensors for a backward that never runs."
        ),
        scope="forwards on parameters that require grad, in grad mode (the default)",
        source=f"{AUTOGRAD}#locally-disabling-gradient-computation",
    ),
    "clamp_cuts_gradient": Statement(
        text=(
            "`clamp(min=1e-6)` passes no gradient where it clamps: a sample whose probability for its true "
            "class falls below 1e-6 gets exactly zero gradient from this loss, though it is the sample most wrong."
        ),
        scope="torch.clamp's backward, which passes the gradient only where min <= input (<= max)",
        source="tools/autograd/derivatives.yaml: clamp",
    ),
    "cross_entropy_on_logits": Statement(
        text=(
            "`F.cross_entropy` on the logits computes `log_softmax` and the negative log-likelihood in one step, "
            "stably: it needs no clamp to keep the log finite, and its gradient, softmax minus the one-hot target, "
            "reaches every sample."
        ),
        scope="class-index targets without label smoothing or weights; finite logits",
        source="https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",
    ),
    "unshuffled_order": Statement(
        text=(
            "With `shuffle=False` a DataLoader reads the samples in index order, the same order every epoch: "
            "data stored class by class arrives as batches of one class, but for the batches that straddle a "
            "boundary between two classes."
        ),
        scope="the default sequential sampler; a sampler passed explicitly decides the order itself",
        source="torch/utils/data/dataloader.py and sampler.py: SequentialSampler",
    ),
}
EXPLAINS = {  # drill -> the statements that say what its bug is, shown once the answer is given
    "forgot_zero_grad": ("grad_accumulates",),
    "zero_grad_after_backward": ("zero_grad_clears",),
    "train_mode_never_restored": ("train_eval",),
    "validation_in_train_mode": ("train_eval",),
    "loss_tensor_summed": ("graph_keeps_saved", "no_grad_records_nothing"),
    "softmax_before_loss": ("softmax_in_cross_entropy",),
    "target_shape_broadcast": ("mse_broadcast",),
    "detached_body": ("detach_stops",),
    "learning_rate_too_high": ("sgd_step_scales", "clipping_scales"),
    "unshuffled_sorted_data": ("unshuffled_order",),
    "accumulation_undivided": ("accumulation_sum",),
    "optimizer_before_new_head": ("optimizer_holds_tensors",),
    "in_place_on_saved": ("in_place_saved", "cross_entropy_on_logits"),
    "sampler_without_set_epoch": ("set_epoch",),
    "batchnorm_batch_of_one": ("batchnorm_needs_two",),
}
# Fixes that remove the symptom on a run, yet fall short: what each leaves, said when chosen (never the better fix).
SHORT_OF_BEST = {"item_for_logging": "item_still_builds", "clamp_out_of_place": "clamp_cuts_gradient"}
QUESTION_LINES = "Which lines hold the bug? Where a line is missing, pick a line where it belongs."
QUESTION_FIX = "Which fix removes it?"
NOT_SHOWN = (
    "On this seed the run did not show a difference from the correct loop that the bench measures: "
    "every reading is within its threshold. Try another seed."
)


def first_sentence(message: str, limit: int = 300) -> str:
    """PyTorch's message up to its first full stop, short enough to read."""
    head = re.split(r"(?<=[a-z\]\)])\.\s", message, maxsplit=1)[0]
    return head if len(head) <= limit else head[: limit - 1] + "…"


def _percent(value: float, task_metric: str) -> str:
    return f"{value:.3f}" if "R²" in task_metric else f"{value:.1%}"


def _epochs(numbers: tuple[int, ...]) -> str:
    """(2,) -> "epoch 2"; (2, 3, 4) -> "epochs 2, 3 and 4"."""
    if len(numbers) == 1:
        return f"epoch {numbers[0]}"
    return f"epochs {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}"


def symptom(finding: Finding) -> str:
    """One sentence per finding, every number from the finding."""
    m = finding.measured
    kind = finding.kind
    if kind == "error":
        done = m["after_batches"]
        when = f"After {done} logged batch{'es' * (done != 1)}" if done else "Before it logged a batch"
        return f"{when}, the loop raised PyTorch's error *{first_sentence(m['error'])}*."
    if kind == "diverged":
        return f"The logged loss became {m['value']} at batch {m['batch']}."
    if kind == "warning":
        return "PyTorch warned: " + "; ".join(f"*{first_sentence(w)}*" for w in m["warnings"]) + "."
    if kind == "loss_gap":
        return (
            f"The last epoch's mean logged loss was {m['loss']:.3g}, ×{m['ratio']:.2f} the correct loop's "
            f"{m['correct_loss']:.3g}."
        )
    if kind == "metric_gap":
        metric = m["metric"]
        return (
            f"The final {metric} (eval(), no_grad) was {_percent(m['value'], metric)}, against "
            f"{_percent(m['correct_value'], metric)} for the correct loop."
        )
    if kind == "reported_gap":
        return (
            f"In {m['epochs']} of {m['of']} epochs the loop's own validation accuracy differed from the same "
            f"model's in eval() under no_grad: epoch {m['epoch']} reported {m['reported']:.1%}, eval() gave "
            f"{m['measured']:.1%}."
        )
    if kind == "grad_carryover":
        return (
            f"At `optimizer.step()`, `{m['layer']}`'s `.grad` was a median ×{m['ratio']:.2g} the gradient backward "
            f"produced for that step (over {m['steps']} steps): it held more than the step's own gradient."
        )
    if kind == "grad_mixed":
        return (
            f"At `optimizer.step()`, `{m['layer']}`'s `.grad` was not the gradient backward produced for that step: "
            f"their cosine was a median {m['cosine']:.2f} over {m['steps']} steps (1 when `.grad` is that gradient, "
            "scaled or not)."
        )
    if kind == "grad_lost":
        return (
            f"At `optimizer.step()`, `{m['layer']}`'s `.grad` was a median ×{m['ratio']:.2f} the gradient backward "
            f"produced since the step before (over {m['steps']} steps): the step used less than backward produced."
        )
    if kind == "logged_other":
        return (
            f"At batch 1 the loop logged {m['loss']:.4g}, where {m['bench_measure']} of that batch was "
            f"{m['bench_loss']:.4g}: it logs another quantity, so its loss curve is not compared with the correct "
            "loop's as a ratio."
        )
    if kind == "validation_graph":
        return (
            f"{m['graphs']} of {m['forwards']} validation forwards built an autograd graph (their output had a "
            f"`grad_fn`), which the correct loop's did not: up to {format_bytes(m['bytes'])} was live after one, "
            f"against {format_bytes(m['correct_bytes'])}."
        )
    if kind == "zero_grad_at_step":
        return (
            f"At {m['steps']} of {m['of']} steps, every parameter's `.grad` was None or zero when "
            "`optimizer.step()` ran, though backward had produced a gradient for the step."
        )
    if kind == "no_gradient":
        return f"{_names(m['layers'])}: `.grad` was None at all {m['steps']} steps."
    if kind == "never_changed":
        return f"{_names(m['layers'])}: the weights did not change in {m['steps']} steps."
    if kind == "not_in_optimizer":
        return f"The optimizer did not hold {_names(m['parameters'])}, which the model used."
    if kind == "gradient_gap":
        return (
            f"At the first step, from the same weights on the same batches, backward produced ×{m['ratio']:.2f} "
            f"the correct loop's gradient ({_over(m, 'got none')})."
        )
    if kind == "update_gap":
        return (
            f"The first step moved the weights ×{m['ratio']:.2f} as far as the correct loop's first step, from the "
            f"same weights on the same batches ({_over(m, 'did not move')})."
        )
    if kind == "eval_in_training":
        frozen = m["stats_frozen"]
        stats = f"; BatchNorm's running statistics did not move in {_epochs(frozen)}" if frozen else ""
        return (
            f"In {_epochs(m['epochs'])} of {m['of']}, training forwards ran with Dropout or BatchNorm in "
            f"eval mode{stats}."
        )
    if kind == "train_in_validation":
        moved = m["stats_moved"]
        stats = f"; BatchNorm's running statistics moved during validation in {_epochs(moved)}" if moved else ""
        return f"Validation ran with Dropout or BatchNorm in training mode in {_epochs(m['epochs'])}{stats}."
    if kind == "memory_growth":
        how = (
            f"it grew {format_bytes(m['after_second'])} of that after the second forward"
            if m["after_second"] >= MEMORY_GAP_BYTES
            else f"a step up by the second forward, then no more than {format_bytes(m['after_second'])} higher"
        )
        return (
            f"Over the {m['forwards']} forwards of epoch {m['epoch']}'s {m['phase']}, live tensor bytes rose up to "
            f"{format_bytes(m['bytes'])} above what was live after the first of them ({how}), against "
            f"{format_bytes(m['correct_bytes'])} in the correct loop."
        )
    if kind == "same_order":
        return f"The {_epochs(m['epochs'])} read the same {m['samples']} samples in the same order as epoch 1."
    if kind == "one_class_batches":
        return (
            f"{m['share']:.0%} of the {m['batches']} batches held a single class "
            f"(the correct loop's: {m['correct_share']:.0%})."
        )
    raise ValueError(f"no sentence for the finding {kind!r}")


def _over(measured: dict, nothing: str) -> str:
    """Which layers a first-step ratio is over, and which it leaves out because they had nothing."""
    over = measured["over"]
    words = f"layer {_names(over)}" if len(over) == 1 else f"geometric mean over {_names(over)}"
    without = measured["without"]
    return words + (f"; {_names(without)} {nothing}, unlike the correct loop's" if without else "")


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def symptoms(comparison: Comparison) -> list[str]:
    return [symptom(f) for f in comparison.findings] or [NOT_SHOWN]


def fix_verdict(fix: str, comparison: Comparison) -> str:
    """What the chosen fix did, from the fixed run against the correct one and the loop as shown
    (`compare(fixed, correct, shown)`)."""
    label = FIXES[fix].label
    verdict = comparison.verdict
    short = f" It is not the best fix, though: {STATEMENTS[SHORT_OF_BEST[fix]].text}" if fix in SHORT_OF_BEST else ""
    if verdict == "matches":
        return (
            f"**{label}**: the fixed loop trains exactly as the correct one: every logged loss is bit for bit equal."
            + short
        )
    if verdict == "equivalent":
        return (
            f"**{label}**: the fixed loop is within every threshold of the correct one, though not bit for bit." + short
        )
    sources = [symptom(f) for f in comparison.sources]
    if verdict == "same_numbers":
        return (
            f"**{label}**: every logged loss and metric is bit for bit the correct loop's, but the bench still "
            "measures a difference in how it ran. " + " ".join(sources) + short
        )
    outcomes = [symptom(f) for f in comparison.findings if f.is_outcome]
    if verdict == "unchanged":
        return (
            f"**{label}** does not fix it: the loop ran bit for bit as shown (every logged loss, metric and "
            "error the same). " + " ".join(sources + outcomes)
        )
    if verdict == "hides":
        return (
            f"**{label}** hides the symptom: the loss and the validation metric are no worse than the correct "
            "loop's by the thresholds, but the bench still measures a difference in how it trained. "
            + " ".join(sources + outcomes)
        )
    if verdict == "better":
        return (
            f"**{label}**: the bench measures no difference in how it trained, and it ends outside the "
            "thresholds on the better side. " + " ".join(outcomes)
        )
    return f"**{label}** does not fix it. " + " ".join(outcomes + sources)


def explanation(drill: str) -> list[str]:
    return [STATEMENTS[key].text for key in EXPLAINS[drill]]


def lines_verdict(check) -> str:
    extra = len(check.extra_lines)
    extra_words = f"; {extra} other line{'s' * (extra != 1)} chosen" if extra else ""
    found = f"Lines: {check.lines_found} of {check.lines_needed} found{extra_words}."
    if check.missing:
        first, last = check.bug_lines[0], check.bug_lines[-1]
        return f"{found} The bug is a missing line: it belongs in lines {first} to {last}, and any of them counts."
    where = " and ".join(map(str, check.bug_lines))
    return f"{found} The bug is at line{'s' * (len(check.bug_lines) > 1)} {where}."


READINGS_TITLE = "What the bench measured, against the correct loop (hints)"
CODE_TITLE = "The loop that ran"
CODE_LABEL = "The loop that ran, numbered: scrolls sideways"
FIXED_CODE_LABEL = "The fixed loop, numbered: scrolls sideways"
ANSWER_FIRST = "Pick the lines and a fix, then check: the correct loop's curve appears once you have it right."


def stage_title(title: str) -> str:
    return f"{title}: what went wrong?"


def plain(fix: str) -> str:
    """A fix's label without markdown, for a caption that is not markdown."""
    return FIXES[fix].label.replace("`", "")


def fix_label(key: str, none: str) -> str:
    return "(not chosen yet)" if key == none else FIXES[key].label


def check_verdict(check, attempts: int) -> str:
    lines = lines_verdict(check)
    if check.right:
        return f"Right, in {attempts} attempt{'s' * (attempts != 1)}. {lines}"
    if not check.lines_right:
        return (
            f"Not yet: {check.lines_found} of {check.lines_needed} bug lines chosen"
            + (
                f", and {len(check.extra_lines)} other{'s' * (len(check.extra_lines) != 1)}."
                if check.extra_lines
                else "."
            )
            + (" The fix is right." if check.fix_right else " The fix is not the one: see what it did below.")
        )
    return "The lines are right; the fix is not the one. See what it did below."
