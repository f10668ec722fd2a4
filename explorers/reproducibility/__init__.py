"""Reproducibility lab: run the same experiment twice and get the same numbers?

- `compare(...)` runs a small training job (a shuffling DataLoader with optional workers,
  augmentation from numpy's global RNG and `random`, dropout, random init, Adam) several
  times, each in a new Python process, and compares the runs bit for bit;
- `resume(...)` trains straight through, and resumes from a checkpoint in a new process
  (loaded with `weights_only=True`), keeping or forgetting the optimizer, RNG and sampler state;
- `manifest` records what a rerun needs (code version, config, seeds, versions, device,
  deterministic flags, data split hash) and names what differs between two manifests.

What to expect on a CPU: with every source seeded the runs are bitwise equal; leaving out a
source the job draws from makes them differ from the first step that used it; leaving out one
it does not draw from changes nothing (with DataLoader workers, PyTorch seeds numpy and
`random` in each worker from torch's base seed, so the main process's numpy seed is not used).

    from explorers import reproducibility as repro
    c = repro.compare(runs=2, seed_torch=True, seed_numpy=True, seed_python=True,
                      seed_workers=True, deterministic=True, num_workers=2, steps=20, seed=0)
    c.bitwise_equal, c.first_divergent_step, c.max_param_diff, c.losses
    c.component_first_difference   # initial weights, batch order, augmentation, dropout RNG
    r = repro.resume(total_steps=20, checkpoint_at=8, keep_optimizer_state=True,
                     keep_rng_state=True, keep_sampler_state=True, seed=0)
    r.equal, r.max_param_diff
    repro.manifest.differences(c.runs[0].manifest, other_manifest)
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "manifest": "manifest",
        "COMPONENTS": "experiment",
        "CompareOptions": "experiment",
        "Comparison": "experiment",
        "ResumedRun": "experiment",
        "ResumeOptions": "experiment",
        "ResumeResult": "experiment",
        "RunRecord": "experiment",
        "compare": "experiment",
        "compare_runs": "experiment",
        "resume": "experiment",
        "resume_runs": "experiment",
        "resume_study": "experiment",
    },
)

__all__ = [
    "COMPONENTS",
    "CompareOptions",
    "Comparison",
    "ResumeOptions",
    "ResumeResult",
    "ResumedRun",
    "RunRecord",
    "compare",
    "compare_runs",
    "manifest",
    "resume",
    "resume_runs",
    "resume_study",
]
