"""The Autograd lab's answer card: "What does autograd track?", with this run's numbers as evidence."""

from __future__ import annotations

from explorers.autograd.experiment import ACTIONS, AutogradRun
from explorers.cards import AnswerCard
from explorers.units import format_bytes

QUESTION = "What does autograd track, and when is the graph freed?"


def answer_card(result: AutogradRun, two_passes: AutogradRun) -> AnswerCard:
    """`result` is the lifecycle on screen; `two_passes` is forward then two retained backward passes."""
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "A training loop needs the gradient of one scalar loss with respect to every trainable parameter, "
            "computed once per step without holding memory longer than needed. Assumed: eager PyTorch on one "
            "device; out of scope: higher-order gradients and torch.compile."
        ),
        mechanism=(
            "Every operation on a tensor that requires grad records a `grad_fn` node and saves the tensors its "
            "backward needs. `backward()` walks the nodes from the loss to the leaves, **adds** into each leaf's "
            "`.grad`, and frees the saved tensors unless `retain_graph=True`. `no_grad` records nothing; "
            "`eval()` only changes module behaviour."
        ),
        evidence=_evidence(result, two_passes),
        recovery=(
            'A second backward raises "Trying to backward through the graph a second time": recompute the '
            "forward, or retain the graph knowingly. Gradients that grow step after step: call `zero_grad` "
            "every step. A version-counter error after `optimizer.step()`: do not backward through a graph "
            "built before the weights changed."
        ),
        trade_off=(
            "`retain_graph=True` buys a second pass with memory held until the loss is dropped; for several "
            "losses, summing them and calling backward once is usually cheaper."
        ),
        could_prove_wrong=(
            "If the bytes held for backward did not fall to zero after `backward()`, or two passes did not "
            "exactly double a gradient, the accumulate-and-free model would be wrong."
        ),
    )


def _evidence(result: AutogradRun, two_passes: AutogradRun) -> str:
    facts = []
    peak = max(result.snapshots, key=lambda s: s.saved_bytes)
    if peak.saved_bytes:
        facts.append(
            f"after `{ACTIONS.get(peak.action, peak.action)}` the graph held {format_bytes(peak.saved_bytes)} in "
            f"{peak.saved_count} saved tensors; now it holds {format_bytes(result.final.saved_bytes)}"
        )
    failed = next((s for s in result.steps if s.error), None)
    if failed:
        facts.append(f'`{ACTIONS[failed.action]}` raised: "{failed.error.splitlines()[0][:90]}…"')
    ratios = [r for r in two_passes.final.tensors if r.grad_vs_one_pass is not None]
    if ratios:
        row = ratios[0]
        facts.append(f"two retained passes made ‖{row.name}.grad‖ {row.grad_vs_one_pass:.3f}× one pass")
    else:
        facts.append("on this model every gradient is exactly zero, so two passes add nothing")
    return "On this run: " + "; ".join(facts) + "."
