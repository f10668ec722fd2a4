"""What a run shows, read from its measurements against the correct loop's on the same seed and data.

Each `Finding` is one way a run differs from the correct run, with the numbers that witnessed it.
Nothing here knows which drill ran: the same readings are taken for every loop, so a bug a seed
leaves harmless yields no finding, and the lab says so. A finding is about the *outcome* (the loss,
the validation metric) or about a *source* (what the gradients, the modes, the memory, the data
order did). An outcome finding is *harm* only on the worse side (a higher loss, a lower metric,
divergence); a better-side one is reported, never counted against a fix.

A fix is judged against the correct loop and against the loop as shown: a fix that trains bit for
bit as the loop as shown changed nothing; one that raises or ends worse fails; one that ends no
worse while a source finding stays has *hidden* the symptom, which needs a symptom to hide (the
loop as shown raised or ended worse on this seed).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from explorers.drills.harness import Recording

# The last epoch's mean logged loss, (1 + LOSS_GAP) times above or below the correct loop's. An audit measured
# ×0.99 to ×1.22 between correct runs that differed only in their dropout masks: a gap must stand above that.
LOSS_GAP = 0.5
METRIC_GAP = 0.05  # the final validation metric, this far from the correct loop's (absolute)
REPORTED_GAP = 0.005  # the loop's own validation number, this far from the bench's eval() measurement
# ‖.grad at the step‖ this many times ‖what backward produced for the step‖, as a median over the steps: one step's
# ratio can be any size where backward produced almost nothing for it (an audit saw ×2.9e+27 over a 2.9e-07 gradient)
CARRYOVER = 1.5
UPDATE_GAP = 1.5  # the first step moved the weights this many times as far as the correct loop's (or 1/that)
MEMORY_GAP_BYTES = 4096  # live bytes grew this much more within one phase of an epoch than in the correct loop
ONE_CLASS_SHARE = 0.5  # at least this share of batches held a single class
OUTCOMES = ("loss_gap", "metric_gap", "diverged")
METRIC_NAMES = {"classification": "validation accuracy", "regression": "validation R²"}
BENCH_LOSSES = {  # the loss the bench computes of each batch's output (explorers/drills/harness.py: bench_losses)
    "classification": "the cross-entropy of the logits",
    "regression": "the mean squared error of the output squeezed to the target's shape",
}


@dataclass(frozen=True)
class Finding:
    kind: str
    measured: dict[str, Any] = field(default_factory=dict)

    @property
    def is_outcome(self) -> bool:
        return self.kind in OUTCOMES

    @property
    def is_harm(self) -> bool:
        """An outcome on the worse side of the correct loop's: divergence, a higher loss, a lower metric."""
        m = self.measured
        if self.kind == "loss_gap":
            return m["ratio"] > 1
        if self.kind == "metric_gap":
            return m["value"] < m["correct_value"]
        return self.kind == "diverged"


@dataclass(frozen=True)
class Comparison:
    findings: tuple[Finding, ...]
    identical: bool  # every logged loss, every metric and the error equal to the correct run's, bit for bit
    completed: bool = True  # the run raised nothing and reported every epoch the correct loop reported
    # For a fixed loop, compared with the loop as shown too (compare(..., shown=)):
    unchanged: bool = False  # every logged loss, metric and the error bit for bit the shown loop's
    symptom_shown: bool = False  # the loop as shown raised, or ended worse than the correct loop

    def kinds(self) -> tuple[str, ...]:
        return tuple(f.kind for f in self.findings)

    def finding(self, kind: str) -> Finding | None:
        return next((f for f in self.findings if f.kind == kind), None)

    @property
    def harmed(self) -> bool:
        return not self.completed or any(f.is_harm for f in self.findings)

    @property
    def sources(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.is_outcome)

    @property
    def verdict(self) -> str:
        """For a fixed loop: "matches" | "same_numbers" | "equivalent" | "unchanged" | "fails" | "hides" | "better".

        "same_numbers": every logged number bit for bit the correct loop's, while a source reading still differs
        (a graph built where the correct loop builds none)."""
        if self.identical:
            return "same_numbers" if self.sources else "matches"
        if self.unchanged:
            return "unchanged"
        if not self.findings:
            return "equivalent"
        if self.harmed:
            return "fails"
        if self.sources:
            return "hides" if self.symptom_shown else "fails"
        return "better"  # outcome findings only, each on the better side


