"""Real-scale lab: will fine-tuning a published model fit on my GPU? One real training step, on fake tensors.

from explorers import scale
p = scale.plan("llama-3-8b", batch_size=1, seq_len=2048, precision="bf16-mixed", optimizer="adamw")
p.peak, p.at_peak, p.fits(80 * 2**30)
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(__name__, {"Plan": "experiment", "PlanOptions": "experiment", "plan": "experiment"})

__all__ = ["Plan", "PlanOptions", "plan"]
