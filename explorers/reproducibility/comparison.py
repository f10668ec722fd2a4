"""Rerun and compare: the same job in N fresh processes, and what differed between them.

`compare_runs(options, report)` is the run engine's experiment (the page runs it in an engine
worker, which starts one new interpreter per run); `compare(...)` is the notebook call.
Besides the verdict (bitwise equal, the first step whose loss differs, the largest parameter
difference) it says, per source of randomness, whether what that source produced was identical
in every run: the initial weights, the batch order, the augmentation draws, the RNG state
dropout drew from. It also counts augmentation draws that repeat an earlier draw of the same
run (the Generator-in-__init__ pattern with workers), and records each run's manifest.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch

from explorers import bounds
from explorers.reproducibility import fresh, manifest
from explorers.reproducibility.job import SOURCES, JobConfig, check_flags

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
    start_s: float  # launch until the fresh interpreter had imported torch
    timings: dict[str, float]  # the job's own phases in seconds (job.run's "timings")
    imports: dict[str, list[str]]  # heavy modules each phase imported ("seeding", "building")
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
        timings=dict(result["timings"]),
        imports={phase: list(names) for phase, names in result["imports"].items()},
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
