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
from unittest import mock

import torch
import torch._dynamo as dynamo
import torch._dynamo.guards

import explorers.compiled.presets as presets
from explorers import bounds
from explorers.compiled.breaks import GraphBreaks, explain, fullgraph_error
from explorers.compiled.recompiles import Recompiles, recompiles
from explorers.compiled.timing import Payoff, payoff
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


@dataclass(frozen=True)
class TraceOptions:
    """What `explain` and `fullgraph=True` depend on: one call of the model."""

    preset: str
    width: int
    seed: int


@dataclass(frozen=True)
class ScheduleOptions:
    """What the recompile schedule depends on; it runs the longest schedule, and a shorter one is its prefix
    (each call's compiles depend on the calls before it, never after)."""

    preset: str
    dynamic: str
    recompile_limit: int
    width: int
    seed: int


@dataclass(frozen=True)
class Traced:
    breaks: GraphBreaks
    fullgraph_error: str | None
    seconds: float


def _fresh(work):
    """`work()` in a fresh dynamo, left fresh. For what the page reads (graphs, breaks, guards, recompiles),
    not for timing: dynamo's own timing of each new guard set is skipped. It flushes the CPU cache to time
    one guard check for a log line (`profile_guard_manager`): 16 ms of each 50 ms compile here, a third of
    the recompile schedule, and not one of the lab's results. `measure` compiles without this: its compile
    time is shown."""
    try:
        dynamo.reset()
        presets.forward_calls = 0
        with mock.patch.object(torch._dynamo.guards, "profile_guard_manager", _guard_latency_not_timed):
            return work()
    finally:
        dynamo.reset()
        presets.forward_calls = 0


def _guard_latency_not_timed(*args) -> float:
    return 0.0  # the latency dynamo logs: 0 us


def trace(options: TraceOptions, report=None) -> Traced:
    start = time.perf_counter()
    model = _model(options.preset, options.width, options.seed)
    batch = presets.inputs(options.preset, 0, options.seed)
    found = _fresh(lambda: explain(model, batch))
    if report:
        report(1, 2)
    error = _fresh(lambda: fullgraph_error(model, batch))
    return Traced(found, error, time.perf_counter() - start)


def schedule(options: ScheduleOptions, report=None) -> Recompiles:
    model = _model(options.preset, options.width, options.seed)
    batches = [presets.inputs(options.preset, step, options.seed) for step in range(STEPS_RANGE[1])]
    return _fresh(lambda: recompiles(model, batches, DYNAMIC[options.dynamic], options.recompile_limit))


def parts(options: CompileOptions) -> tuple[TraceOptions, ScheduleOptions]:
    o = options
    return TraceOptions(o.preset, o.width, o.seed), ScheduleOptions(
        o.preset, o.dynamic, o.recompile_limit, o.width, o.seed
    )


def combine(options: CompileOptions, traced: Traced, calls: Recompiles) -> Analysis:
    return Analysis(
        options, traced.breaks, traced.fullgraph_error, calls.first(options.steps), traced.seconds, torch.__version__
    )


def analyse(options: CompileOptions, report=None) -> Analysis:
    """Both parts, for a notebook (the page runs them apart, so each is cached by what it depends on)."""
    trace_options, schedule_options = parts(options)
    return combine(options, trace(trace_options), schedule(schedule_options))


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
