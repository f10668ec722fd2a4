"""Save, load in a fresh process, continue: does the resumed run equal the straight-through one?

The straight-through run trains `total_steps` steps in one process and writes a checkpoint once
`checkpoint_at` steps are done (writing it draws from no RNG, so the run is unchanged). Each
resumed run is a new interpreter that starts as any run of the script does (seeds from the
config), loads that checkpoint with `torch.load(weights_only=True)`, restores the weights and
the parts it keeps (Adam's state, the three global RNG states, the sampler's place in the
epoch) and trains to `total_steps`. Its losses from `checkpoint_at` on, and its final
parameters, are compared with the straight-through run's, bit for bit.

The job here has every source seeded, deterministic algorithms on, and reads data in the main
process (num_workers=0), so every random draw after the checkpoint comes from state the
checkpoint holds.

`resume_runs` (the notebook's `resume`) resumes once, as asked; `resume_study` (the page) also
resumes with full state and with each part forgotten in turn, from the same checkpoint.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from explorers import bounds
from explorers.reproducibility import fresh
from explorers.reproducibility.job import SEED_RANGE, STEPS_RANGE, JobConfig, check_flags

KEPT = ("keep_optimizer_state", "keep_rng_state", "keep_sampler_state")
PART_NAMES = {"keep_optimizer_state": "optimizer state", "keep_rng_state": "RNG state", "keep_sampler_state": "sampler"}


@dataclass(frozen=True)
class ResumeOptions:
    total_steps: int = 20
    checkpoint_at: int = 8
    keep_optimizer_state: bool = True
    keep_rng_state: bool = True
    keep_sampler_state: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        check_flags(self, KEPT)
        bounds.check_ints(self, {"total_steps": STEPS_RANGE, "seed": SEED_RANGE})
        bounds.check_ints(self, {"checkpoint_at": (1, self.total_steps - 1)})

    def job(self) -> JobConfig:
        return JobConfig(num_workers=0, steps=self.total_steps, seed=self.seed)

    def kept(self) -> dict[str, bool]:
        return {name: getattr(self, name) for name in KEPT}


@dataclass(frozen=True)
class ResumedRun:
    kept: dict[str, bool]  # keep_optimizer_state, keep_rng_state, keep_sampler_state
    losses: list[float]  # steps checkpoint_at .. total_steps - 1
    equal: bool  # final parameters bitwise equal to the straight-through run's
    first_divergent_step: int | None  # the first step whose loss differs from the straight-through run's
    max_loss_diff: float
    max_param_diff: float

    @property
    def forgotten(self) -> list[str]:
        return [PART_NAMES[name] for name, kept in self.kept.items() if not kept]


@dataclass(frozen=True)
class ResumeResult:
    options: ResumeOptions
    straight_losses: list[float]
    resumed: list[ResumedRun]  # the one the options ask for first, then any others the study ran
    checkpoint_bytes: int
    checkpoint_parts: list[str]

    @property
    def chosen(self) -> ResumedRun:
        return self.resumed[0]

    @property
    def equal(self) -> bool:
        return self.chosen.equal

    @property
    def max_param_diff(self) -> float:
        return self.chosen.max_param_diff

    @property
    def first_divergent_step(self) -> int | None:
        return self.chosen.first_divergent_step


def study_variants(options: ResumeOptions) -> list[dict[str, bool]]:
    """The chosen parts, then full state, then each part forgotten alone (without repeats)."""
    variants = [options.kept(), dict.fromkeys(KEPT, True)]
    variants += [{name: name != forgotten for name in KEPT} for forgotten in KEPT]
    unique: list[dict[str, bool]] = []
    for variant in variants:
        if variant not in unique:
            unique.append(variant)
    return unique


def _resumed(kept: dict[str, bool], result: dict, straight: dict, start: int) -> ResumedRun:
    losses = result["losses"].tolist()
    reference = straight["losses"].tolist()[start:]
    first = next((start + i for i, (a, b) in enumerate(zip(losses, reference, strict=True)) if a != b), None)
    parameters, target = result["parameters"], straight["parameters"]
    return ResumedRun(
        kept=kept,
        losses=losses,
        equal=all(torch.equal(parameters[name], target[name]) for name in target),
        first_divergent_step=first,
        max_loss_diff=max(abs(a - b) for a, b in zip(losses, reference, strict=True)),
        max_param_diff=max(float((parameters[name] - target[name]).abs().max()) for name in target),
    )


def resume_runs(options: ResumeOptions, report=None, variants: list[dict[str, bool]] | None = None) -> ResumeResult:
    """The straight-through run with its checkpoint, then one fresh resumed run per variant (default: the chosen)."""
    variants = variants or [options.kept()]
    config = options.job().as_dict()
    after = options.total_steps - options.checkpoint_at
    total = options.total_steps + after * len(variants)

    def progress(offset: int):
        return lambda done: report(offset + done, total) if report else None

    with tempfile.TemporaryDirectory(prefix="repro-resume-") as folder:
        checkpoint = str(Path(folder) / "checkpoint.pt")
        straight_request = {"config": config, "resumable": True, "save_at": options.checkpoint_at}
        (straight,) = fresh.run_fresh(
            [{**straight_request, "save_path": checkpoint}], on_progress=progress(0), workdir=Path(folder)
        )
        size = Path(checkpoint).stat().st_size
        parts = sorted(torch.load(checkpoint, weights_only=True))
        resumed = fresh.run_fresh(
            [{"config": config, "resumable": True, "resume": {"path": checkpoint, **kept}} for kept in variants],
            on_progress=progress(options.total_steps),
            workdir=Path(folder),
        )
    return ResumeResult(
        options=options,
        straight_losses=straight.result["losses"].tolist(),
        resumed=[
            _resumed(kept, outcome.result, straight.result, options.checkpoint_at)
            for kept, outcome in zip(variants, resumed, strict=True)
        ],
        checkpoint_bytes=size,
        checkpoint_parts=parts,
    )


def resume_study(options: ResumeOptions, report=None) -> ResumeResult:
    """The page's experiment: the chosen resume, full state, and each part forgotten alone."""
    return resume_runs(options, report, study_variants(options))


def resume(
    total_steps: int = 20,
    checkpoint_at: int = 8,
    keep_optimizer_state: bool = True,
    keep_rng_state: bool = True,
    keep_sampler_state: bool = True,
    seed: int = 0,
) -> ResumeResult:
    """Train straight through, and resume from a checkpoint in a new process; compare them bit for bit."""
    return resume_runs(
        ResumeOptions(
            total_steps=total_steps,
            checkpoint_at=checkpoint_at,
            keep_optimizer_state=keep_optimizer_state,
            keep_rng_state=keep_rng_state,
            keep_sampler_state=keep_sampler_state,
            seed=seed,
        )
    )
