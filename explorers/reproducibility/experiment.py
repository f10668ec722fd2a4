"""The Reproducibility lab's two experiments: rerun and compare, and save-load-continue.

**Rerun and compare.** `compare_runs(options, report)` is the run engine's experiment (the page runs it in an engine
worker, which starts one new process per run, see `fresh`); `compare(...)` is the notebook call.
Besides the verdict (bitwise equal, the first step whose loss differs, the largest parameter
difference) it says, per source of randomness, whether what that source produced was identical
in every run: the initial weights, the batch order, the augmentation draws, the RNG state
dropout drew from. It also counts augmentation draws that repeat an earlier draw of the same
run (the Generator-in-__init__ pattern with workers), and records each run's manifest.

**Resume.** The straight-through run trains `total_steps` steps in one process and writes a checkpoint once
`checkpoint_at` steps are done (writing it draws from no RNG, so the run is unchanged). Each
resumed run is a new process that starts as any run of the script does (seeds from the
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

import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import explorers.reproducibility.fresh as fresh
import explorers.reproducibility.manifest as manifest
from explorers import bounds
from explorers.reproducibility.job import SEED_RANGE, SOURCES, STEPS_RANGE, JobConfig, check_flags

RUNS_RANGE = (2, 5)
TRIAL_RANGE = (0, 1_000_000)
COMPONENTS = ("initial weights", "batch order", "augmentation", "dropout RNG")


@dataclass(frozen=True)
class CompareOptions:
    runs: int = 2
    seed_torch: bool = True
    seed_numpy: bool = True
    seed_python: bool = True
    seed_workers: bool = True
    deterministic: bool = True
    num_workers: int = 2
    steps: int = 20
    seed: int = 0
    augmentation: str = "global"
    trial: int = 0  # which repetition of these settings: "run again" asks for new processes

    def __post_init__(self) -> None:
        check_flags(self, SOURCES)
        bounds.check_ints(self, {"runs": RUNS_RANGE, "trial": TRIAL_RANGE})
        self.job()  # the job's own bounds

    def job(self) -> JobConfig:
        fields = {f.name for f in dataclasses.fields(JobConfig)}
        return JobConfig(**{name: value for name, value in dataclasses.asdict(self).items() if name in fields})


@dataclass(frozen=True)
class RunRecord:
    losses: list[float]
    parameters_digest: str
    main_drew: dict[str, bool]  # did this process's global torch / numpy / python RNG move during the run
    workers_seen: list[int]  # DataLoader worker ids that produced samples (-1: the main process)
    repeated_draws: int  # augmentation draws equal to an earlier draw in the same run
    draws: int
    first_draws: list[list[tuple[int, float]]]  # the first two steps: (worker, scale) per sample
    start_s: float  # launch until the new process was ready to run (fresh.Outcome.start_s)
    launch: str  # how it started: a new interpreter, or forked from the template (fresh.INTERPRETER ...)
    timings: dict[str, float]  # the job's own phases in seconds (job.run's "timings")
    imports: dict[str, list[str]]  # heavy modules each phase imported ("seeding", "building")
    str_hash: int  # hash() of a fixed string in the run's process: equal across runs iff they share a hash seed
    total_s: float  # launch until its result was written
    manifest: dict


@dataclass(frozen=True)
class Comparison:
    options: CompareOptions
    runs: list[RunRecord]
    bitwise_equal: bool  # every run's final parameters identical, bit for bit
    first_divergent_step: int | None  # None when every loss matched, else the first step whose loss differs
    max_param_diff: float  # largest |difference| between any run's final parameters and run 1's
    max_loss_diff: float
    component_first_difference: dict[str, int | None]  # per component in COMPONENTS; None: identical everywhere
    deterministic_in_effect: bool
    wall_s: float

    @property
    def losses(self) -> list[list[float]]:
        return [run.losses for run in self.runs]

    @property
    def steps(self) -> int:
        return len(self.runs[0].losses)

    def loss_differences(self) -> list[list[float]]:
        """Per run after the first, |loss - run 1's loss| at every step."""
        base = self.runs[0].losses
        return [[abs(a - b) for a, b in zip(run.losses, base, strict=True)] for run in self.runs[1:]]