def compare(run: Recording, correct: Recording, shown: Recording | None = None) -> Comparison:
    """How `run` differs from `correct`; with `shown` (the loop as shown, when `run` is a fix), also whether the
    fix changed anything and whether there was a symptom to hide."""
    findings = [
        finding
        for read in (
            _error,
            _diverged,
            _warnings,
            _logged_other,
            _loss_gap,
            _metric_gap,
            _reported_gap,
            # what the run did structurally (a parameter never stepped, never given a gradient) before the ratios
            # that such a cause also moves (a .grad never cleared because the optimizer does not hold it)
            _not_in_optimizer,
            _no_gradient,
            _never_changed,
            _zero_grad_at_step,
            _grad_carryover,
            _grad_mixed,
            _grad_lost,
            _gradient_gap,
            _update_gap,
            _eval_in_training,
            _train_in_validation,
            _memory_growth,
            _validation_graph,
            _same_order,
            _one_class_batches,
        )
        if (finding := read(run, correct)) is not None
    ]
    completed = run.error is None and len(run.epochs) == len(correct.epochs)
    if shown is None:
        return Comparison(tuple(findings), _identical(run, correct), completed)
    return Comparison(
        tuple(findings),
        _identical(run, correct),
        completed,
        unchanged=_identical(run, shown),
        symptom_shown=compare(shown, correct).harmed,
    )


def _bits(values) -> list[str]:
    return [float(v).hex() if v is not None else "none" for v in values]


def _identical(run: Recording, correct: Recording) -> bool:
    def metrics(r: Recording) -> list[str]:
        return _bits([m for e in r.epochs for m in (e.reported, e.train_metric, e.val_metric)])

    return (
        _bits(run.losses) == _bits(correct.losses) and metrics(run) == metrics(correct) and run.error == correct.error
    )


def _error(run: Recording, correct: Recording) -> Finding | None:
    if run.error and run.error != correct.error:
        return Finding("error", {"error": run.error, "after_batches": run.error_after_batches})
    return None


def _diverged(run: Recording, correct: Recording) -> Finding | None:
    bad = next((i for i, v in enumerate(run.losses) if not math.isfinite(v)), None)
    if bad is not None and all(math.isfinite(v) for v in correct.losses):
        return Finding("diverged", {"batch": bad + 1, "value": run.losses[bad]})
    return None


def _warnings(run: Recording, correct: Recording) -> Finding | None:
    new = [w for w in run.warnings if w not in correct.warnings]
    return Finding("warning", {"warnings": tuple(new)}) if new else None


def _last_epoch_loss(r: Recording) -> float | None:
    if r.error or not r.epochs:
        return None
    batches = len(r.losses) // len(r.epochs)
    last = r.losses[-batches:]
    return statistics.fmean(last) if last and all(math.isfinite(v) for v in last) else None


LOGGED_OTHER = 1e-4  # relative: the logged loss and the bench's own loss of the same output differ beyond rounding


def _logs_other(r: Recording) -> tuple[float, float] | None:
    """At the first batch, what the loop logged and the bench's loss of the same output, if they differ."""
    if not r.losses or not r.bench_losses or r.bench_losses[0] is None:
        return None
    logged, own = r.losses[0], r.bench_losses[0]
    if not math.isfinite(logged) or abs(logged - own) > LOGGED_OTHER * abs(own):
        return logged, own
    return None


def _logged_other(run: Recording, correct: Recording) -> Finding | None:
    """The loop logs something other than the loss of its model's output (cross-entropy on the logits, mean squared
    error against the target): its loss is then not compared with the correct loop's as a ratio."""
    found = _logs_other(run)
    if found and not _logs_other(correct):
        measure = BENCH_LOSSES[run.task]
        return Finding("logged_other", {"loss": found[0], "bench_loss": found[1], "bench_measure": measure})
    return None


