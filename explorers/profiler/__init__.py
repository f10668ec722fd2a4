"""Profiler lab: where does a slow training step spend its time?

- `your_model.profile_training(model, loader, optimizer, loss_fn)` profiles your own job by phase,
  on a deep copy (your model, optimizer, batches and RNG are left as they were);
- `experiment.profile(ProfileOptions(...))` is the lab's synthetic job (the page runs it on the engine);
- `figures` and `lesson` turn a result into charts, tables and sentences; `noise` is the margin they use.

    from explorers import profiler
    result = profiler.profile_training(model, loader, optimizer, loss_fn, warmup=2, active=5)
    result.verdict, result.evidence, result.steps[0].phases, result.overhead_ratios
    # batches that are not (input, target) pairs:
    profiler.profile_training(model, loader, optimizer, loss_fn, split_batch=lambda b: (b["x"], b["y"]))
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "ProfileOptions": "experiment",
        "profile": "experiment",
        "PHASES": "your_model",
        "ProfileResult": "your_model",
        "StepTiming": "your_model",
        "Verdict": "your_model",
        "judge": "your_model",
        "profile_training": "your_model",
        "split_pair": "your_model",
    },
)

__all__ = [
    "PHASES",
    "ProfileOptions",
    "ProfileResult",
    "StepTiming",
    "Verdict",
    "judge",
    "profile",
    "profile_training",
    "split_pair",
]
