"""Memory lab: what fills memory in training, and what runs out first?

- `your_model.measure(model, batch, ...)` measures two real training steps on a copy of your own
  model, by category; `your_model.estimate(build, ...)` does it on fake tensors (nothing allocated);
- `tracker` follows every storage a step creates: the live total, its peak, and what was alive then;
- `experiment` holds the lab's presets, sweep, remedies and retention loops (the page runs them
  on the run engine, in worker processes);
- `figures` and `lesson` turn the measurements into charts and sentences.

    from explorers import memory
    m = memory.measure(model, batch, optimizer="adam", precision="bf16", checkpointing=True)
    m.activations, m.first_step.peak, m.steady_step.peak, m.steady_step.at_peak, m.predicted

`plan(model, batch_size, seq_len, ...)` answers the same question for a published model at real
scale (Llama-3-8B, Mistral-7B, GPT-2 XL, ...), per GPU, on fake tensors: see `explorers.scale`.

    p = memory.plan("llama-3-8b", batch_size=1, seq_len=2048, precision="bf16-mixed", optimizer="adamw")
    p.parameters, p.gradients, p.optimizer_state, p.activations, p.peak, p.at_peak, p.fits(80 * 2**30)
"""

from explorers.memory.experiment import MemoryOptions
from explorers.memory.your_model import (
    CATEGORIES,
    OPTIMIZERS,
    PRECISIONS,
    Measurement,
    StepMemory,
    default_loss,
    estimate,
    estimate_saved,
    measure,
)


def plan(*args, **kwargs):
    """`explorers.scale.plan`: bytes per GPU for one training step of a published model (imported on first use)."""
    from explorers.scale.experiment import plan as scale_plan

    return scale_plan(*args, **kwargs)


__all__ = [
    "CATEGORIES",
    "OPTIMIZERS",
    "PRECISIONS",
    "Measurement",
    "MemoryOptions",
    "StepMemory",
    "default_loss",
    "estimate",
    "estimate_saved",
    "measure",
    "plan",
]