def _loss_gap(run: Recording, correct: Recording) -> Finding | None:
    if _logged_other(run, correct):
        return None  # two different quantities: their ratio says nothing
    mine, theirs = _last_epoch_loss(run), _last_epoch_loss(correct)
    if mine is None or theirs is None or theirs <= 0:
        return None
    ratio = mine / theirs
    if ratio >= 1 + LOSS_GAP or ratio <= 1 / (1 + LOSS_GAP):
        return Finding("loss_gap", {"loss": mine, "correct_loss": theirs, "ratio": ratio})
    return None


def _metric_gap(run: Recording, correct: Recording) -> Finding | None:
    if not run.epochs or not correct.epochs or run.error:
        return None
    mine, theirs = run.epochs[-1].val_metric, correct.epochs[-1].val_metric
    if abs(mine - theirs) >= METRIC_GAP:
        return Finding("metric_gap", {"metric": METRIC_NAMES[run.task], "value": mine, "correct_value": theirs})
    return None


def _reported_gaps(r: Recording) -> list[tuple[int, float, float]]:
    return [
        (i + 1, e.reported, e.val_metric)
        for i, e in enumerate(r.epochs)
        if e.reported is not None and abs(e.reported - e.val_metric) > REPORTED_GAP
    ]


def _reported_gap(run: Recording, correct: Recording) -> Finding | None:
    """Only where the correct loop's own number is the bench's metric: then both loops report that metric."""
    if not correct.epochs or _reported_gaps(correct) or any(e.reported is None for e in correct.epochs):
        return None
    gaps = _reported_gaps(run)
    if gaps:
        epoch, reported, measured = max(gaps, key=lambda g: abs(g[1] - g[2]))
        return Finding(
            "reported_gap",
            {"epochs": len(gaps), "of": len(run.epochs), "epoch": epoch, "reported": reported, "measured": measured},
        )
    return None


def _layer_medians(r: Recording, read) -> list[tuple[float, str, int]]:
    """Per layer, the median over the steps of `read(step)`'s values: (median, layer, steps counted)."""
    values: dict[str, list[float]] = {}
    for step in r.steps:
        for layer, value in read(step).items():
            values.setdefault(layer, []).append(value)
    return [(statistics.median(v), layer, len(v)) for layer, v in values.items()]


def _carryover(r: Recording, larger: bool) -> tuple[float, str, int] | None:
    """The layer whose .grad at optimizer.step() was, as a median over the steps, farthest above (or, larger=False,
    below, yet not zero) what backward produced for that step: (median ‖.grad‖ / ‖produced‖, layer, steps)."""

    def ratios(step) -> dict[str, float]:
        grads = step.grad_norms
        return {
            layer: grads[layer] / fresh for layer, fresh in step.fresh_norms.items() if grads.get(layer) and fresh > 0
        }

    medians = _layer_medians(r, ratios)
    if not medians:
        return None
    return max(medians) if larger else min(medians)


def _grad_carryover(run: Recording, correct: Recording) -> Finding | None:
    mine, theirs = _carryover(run, True), _carryover(correct, True)
    if mine and mine[0] >= CARRYOVER and (theirs is None or theirs[0] < CARRYOVER):
        ratio, layer, steps = mine
        return Finding("grad_carryover", {"ratio": ratio, "layer": layer, "steps": steps})
    return None


MIXED_COSINE = 0.99  # a median cosine below this between .grad and the step's own gradient: something mixed in


def _median_cosine(r: Recording) -> tuple[float, str, int] | None:
    """The layer whose .grad at optimizer.step() pointed, as a median over the steps, farthest from the gradient
    backward produced for that step: (median cosine, layer, steps). Scaling (clipping) leaves a cosine of 1."""
    return min(_layer_medians(r, lambda step: step.grad_cosines), default=None)


def _grad_mixed(run: Recording, correct: Recording) -> Finding | None:
    """.grad at the step was not this step's gradient, however scaled: an earlier step's was still in it."""
    mine, theirs = _median_cosine(run), _median_cosine(correct)
    if mine and mine[0] < MIXED_COSINE and (theirs is None or theirs[0] >= MIXED_COSINE):
        cosine, layer, steps = mine
        return Finding("grad_mixed", {"cosine": cosine, "layer": layer, "steps": steps})
    return None


