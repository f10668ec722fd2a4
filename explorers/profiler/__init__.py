"""Profiler lab: where does a slow training step spend its time?

- `your_model.profile_training(model, loader, optimizer, loss_fn)` profiles your own job by phase;
- `experiment.profile(ProfileOptions(...))` is the lab's synthetic job (the page runs it on the engine);
- `figures` and `lesson` turn a result into charts, tables and sentences.

    from explorers import profiler
    result = profiler.profile_training(model, loader, optimizer, loss_fn, warmup=2, active=5)
    result.verdict, result.evidence, result.steps[0].phases, result.overhead_ratio
"""

from explorers.profiler.experiment import ProfileOptions, profile
from explorers.profiler.your_model import PHASES, ProfileResult, judge, profile_training

__all__ = ["PHASES", "ProfileOptions", "ProfileResult", "judge", "profile", "profile_training"]
