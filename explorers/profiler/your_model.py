"""Profile your own training step by phase: data, host-to-device copy, forward, backward, optimizer.

`profile_training` runs a bounded number of real training steps under `torch.profiler`
with a wait / warm-up / active schedule, after the model's own warm-up. Each phase is labelled with `record_function`,
so the profiler's own events give each phase's time; the step's wall time is the
profiler's `ProfilerStep` span, and what the phases do not cover (the loop itself,
the profiler's bookkeeping) is reported as `other_ms`, never hidden. The same steps are
then run without the profiler, which gives the profiler's overhead as a ratio.

Warm-up steps run before the profiler starts (it records only its active steps), so
they are timed with `time.perf_counter` around the same phases (their `source` says so).

From a notebook::

    from explorers import profiler
    result = profiler.profile_training(model, loader, optimizer, torch.nn.functional.cross_entropy)
    result.verdict, result.evidence, result.steps[0].phases

What to expect: a loader with a slow collate is "data-bound" and its data phase holds
most of the step; a large model on small batches is "compute-bound".
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

PHASES = ("data", "copy", "forward", "backward", "optimizer")
LABEL = "phase/"  # prefix of our record_function labels
VERDICTS = {"data": "data-bound", "copy": "copy-bound", "compute": "compute-bound", "optimizer": "optimizer-bound"}
TOP_OPS = 12

# torch.profiler is process-wide: two at once corrupt each other's results.
_PROFILER_LOCK = threading.Lock()


@dataclass(frozen=True)
class StepTiming:
    phases: dict[str, float]  # milliseconds per phase
    wall_ms: float
    spans: tuple[tuple[str, float, float], ...] = ()  # (phase, start, end) ms from the first active step
    source: str = "profiler"  # or "perf_counter" for steps the profiler did not record

    @property
    def other_ms(self) -> float:
        """Wall time no phase accounts for: loop overhead and the profiler's own bookkeeping."""
        return max(self.wall_ms - sum(self.phases.values()), 0.0)


@dataclass(frozen=True)
class OpTiming:
    name: str
    calls: int
    self_ms: float
    total_ms: float


@dataclass(frozen=True)
class ProfileResult:
    steps: tuple[StepTiming, ...]  # the active steps, from the profiler's events
    warmup_steps: tuple[StepTiming, ...]  # timed with perf_counter: the profiler does not record them
    top_ops: tuple[OpTiming, ...]
    naive_ms: tuple[float, ...]  # perf_counter around each active step, as a hand-rolled timer would see it
    unprofiled_ms: tuple[float, ...]  # as many steps just before, on the warm model, with no profiler running
    overhead_ratio: float  # profiled over unprofiled step time (medians)
    verdict: str
    evidence: str
    trace_path: str
    device: str
    synchronized: bool
    notes: tuple[str, ...] = field(default=())

    def mean_phases(self) -> dict[str, float]:
        return {p: statistics.fmean(s.phases[p] for s in self.steps) for p in PHASES}

    @property
    def mean_wall_ms(self) -> float:
        return statistics.fmean(s.wall_ms for s in self.steps)


def _cycle(loader) -> Iterator:
    """Batches forever: a fresh pass over the loader whenever one runs out."""
    while True:
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise ValueError("the DataLoader yields no batches")


def _to(batch, device: torch.device, non_blocking: bool):
    if torch.is_tensor(batch):
        return batch.to(device, non_blocking=non_blocking)
    return type(batch)(_to(item, device, non_blocking) for item in batch)


class _Stepper:
    """One training step, phase by phase, labelled for the profiler and timed with perf_counter."""

    def __init__(self, model, loader, optimizer, loss_fn, device: torch.device, synchronize: bool):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.batches = _cycle(loader)
        self.device = device
        self.non_blocking = bool(getattr(loader, "pin_memory", False))
        self.sync = synchronize and device.type == "cuda"

    @contextlib.contextmanager
    def _phase(self, name: str, timings: dict[str, float]):
        start = time.perf_counter()
        with record_function(LABEL + name):
            yield
            if self.sync:  # charge asynchronous GPU work to the phase that launched it
                torch.cuda.synchronize(self.device)
        timings[name] = (time.perf_counter() - start) * 1000

    def step(self) -> tuple[dict[str, float], float]:
        timings: dict[str, float] = {}
        start = time.perf_counter()
        with self._phase("data", timings):
            inputs, targets = next(self.batches)
        with self._phase("copy", timings):
            inputs, targets = _to((inputs, targets), self.device, self.non_blocking)
        with self._phase("forward", timings):
            loss = self.loss_fn(self.model(inputs), targets)
        with self._phase("backward", timings):
            loss.backward()
        with self._phase("optimizer", timings):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return timings, (time.perf_counter() - start) * 1000