def _grad_lost(run: Recording, correct: Recording) -> Finding | None:
    mine, theirs = _carryover(run, False), _carryover(correct, False)
    if mine and mine[0] <= 1 / CARRYOVER and (theirs is None or theirs[0] > 1 / CARRYOVER):
        ratio, layer, steps = mine
        return Finding("grad_lost", {"ratio": ratio, "layer": layer, "steps": steps})
    return None


def _zeroed_steps(r: Recording) -> int:
    return sum(
        all(not g for g in s.grad_norms.values()) and any(f > 0 for f in s.fresh_norms.values()) for s in r.steps
    )


def _zero_grad_at_step(run: Recording, correct: Recording) -> Finding | None:
    zeroed = _zeroed_steps(run)
    if zeroed and not _zeroed_steps(correct):
        return Finding("zero_grad_at_step", {"steps": zeroed, "of": len(run.steps)})
    return None


def _without_gradient(r: Recording) -> set[str]:
    layers = {layer for s in r.steps for layer in s.grad_norms}
    return {layer for layer in layers if all(s.grad_norms.get(layer) is None for s in r.steps)}


def _no_gradient(run: Recording, correct: Recording) -> Finding | None:
    if not run.steps:
        return None
    missing = sorted(_without_gradient(run) - _without_gradient(correct))
    if missing:
        return Finding("no_gradient", {"layers": tuple(missing), "steps": len(run.steps)})
    return None


def _never_changed(run: Recording, correct: Recording) -> Finding | None:
    if not run.steps:
        return None
    frozen = sorted(layer for layer, moved in run.changed.items() if not moved and correct.changed.get(layer, False))
    if frozen:
        return Finding("never_changed", {"layers": tuple(frozen), "steps": len(run.steps)})
    return None


def _outside_optimizer(r: Recording) -> set[str]:
    return {name for s in r.steps for name in s.not_in_optimizer}


def _not_in_optimizer(run: Recording, correct: Recording) -> Finding | None:
    missing = sorted(_outside_optimizer(run) - _outside_optimizer(correct))
    return Finding("not_in_optimizer", {"parameters": tuple(missing)}) if missing else None


def _first_step_ratio(run: Recording, correct: Recording, measure: str) -> dict[str, Any] | None:
    """At the first step, from the same weights on the same batches: run / correct, geometric mean over the
    layers where both are non-zero; the layers where only the correct loop's is non-zero are named apart."""
    if not run.steps or not correct.steps or run.steps[0].samples != correct.steps[0].samples:
        return None  # another first batch (another batch size, another order): nothing to compare the step with
    mine, theirs = getattr(run.steps[0], measure), getattr(correct.steps[0], measure)
    over = tuple(layer for layer in theirs if theirs[layer] and mine.get(layer))
    if not over:
        return None
    ratio = math.exp(statistics.fmean(math.log(mine[layer] / theirs[layer]) for layer in over))
    if UPDATE_GAP > ratio > 1 / UPDATE_GAP:
        return None
    without = tuple(layer for layer in theirs if theirs[layer] and not mine.get(layer))
    return {"ratio": ratio, "over": over, "without": without}


def _gradient_gap(run: Recording, correct: Recording) -> Finding | None:
    """What backward produced for the first step (before any clipping or step), against the correct loop's."""
    found = _first_step_ratio(run, correct, "fresh_norms")
    return Finding("gradient_gap", found) if found else None


def _update_gap(run: Recording, correct: Recording) -> Finding | None:
    """How much farther (or less far) the first step moved the weights than the correct loop's first step."""
    found = _first_step_ratio(run, correct, "update_ratios")
    return Finding("update_gap", found) if found else None


def _eval_epochs(r: Recording) -> list[int]:
    return [
        i + 1
        for i, e in enumerate(r.epochs)
        if e.training.dropout_training < e.training.dropout_calls
        or e.training.batchnorm_training < e.training.batchnorm_calls
    ]


def _eval_in_training(run: Recording, correct: Recording) -> Finding | None:
    epochs = _eval_epochs(run)
    if epochs and not _eval_epochs(correct):
        frozen = [i + 1 for i, e in enumerate(run.epochs) if not e.training.running_stats_moved]
        return Finding(
            "eval_in_training", {"epochs": tuple(epochs), "of": len(run.epochs), "stats_frozen": tuple(frozen)}
        )
    return None