def _first_difference(per_run: list[list]) -> int | None:
    """The first index at which any run's item differs from run 1's, or None."""
    for step, first in enumerate(per_run[0]):
        if any(not _same(other[step], first) for other in per_run[1:]):
            return step
    return None


def _same(a, b) -> bool:
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def _record(outcome: fresh.Outcome, config: JobConfig, code: dict) -> RunRecord:
    result = outcome.result
    draws = result["draws"].reshape(-1, 2)
    distinct = len({tuple(row) for row in draws.tolist()})
    workers = result["workers"]
    return RunRecord(
        losses=result["losses"].tolist(),
        parameters_digest=result["parameters_digest"],
        main_drew=dict(result["main_drew"]),
        workers_seen=sorted(set(workers.reshape(-1).tolist())),
        repeated_draws=len(draws) - distinct,
        draws=len(draws),
        first_draws=[
            list(zip(workers[step].tolist(), result["draws"][step, :, 1].tolist(), strict=True))
            for step in range(min(2, len(workers)))
        ],
        start_s=outcome.start_s,
        launch=outcome.launch,
        timings=dict(result["timings"]),
        imports={phase: list(names) for phase, names in result["imports"].items()},
        str_hash=int(result["str_hash"]),
        total_s=outcome.total_s,
        manifest=manifest.build(config.as_dict(), result, code),
    )


def compare_runs(options: CompareOptions, report=None) -> Comparison:
    """The job in `options.runs` fresh processes; `report(done, total)` hears every step and may raise to stop."""
    config = options.job()
    total = options.runs * config.steps
    code = manifest.code_version()

    def progress(done: int) -> None:
        if report:
            report(done, total)

    started = time.perf_counter()
    outcomes = fresh.run_fresh([{"config": config.as_dict()}] * options.runs, on_progress=progress)
    results = [outcome.result for outcome in outcomes]
    first = results[0]["parameters"]
    max_param_diff = max(
        float((result["parameters"][name] - first[name]).abs().max()) for result in results[1:] for name in first
    )
    bitwise = all(torch.equal(result["parameters"][name], first[name]) for result in results[1:] for name in first)
    records = [_record(outcome, config, code) for outcome in outcomes]
    losses = [record.losses for record in records]
    loss_gap = max((abs(a - b) for run in losses[1:] for a, b in zip(run, losses[0], strict=True)), default=0.0)
    components = {
        "initial weights": _first_difference([[r["initial_weights"]] for r in results]),
        "batch order": _first_difference([list(r["indices"]) for r in results]),
        "augmentation": _first_difference([list(r["draws"]) for r in results]),
        "dropout RNG": _first_difference([r["dropout_rng"] for r in results]),
    }
    return Comparison(
        options=options,
        runs=records,
        bitwise_equal=bitwise,
        first_divergent_step=_first_difference(losses),
        max_param_diff=max_param_diff,
        max_loss_diff=loss_gap,
        component_first_difference=components,
        deterministic_in_effect=results[0]["facts"]["determinism"]["use_deterministic_algorithms"],
        wall_s=time.perf_counter() - started,
    )


def compare(
    runs: int = 2,
    seed_torch: bool = True,
    seed_numpy: bool = True,
    seed_python: bool = True,
    seed_workers: bool = True,
    deterministic: bool = True,
    num_workers: int = 2,
    steps: int = 20,
    seed: int = 0,
    augmentation: str = "global",
) -> Comparison:
    """Run the lab's job `runs` times, each in a new Python process, and compare them bit for bit."""
    options = CompareOptions(
        runs=runs,
        seed_torch=seed_torch,
        seed_numpy=seed_numpy,
        seed_python=seed_python,
        seed_workers=seed_workers,
        deterministic=deterministic,
        num_workers=num_workers,
        steps=steps,
        seed=seed,
        augmentation=augmentation,
    )
    return compare_runs(options)


# --- Resume ---

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
