"""The Autograd lab's answer card: "What does autograd track?", with this run's numbers as evidence."""

from __future__ import annotations

from explorers.autograd.experiment import ACTIONS, AutogradRun
from explorers.autograd.lesson import STATEMENTS, two_passes_leaf, two_passes_steps
from explorers.cards import AnswerCard
from explorers.units import format_bytes

QUESTION = "What does autograd track, and when is the graph freed?"


def answer_card(result: AutogradRun, two_passes: AutogradRun) -> AnswerCard:
    """`result` is the lifecycle on screen; `two_passes` is the prediction's own run (`lesson.TWO_PASSES`).

    The evidence quotes the run on screen; the two-pass run is quoted, labelled with its own steps, only when
    the run on screen has no leaf holding two passes."""
    mechanism = " ".join(
        STATEMENTS[key].text for key in ("records", "accumulates", "release", "no_grad", "eval_records")
    )
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "A training loop needs the gradient of one scalar loss with respect to every trainable parameter, "
            "computed once per step without holding memory longer than needed. Assumed: eager PyTorch on one "
            "device; out of scope: higher-order gradients and torch.compile."
        ),
        mechanism=mechanism,
        evidence=_evidence(result, two_passes),
        recovery=(
            'If a second backward raises "Trying to backward through the graph a second time" (a node saved '
            "tensors the first pass released): recompute the forward, or retain the graph knowingly. Gradients "
            "that grow step after step: call `zero_grad` every step. A version-counter error after "
            "`optimizer.step()`: do not backward through a graph built before the step."
        ),
        trade_off=(
            "`retain_graph=True` buys a second pass with memory held until the loss is dropped; for several "
            "losses, summing them and calling backward once is usually cheaper."
        ),
        could_prove_wrong=(
            "If the graph still held saved tensors after `backward()` without `retain_graph`, or two retained "
            "passes did not exactly double a gradient, the accumulate-and-release model would be wrong."
        ),
    )


def _evidence(result: AutogradRun, two_passes: AutogradRun) -> str:
    """The same fields the page shows: the saved-bytes bars, the error box and the predict-then-reveal ratio."""
    facts = []
    peak = max(result.snapshots, key=lambda s: s.saved_bytes)
    if peak.saved_bytes:
        facts.append(
            f"after `{ACTIONS.get(peak.action, peak.action)}` the graph held {format_bytes(peak.saved_bytes)} in "
            f"{peak.saved_count} saved tensors; now it holds {format_bytes(result.final.saved_bytes)}"
        )
    failed = next((s for s in result.steps if s.error), None)
    if failed:
        verb = "raised" if failed.error_from_pytorch else "was not run"
        facts.append(f'`{ACTIONS[failed.action]}` {verb}: "{failed.error.splitlines()[0][:90]}…"')
    accumulated = _accumulated_row(result)
    if accumulated is not None:
        facts.append(
            f"after {accumulated.passes} backward passes ‖{accumulated.name}.grad‖ / ‖latest pass‖ = "
            f"{accumulated.grad_vs_one_pass:.3f}"
            + (" (every pass added the same gradient)" if accumulated.passes_equal else " (the passes differed)")
        )
    said = "On this run: " + "; ".join(facts) + "." if facts else "This run has measured nothing yet."
    if accumulated is not None:
        return said
    row = two_passes_leaf(two_passes)
    side = f"In a separate run of this model ({two_passes_steps()}, the prediction's): "
    if row is None:
        return f"{said} {side}every gradient measured exactly zero, so the second pass added nothing."
    return f"{said} {side}‖{row.name}.grad‖ / ‖latest pass‖ = {row.grad_vs_one_pass:.3f}" + (
        " (both passes added the same gradient)." if row.passes_equal else " (the passes differed)."
    )


def _accumulated_row(result: AutogradRun):
    """The leaf on screen whose .grad holds the most passes (at least two), with a measured ratio."""
    rows = [r for r in result.final.tensors if r.passes >= 2 and r.grad_vs_one_pass is not None]
    return max(rows, key=lambda r: (r.passes, r.grad_vs_one_pass), default=None)
