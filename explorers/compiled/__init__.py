"""The compile lab: where torch.compile breaks a graph, recompiles and pays off, on the lab's models or yours.

- `explain(model, inputs)`: dynamo's graphs and breaks for one call (reason, file, line);
- `payoff(model, inputs, steps, targets=None, loss_fn=...)`: a training step eager and compiled
  (inductor), timed on one stopwatch: the first step's compile, the steady steps, the break-even;
- `experiment.analyse(CompileOptions(...))` and `experiment.measure(PayoffOptions(...))`: the lab's
  presets (a clean model, a data-dependent branch, `.item()` in forward, a new shape every step,
  a Python counter read from a global), as the page runs them.

`explain` and `payoff` run in a forked child process on one thread (see explorers/compiled/isolated.py):
dynamo's caches and config, inductor's caches, the RNG and the default dtype of the caller stay
as they were, and the caller's model is never touched. Batches follow explorers.batches: a
tensor is `model(x)`, a tuple `model(*x)`, a dict `model(**x)` (Hugging Face style); without
`targets`, the model's output must carry `.loss` (or `["loss"]`), which the step minimises.

    from explorers import compiled
    compiled.explain(model, x).breaks
    compiled.payoff(model, [x], steps=20, targets=[y]).break_even
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from explorers import batches as batch_calls
from explorers import lazy

# the package imports none of its own modules until used (explorers/lazy.py says why)
__getattr__, __dir__ = lazy.exports(__name__, {"Break": "breaks", "GraphBreaks": "breaks", "Payoff": "timing"})


def explain(model: torch.nn.Module, inputs: object) -> GraphBreaks:  # noqa: F821 - a lazy export
    import explorers.compiled.breaks as breaks
    import explorers.compiled.isolated as isolated

    return isolated.in_child(breaks.explain, model, inputs)


def _own_loss(output: object, target: object) -> torch.Tensor:
    loss = batch_calls.output_loss(output)
    if loss is None:
        raise ValueError("without targets, the model's output must carry a loss (.loss or ['loss'])")
    return loss


def payoff(
    model: torch.nn.Module,
    inputs: Sequence,
    steps: int = 20,
    targets: Sequence | None = None,
    loss_fn: Callable = torch.nn.functional.cross_entropy,
) -> Payoff:  # noqa: F821 - a lazy export
    import explorers.compiled.isolated as isolated
    import explorers.compiled.timing as timing

    if not 1 <= steps <= 1000:
        raise ValueError(f"steps must be in [1, 1000], not {steps!r}")
    inputs = list(inputs)
    if not inputs:
        raise ValueError("inputs must hold at least one batch")
    if targets is None:
        targets, loss_fn = [None] * len(inputs), _own_loss
    return isolated.in_child(timing.payoff, model, inputs, list(targets), loss_fn, steps)


__all__ = ["Break", "GraphBreaks", "Payoff", "explain", "payoff"]
