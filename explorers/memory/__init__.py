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

`explorers.scale.plan(model, batch_size, seq_len, ...)` answers the same question for a published
model at real scale (Llama-3-8B, Mistral-7B, GPT-2 XL, ...), per GPU, on fake tensors. It builds on
this package's measured step; this package does not reach into it.
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "MemoryOptions": "experiment",
        "CATEGORIES": "your_model",
        "OPTIMIZERS": "your_model",
        "PRECISIONS": "your_model",
        "Measurement": "your_model",
        "StepMemory": "your_model",
        "default_loss": "your_model",
        "estimate": "your_model",
        "estimate_saved": "your_model",
        "measure": "your_model",
    },
)

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
]