def _steps_from_events(events) -> tuple[StepTiming, ...]:
    """Per ProfilerStep span, the time of each labelled phase inside it."""
    spans = sorted((e for e in events if e.name.startswith("ProfilerStep")), key=lambda e: e.time_range.start)
    phases = [e for e in events if e.name.startswith(LABEL)]
    origin = spans[0].time_range.start if spans else 0
    steps = []
    for span in spans:
        inside = [
            e for e in phases if span.time_range.start <= e.time_range.start and e.time_range.end <= span.time_range.end
        ]
        totals = {p: 0.0 for p in PHASES}
        marks = []
        for event in inside:
            name = event.name.removeprefix(LABEL)
            totals[name] += (event.time_range.end - event.time_range.start) / 1000
            marks.append((name, (event.time_range.start - origin) / 1000, (event.time_range.end - origin) / 1000))
        wall = (span.time_range.end - span.time_range.start) / 1000
        steps.append(StepTiming(totals, wall, tuple(marks)))
    return tuple(steps)


def _top_ops(profiler) -> tuple[OpTiming, ...]:
    averages = [a for a in profiler.key_averages() if not a.key.startswith((LABEL, "ProfilerStep"))]
    averages.sort(key=lambda a: a.self_cpu_time_total, reverse=True)
    return tuple(
        OpTiming(a.key, a.count, a.self_cpu_time_total / 1000, a.cpu_time_total / 1000) for a in averages[:TOP_OPS]
    )


def judge(mean_phases: dict[str, float], wall_ms: float) -> tuple[str, str]:
    """The verdict, and the evidence for it in plain words with numbers."""
    shares = {
        "data": mean_phases["data"],
        "copy": mean_phases["copy"],
        "compute": mean_phases["forward"] + mean_phases["backward"],
        "optimizer": mean_phases["optimizer"],
    }
    biggest = max(shares, key=shares.get)
    what = "forward + backward" if biggest == "compute" else biggest
    ranked = sorted(shares.items(), key=lambda kv: kv[1], reverse=True)
    runner_up = ranked[1]
    evidence = (
        f"{what} took {shares[biggest]:.1f} ms of a {wall_ms:.1f} ms step "
        f"({shares[biggest] / wall_ms:.0%}); next was {runner_up[0]} at {runner_up[1]:.1f} ms "
        f"({runner_up[1] / wall_ms:.0%})."
    )
    return VERDICTS[biggest], evidence


def profile_training(
    model: torch.nn.Module,
    loader,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    *,
    device: str | torch.device = "cpu",
    wait: int = 1,
    warmup: int = 2,
    active: int = 5,
    synchronize: bool = True,
    trace_path: str | Path | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> ProfileResult:
    """Warm up for `warmup` steps, time `active` steps without the profiler, then profile `active` steps.

    The profiler's schedule waits `wait` steps and warms itself up for one before its
    active window. The model is trained for real (this is a training step, not a
    simulation). Only one profile runs at a time in a process; the profiler is always
    stopped, also on error. `on_step(done, total)` reports progress and may raise to cancel.
    """
    if not (0 <= wait <= 10 and 0 <= warmup <= 20 and 1 <= active <= 50):
        raise ValueError("wait in [0, 10], warmup in [0, 20], active in [1, 50]")
    device = torch.device(device)
    model.to(device).train()
    stepper = _Stepper(model, loader, optimizer, loss_fn, device, synchronize)
    trace_path = Path(trace_path or tempfile.mkstemp(prefix="step-trace-", suffix=".json")[1])
    total = warmup + active + wait + 1 + active
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    recorded: dict[str, object] = {}

    def ready(prof) -> None:
        prof.export_chrome_trace(str(trace_path))
        recorded["events"] = prof.events()
        recorded["top_ops"] = _top_ops(prof)

    done = 0

    def advance() -> None:
        nonlocal done
        done += 1
        if on_step:
            on_step(done, total)

    # Warm the model up, then time the unprofiled baseline on the warm model, right before profiling.
    warmup_steps = []
    for _ in range(warmup):
        timings, wall = stepper.step()
        warmup_steps.append(StepTiming(timings, wall, source="perf_counter"))
        advance()
    unprofiled = []
    for _ in range(active):
        unprofiled.append(stepper.step()[1])
        advance()
    naive = []
    plan = schedule(wait=wait, warmup=1, active=active, repeat=1)  # the profiler warms itself up for one step
    with _PROFILER_LOCK, profile(activities=activities, on_trace_ready=ready, schedule=plan) as prof:
        for index in range(wait + 1 + active):
            wall = stepper.step()[1]
            if index > wait:
                naive.append(wall)
            prof.step()
            advance()
    steps = _steps_from_events(recorded["events"])[:active]
    result_phases = {p: statistics.fmean(s.phases[p] for s in steps) for p in PHASES}
    wall_ms = statistics.fmean(s.wall_ms for s in steps)
    verdict, evidence = judge(result_phases, wall_ms)
    return ProfileResult(
        steps=steps,
        warmup_steps=tuple(warmup_steps),
        top_ops=recorded["top_ops"],
        naive_ms=tuple(naive),
        unprofiled_ms=tuple(unprofiled),
        overhead_ratio=statistics.median(naive) / statistics.median(unprofiled),
        verdict=verdict,
        evidence=evidence,
        trace_path=str(trace_path),
        device=str(device),
        synchronized=stepper.sync,
    )