def _train_mode_validations(r: Recording) -> list[int]:
    return [
        i + 1
        for i, e in enumerate(r.epochs)
        if e.validation.dropout_training or e.validation.batchnorm_training or e.validation.running_stats_moved
    ]


def _train_in_validation(run: Recording, correct: Recording) -> Finding | None:
    epochs = _train_mode_validations(run)
    if epochs and not _train_mode_validations(correct):
        moved = [i + 1 for i, e in enumerate(run.epochs) if e.validation.running_stats_moved]
        dropped = sum(e.validation.dropout_training for e in run.epochs)
        return Finding(
            "train_in_validation",
            {"epochs": tuple(epochs), "of": len(run.epochs), "stats_moved": tuple(moved), "dropout_calls": dropped},
        )
    return None


def _growth(r: Recording) -> tuple[int, str, int, int, int]:
    """The most live bytes grew within one phase of one epoch: (bytes, phase, epoch, forwards, bytes it still grew
    after the second forward of that phase: about 0 for one step up that then holds, the whole rise for a leak)."""
    spans: dict[tuple[int, str], list[int]] = {}
    for value, phase, epoch in zip(r.live_bytes, r.forward_phases, r.forward_epochs, strict=True):
        spans.setdefault((epoch, phase), []).append(value)
    best = (0, "training", 1, 0, 0)
    for (epoch, phase), values in spans.items():
        grown = max(values) - values[0]
        if grown > best[0]:
            later = max(values[1:]) - values[1] if len(values) > 1 else 0
            best = (grown, phase, epoch + 1, len(values), later)
    return best


def _memory_growth(run: Recording, correct: Recording) -> Finding | None:
    grown, phase, epoch, forwards, later = _growth(run)
    if grown - _growth(correct)[0] >= MEMORY_GAP_BYTES:
        return Finding(
            "memory_growth",
            {
                "bytes": grown,
                "phase": phase,
                "epoch": epoch,
                "forwards": forwards,
                "correct_bytes": _growth(correct)[0],
                "after_second": later,
            },
        )
    return None


def _validation_graphs(r: Recording) -> tuple[int, int, int]:
    """Validation forwards whose output carried an autograd graph, of all validation forwards, and the most live
    bytes after one of them."""
    validation = [
        (graph, live)
        for graph, live, phase in zip(r.forward_graphs, r.live_bytes, r.forward_phases, strict=True)
        if phase == "validation"
    ]
    return sum(g for g, _ in validation), len(validation), max((live for _, live in validation), default=0)


def _validation_graph(run: Recording, correct: Recording) -> Finding | None:
    """The loop's validation forwards built graphs where the correct loop's built none."""
    graphs, forwards, live = _validation_graphs(run)
    correct_graphs, _, correct_live = _validation_graphs(correct)
    if graphs and not correct_graphs:
        return Finding(
            "validation_graph",
            {"graphs": graphs, "forwards": forwards, "bytes": live, "correct_bytes": correct_live},
        )
    return None


def _repeated_epochs(r: Recording) -> list[int]:
    if len(r.epochs) < 2:
        return []
    first = r.epochs[0].order
    return [i + 1 for i, e in enumerate(r.epochs[1:], 1) if e.order == first and first]


def _same_order(run: Recording, correct: Recording) -> Finding | None:
    repeated = _repeated_epochs(run)
    if repeated and not _repeated_epochs(correct):
        return Finding(
            "same_order", {"epochs": tuple(repeated), "samples": len(run.epochs[0].order), "of": len(run.epochs)}
        )
    return None


def _one_class_share(r: Recording) -> float:
    batches = [labels for labels in r.batch_labels if labels]
    return sum(len(set(labels)) == 1 for labels in batches) / len(batches) if batches else 0.0


def _one_class_batches(run: Recording, correct: Recording) -> Finding | None:
    mine = _one_class_share(run)
    if mine >= ONE_CLASS_SHARE and _one_class_share(correct) < ONE_CLASS_SHARE:
        return Finding(
            "one_class_batches",
            {"share": mine, "batches": len(run.batch_labels), "correct_share": _one_class_share(correct)},
        )
    return None
