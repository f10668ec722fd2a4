"""Memory lab: what fills memory in training, and what runs out first?

- `your_model.measure(model, batch, ...)` measures one real training step of your own model by
  category; `your_model.estimate(build, ...)` does it on fake tensors (nothing allocated);
- `experiment` holds the lab's presets, sweep, remedies and retention loops (the page runs them
  on the run engine, since MemTracker's hooks are process-wide);
- `figures` and `lesson` turn the measurements into charts and sentences.

    from explorers import memory
    m = memory.measure(model, batch, optimizer="adam", precision="bf16", checkpointing=True)
    m.activations, m.peak, m.predicted
"""

from explorers.memory.experiment import MemoryOptions
from explorers.memory.your_model import CATEGORIES, OPTIMIZERS, PRECISIONS, Measurement, estimate, measure

__all__ = ["CATEGORIES", "OPTIMIZERS", "PRECISIONS", "Measurement", "MemoryOptions", "estimate", "measure"]
