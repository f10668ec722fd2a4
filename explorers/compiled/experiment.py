"""The compile lab's experiments: a preset model's graph breaks and recompiles (fast), and its payoff (slow).

`analyse(CompileOptions(...))` explains one call (`torch._dynamo.explain`), tries `fullgraph=True`
and runs the recompile schedule: a second or two, since no code is generated. `measure(
PayoffOptions(...))` compiles a training step with inductor and times it against eager: tens of
seconds cold. Both reset dynamo before and after and draw weights from a seeded, isolated RNG,
so the page runs them on the run engine, where results are cached by options.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch._dynamo as dynamo

from explorers import bounds
from explorers.compiled import presets
from explorers.compiled.breaks import GraphBreaks, explain, fullgraph_error
from explorers.compiled.payoff import Payoff, payoff
from explorers.compiled.recompiles import Recompiles, recompiles
from explorers.rng import isolated_rng

DYNAMIC = {"none": None, "false": False, "true": True}  # torch.compile(dynamic=...), as the page names them
STEPS_RANGE = (2, 24)
LIMIT_RANGE = (1, 8)
WIDTH_RANGE = (16, 256)
PAYOFF_STEPS_RANGE = (5, 60)
SEED_RANGE = (0, 9_999)


@dataclass(frozen=True)
class CompileOptions:
    preset: str = presets.DEFAULT_PRESET
    dynamic: str = "none"
    steps: int = 12
    recompile_limit: int = 4
    width: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"preset": presets.PRESETS, "dynamic": DYNAMIC})
        bounds.check_ints(
            self, {"steps": STEPS_RANGE, "recompile_limit": LIMIT_RANGE, "width": WIDTH_RANGE, "seed": SEED_RANGE}
        )


@dataclass(frozen=True)
class PayoffOptions:
    preset: str = "clean"
    width: int = 64
    steps: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"preset": presets.PRESETS})
        bounds.check_ints(self, {"width": WIDTH_RANGE, "steps": PAYOFF_STEPS_RANGE, "seed": SEED_RANGE})


@dataclass(frozen=True)
class Analysis:
    options: CompileOptions
    breaks: GraphBreaks
    fullgraph_error: str | None
    recompiles: Recompiles
    seconds: float
    torch_version: str


@dataclass(frozen=True)
class PayoffRun:
    options: PayoffOptions
    payoff: Payoff
    first_in_process: bool  # this process had not compiled with inductor before: the first step loaded it too
    seconds: float
    torch_version: str


_inductor_used = False


def _model(preset: str, width: int, seed: int) -> torch.nn.Module:
    with isolated_rng(seed):
        return presets.PRESETS[preset].build(width)


def analyse(options: CompileOptions, report=None) -> Analysis:
    start = time.perf_counter()
    model = _model(options.preset, options.width, options.seed)
    batches = [presets.inputs(options.preset, step, options.seed) for step in range(options.steps)]
    total = options.steps + 2
    try:
        dynamo.reset()
        presets.forward_calls = 0
        found = explain(model, batches[0])
        if report:
            report(1, total)
        dynamo.reset()
        error = fullgraph_error(model, batches[0])
        if report:
            report(2, total)
        dynamo.reset()
        presets.forward_calls = 0
        schedule = recompiles(model, batches, DYNAMIC[options.dynamic], options.recompile_limit)
    finally:
        dynamo.reset()
        presets.forward_calls = 0
    if report:
        report(total, total)
    return Analysis(options, found, error, schedule, time.perf_counter() - start, torch.__version__)


def measure(options: PayoffOptions, report=None) -> PayoffRun:
    global _inductor_used
    start = time.perf_counter()
    model = _model(options.preset, options.width, options.seed)
    inputs = [presets.inputs(options.preset, step, options.seed) for step in range(4)]
    targets = [presets.targets(x, step, options.seed) for step, x in enumerate(inputs)]
    first = not _inductor_used
    _inductor_used = True
    try:
        dynamo.reset()
        presets.forward_calls = 0
        result = payoff(model, inputs, targets, steps=options.steps, report=report)
    finally:
        dynamo.reset()
        presets.forward_calls = 0
    return PayoffRun(options, result, first, time.perf_counter() - start, torch.__version__)
