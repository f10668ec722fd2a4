"""The precision lab: what bf16 and fp16 autocast and GradScaler do to a training step, on the lab's model or yours.

- `experiment.run(PrecisionOptions(...))`: the lab's model trained in fp32, bf16 autocast, fp16 autocast
  and fp16 with GradScaler from the same weights on the same batches;
- `compare(model, batch, loss_fn)`: your model, one step in each precision on copies: the loss, which
  ops produced which dtype, and per parameter the gradient values that underflowed or overflowed
  against fp32.

A precision PyTorch cannot run the model in here (measured: nn.LSTM under float16 autocast raises
in oneDNN, and under bfloat16 too on an AMD EPYC without bf16 instructions) is returned with its
`error` and no numbers. `compare` trains copies (your model, its `.grad` fields and the global
RNG are left as they were) and sets the default dtype back if the model changes it. Batches
follow explorers.batches.

    from explorers import precision
    precision.compare(model, x, torch.nn.functional.cross_entropy, target=y)["fp16"].underflow
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from explorers import batches, lazy

# the package imports none of its own modules until used (explorers/lazy.py says why)
__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "experiment": "experiment",
        "PrecisionOptions": "experiment",
        "PrecisionResult": "experiment",
        "run": "experiment",
    },
)


@dataclass(frozen=True)
class StepInPrecision:
    precision: str
    loss: float
    op_dtypes: tuple[tuple[str, str], ...]
    underflow: dict[str, int]  # per parameter: gradient values zero here, non-zero in fp32
    non_finite: dict[str, int]  # per parameter: inf or nan gradient values
    error: str | None = None  # PyTorch's error when this precision cannot run the model here (then no numbers)


def _one_step(model, batch, loss_fn, target, precision):
    import explorers.precision.experiment as experiment

    model = batches.copy_model(model, "precision.compare").train()
    dtypes = experiment._Dtypes()
    with experiment._autocast(precision), dtypes:
        output = batches.call(model, batch)
        if loss_fn is None:
            loss = batches.output_loss(output)
            if loss is None:
                raise ValueError("without loss_fn, the model's output must carry a loss (.loss or ['loss'])")
        else:
            loss = batches.loss_of(loss_fn, output, batch, target)
    loss.backward()
    grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), tuple(dtypes.ops), grads


def compare(
    model: torch.nn.Module, batch: object, loss_fn: Callable | None = None, target: object = None
) -> dict[str, StepInPrecision]:
    """One training step's backward in fp32, bf16 autocast and fp16 autocast, each on a fresh copy of `model`."""
    default = torch.get_default_dtype()
    results, reference = {}, None
    try:
        with torch.random.fork_rng():
            for precision in ("fp32", "bf16", "fp16"):
                torch.manual_seed(0)  # the same dropout masks in each precision
                try:
                    loss, ops, grads = _one_step(model, batch, loss_fn, target, precision)
                except RuntimeError as error:  # e.g. no float16 LSTM kernel on this CPU: said, not hidden
                    if precision == "fp32":
                        raise
                    results[precision] = StepInPrecision(precision, float("nan"), (), {}, {}, str(error))
                    continue
                reference = reference if reference is not None else grads
                results[precision] = StepInPrecision(
                    precision,
                    loss,
                    ops,
                    {n: int(((g == 0) & (reference[n] != 0)).sum()) for n, g in grads.items() if n in reference},
                    {n: int((~torch.isfinite(g)).sum()) for n, g in grads.items()},
                )
    finally:
        torch.set_default_dtype(default)
    return results


__all__ = ["PrecisionOptions", "PrecisionResult", "StepInPrecision", "compare", "run"]
