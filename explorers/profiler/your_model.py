"""Profile your own training step by phase: data, host-to-device copy, forward, backward, optimizer.

`profile_training` trains a deep copy of your model and optimizer (yours are never
touched: not their weights, buffers, `.grad` fields or state, nor your batches or the
global RNG) for a bounded number of real steps, in this order:

- `warmup` steps, timed with `time.perf_counter`: the first steps pay one-off costs;
- `rounds` rounds, each of `active` steps without the profiler (a stopwatch around each
  step and each phase), then a profiler window: `torch.profiler` is entered, warms up,
  records `active` steps, stops and hands its events over, and the window's whole wall
  time is kept too. So overhead is measured on alternating blocks, per step and per
  window, and its spread across rounds is known. Before each block a few untimed steps
  let a DataLoader's workers use up what they prefetched during the pause.

Each phase is labelled with `record_function`, and so is the step's body (STEP_LABEL), so the
profiler's own events give each phase's time and the step's wall time; what the phases do not
cover (the step's own code between and around them) is `other_ms`, not hidden. The time between
step bodies (the progress report, `prof.step()`) is in the profiler's `ProfilerStep` span but in
no step's bar. The verdict names the largest part of the step when it leads the others by
more than the noise margin of its per-step differences; otherwise it says "too close to call".

From a notebook::

    from explorers import profiler
    result = profiler.profile_training(model, loader, optimizer, torch.nn.functional.cross_entropy)
    result.verdict, result.evidence, result.steps[0].phases, result.overhead_ratios

Batches follow `explorers.batches`. A batch that is a pair `(input, target)` is split into
the two, as TensorDataset yields them; any other batch (a dict, a tensor, a longer tuple) is the
model input as a whole, with no target. The model input is called as `model(x)`, `model(*x)`
for a tuple or list, or `model(**x)` for a dict; the loss gets the raw output (a Hugging Face
`ModelOutput` included): `loss_fn(output, target)` with a target, `loss_fn(output, batch)`
without. So a loader of dict batches with `labels` inside needs nothing else::

    profiler.profile_training(hf_model, loader, optimizer, lambda out, batch: out.loss)

`split_batch`, a function from one batch to `(model input, target or None)`, says otherwise:
`split_batch=lambda b: (b["image"], b["label"])`. Module hooks on your model fire on the copy
(a UserWarning says so); tensor hooks are registered again on the copy's parameters.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from explorers import batches
from explorers.profiler.noise import paired_gap
from explorers.units import ms

PHASES = ("data", "copy", "forward", "backward", "optimizer")
LABEL = "phase/"  # prefix of our record_function labels
STEP_LABEL = "lab/step"  # the record_function label around one step's body: the step's wall time
# What a verdict can name: forward and backward together are the step's compute.
CATEGORIES = {"data": ("data",), "copy": ("copy",), "compute": ("forward", "backward"), "optimizer": ("optimizer",)}
CATEGORY_NAMES = {"data": "data", "copy": "copy", "compute": "forward + backward", "optimizer": "optimizer"}
VERDICTS = {"data": "data-bound", "copy": "copy-bound", "compute": "compute-bound", "optimizer": "optimizer-bound"}
TOO_CLOSE = "too close to call"
TOP_OPS = 12
PREFETCH_FACTOR = 2  # DataLoader's default batches in flight per worker
LIMITS = {"warmup": (0, 20), "active": (1, 50), "rounds": (2, 10)}

# torch.profiler is process-wide: two at once corrupt each other's results.
_PROFILER_LOCK = threading.Lock()


@dataclass(frozen=True)
class StepTiming:
    phases: dict[str, float]  # milliseconds per phase
    wall_ms: float
    spans: tuple[tuple[str, float, float], ...] = ()  # (phase, start, end) ms from its round's first profiled step
    source: str = "profiler"  # or "perf_counter" for steps the profiler did not record

    @property
    def other_ms(self) -> float:
        """Wall time of the step's body that no phase accounts for: its own code between and around the phases."""
        return max(self.wall_ms - sum(self.phases.values()), 0.0)


@dataclass(frozen=True)
class OpTiming:
    name: str
    calls: int
    self_ms: float
    total_ms: float


@dataclass(frozen=True)
class Verdict:
    label: str  # one of VERDICTS' values, or TOO_CLOSE
    evidence: str
    contenders: tuple[str, ...]  # the categories in the running: the leader, and any within the noise of it


@dataclass(frozen=True)
class ProfileResult:
    steps: tuple[StepTiming, ...]  # the profiled steps, round after round, from the profiler's events
    warmup_steps: tuple[StepTiming, ...]  # timed with perf_counter: the profiler does not record them
    top_ops: tuple[OpTiming, ...]  # over every profiled step
    naive_ms: tuple[float, ...]  # perf_counter around each profiled step, as a hand-rolled timer would see it
    unprofiled_ms: tuple[float, ...]  # the blocks of steps without the profiler, round after round
    steps_per_round: int
    verdict: str
    evidence: str
    contenders: tuple[str, ...]
    trace_path: str  # the last round's profiled steps, as a Chrome trace
    device: str
    synchronized: bool
    unprofiled_steps: tuple[StepTiming, ...] = ()  # the steps of unprofiled_ms, with their phases (perf_counter)
    # Per round, the whole profiler window: entering it, its warm-up, the recorded steps, stopping, the results.
    window_ms: tuple[float, ...] = ()
    profiler_warmup_steps: int = 1  # steps the profiler warms up for in each window
    loader_workers: int = 0  # the loader's num_workers, as profile_training read it
    prefetch_factor: int = PREFETCH_FACTOR  # batches each worker keeps ready, as profile_training read it
    first_iterator_ms: float | None = None  # creating the loader's first iterator, inside the first step's `data`
    optimizer_states_created: int | None = None  # parameters the optimizer made state for in the first step

    @property
    def rounds(self) -> int:
        return len(self.steps) // self.steps_per_round

    @property
    def overhead_ratios(self) -> tuple[float, ...]:
        """Per round: mean step time with the profiler over the mean of the block without it just before."""
        n = self.steps_per_round
        blocks = range(0, len(self.naive_ms), n)
        return tuple(
            statistics.fmean(self.naive_ms[i : i + n]) / statistics.fmean(self.unprofiled_ms[i : i + n]) for i in blocks
        )

    @property
    def overhead_ratio(self) -> float:
        return statistics.median(self.overhead_ratios)

    @property
    def unprofiled_block_ms(self) -> tuple[float, ...]:
        """Per round, the block of steps without the profiler, summed."""
        n = self.steps_per_round
        return tuple(sum(self.unprofiled_ms[i : i + n]) for i in range(0, len(self.unprofiled_ms), n))

    @property
    def window_steps(self) -> int:
        """Steps a profiler window trains: its warm-up steps, then the recorded ones."""
        return self.profiler_warmup_steps + self.steps_per_round

    @property
    def window_plain_ms(self) -> tuple[float, ...]:
        """Per round, as many steps as a window trains, without the profiler: the round's mean plain step times that."""
        return tuple(block / self.steps_per_round * self.window_steps for block in self.unprofiled_block_ms)

    @property
    def window_ratios(self) -> tuple[float, ...]:
        """Per round: the whole profiler window over as many steps (warm-up and recorded) without it."""
        return tuple(w / b for w, b in zip(self.window_ms, self.window_plain_ms, strict=True))

    @property
    def last_round(self) -> tuple[StepTiming, ...]:
        """The profiled steps the Chrome trace holds."""
        return self.steps[-self.steps_per_round :]

    def mean_phases(self) -> dict[str, float]:
        return {p: statistics.fmean(s.phases[p] for s in self.steps) for p in PHASES}

    @property
    def mean_wall_ms(self) -> float:
        return statistics.fmean(s.wall_ms for s in self.steps)

    @property
    def mean_unprofiled_ms(self) -> float:
        return statistics.fmean(self.unprofiled_ms)


def split_pair(batch) -> tuple:
    """The default `split_batch`: a pair is `(input, target)`, as TensorDataset yields; anything else is the input."""
    if isinstance(batch, tuple | list) and len(batch) == 2:
        return batch[0], batch[1]
    return batch, None


def settle_steps(num_workers: int, prefetch_factor: int | None) -> int:
    """Untimed steps after a pause: a loader's workers prefetch up to this many batches while the loop is paused."""
    return num_workers * (prefetch_factor or PREFETCH_FACTOR)


def total_steps(warmup: int, active: int, rounds: int, settle: int) -> int:
    return warmup + rounds * len(_round_roles(active, settle))


def _round_roles(active: int, settle: int) -> list[str]:
    """What each step of one round is for; the profiler's schedule follows the same order."""
    return (
        ["settle"] * settle
        + ["unprofiled"] * active
        + ["profiler warm-up"] * _profiler_warmup(settle)
        + ["profiled"] * active
    )


def _profiler_warmup(settle: int) -> int:
    return max(1, settle)  # the profiler's start is a pause too, and it warms itself up for at least one step


class _Batches:
    """Batches forever, a fresh pass over the loader whenever one runs out; times making the first iterator."""

    def __init__(self, loader):
        self.loader = loader
        self.first_iterator_ms: float | None = None
        self._batches = self._cycle()

    def __next__(self):
        return next(self._batches)

    def _cycle(self) -> Iterator:
        while True:
            start = time.perf_counter()
            batches = iter(self.loader)  # a DataLoader starts its worker processes here
            if self.first_iterator_ms is None:
                self.first_iterator_ms = (time.perf_counter() - start) * 1000
            yielded = False
            for batch in batches:
                yielded = True
                yield batch
            if not yielded:
                raise ValueError("The loader yields no batches.")


def _fresh(value, device: torch.device, non_blocking: bool):
    """`value` with every tensor copied to `device`: the step never writes into, or fills `.grad` of, your tensors."""
    if torch.is_tensor(value):
        copied = value.detach().to(device, non_blocking=non_blocking, copy=True)
        return copied.requires_grad_(value.requires_grad)
    if isinstance(value, Mapping):
        return {key: _fresh(item, device, non_blocking) for key, item in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_fresh(item, device, non_blocking) for item in value))
    if isinstance(value, tuple | list):
        return type(value)(_fresh(item, device, non_blocking) for item in value)
    return value


def _checked_pair(pair) -> tuple:
    if isinstance(pair, tuple | list) and len(pair) == 2:
        return pair[0], pair[1]
    raise ValueError(f"split_batch must return a (model input, target) pair, not a {type(pair).__name__}.")


def _checked_loss(loss) -> torch.Tensor:
    if not loss.requires_grad:
        raise ValueError("The loss does not require grad: no trainable parameter reached it (are all of them frozen?).")
    return loss


class _Stepper:
    """One training step, phase by phase, labelled for the profiler and timed with perf_counter."""

    def __init__(self, model, loader, optimizer, loss_fn, split_batch, device: torch.device, synchronize: bool):
        self.model, self.optimizer, self.loss_fn, self.split_batch = model, optimizer, loss_fn, split_batch
        self.batches = _Batches(loader)
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
        with record_function(STEP_LABEL):
            with self._phase("data", timings):
                model_input, target = _checked_pair(self.split_batch(next(self.batches)))
            with self._phase("copy", timings):
                model_input, target = _fresh((model_input, target), self.device, self.non_blocking)
            with self._phase("forward", timings):
                output = batches.forward(self.model, model_input)
                loss = _checked_loss(batches.loss_of(self.loss_fn, output, model_input, target))
            with self._phase("backward", timings):
                loss.backward()
            with self._phase("optimizer", timings):
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        return timings, (time.perf_counter() - start) * 1000


def steps_from_events(events, phases: Sequence[str] = PHASES) -> list[StepTiming]:
    """Per step body (the STEP_LABEL span), the time of each labelled phase inside it."""
    spans = sorted((e for e in events if e.name == STEP_LABEL), key=lambda e: e.time_range.start)
    labelled = [e for e in events if e.name.startswith(LABEL)]
    origin = spans[0].time_range.start if spans else 0
    steps = []
    for span in spans:
        inside = [
            e
            for e in labelled
            if span.time_range.start <= e.time_range.start and e.time_range.end <= span.time_range.end
        ]
        totals = {p: 0.0 for p in phases}
        marks = []
        for event in inside:
            name = event.name.removeprefix(LABEL)
            totals[name] += (event.time_range.end - event.time_range.start) / 1000
            marks.append((name, (event.time_range.start - origin) / 1000, (event.time_range.end - origin) / 1000))
        wall = (span.time_range.end - span.time_range.start) / 1000
        steps.append(StepTiming(totals, wall, tuple(marks)))
    return steps


class _Recorder:
    """The profiler's `on_trace_ready`: keeps each round's steps and operators, and writes the last round's trace."""

    def __init__(self, active: int, rounds: int, trace_path: Path):
        self.active, self.rounds, self.trace_path = active, rounds, trace_path
        self.steps: list[StepTiming] = []
        self.ops: dict[str, list[float]] = {}  # name -> [calls, self ms, total ms]
        self.done = 0

    def __call__(self, prof) -> None:
        self.done += 1
        self.steps += steps_from_events(prof.events())[: self.active]
        for average in prof.key_averages():
            if not average.key.startswith((LABEL, STEP_LABEL, "ProfilerStep")):
                totals = self.ops.setdefault(average.key, [0, 0.0, 0.0])
                totals[0] += average.count
                totals[1] += average.self_cpu_time_total / 1000
                totals[2] += average.cpu_time_total / 1000
        if self.done == self.rounds:
            prof.export_chrome_trace(str(self.trace_path))

    def top_ops(self) -> tuple[OpTiming, ...]:
        ranked = sorted(self.ops.items(), key=lambda item: item[1][1], reverse=True)[:TOP_OPS]
        return tuple(OpTiming(name, int(calls), self_ms, total_ms) for name, (calls, self_ms, total_ms) in ranked)


def judge(steps: Sequence[StepTiming]) -> Verdict:
    """The largest part of the step, named only when it leads every other part by more than the noise margin.

    The margin is twice the standard error of the per-step difference between the two parts,
    so it grows with how much the steps scatter and shrinks with how many there are.
    """
    per_step = {c: [sum(s.phases[p] for p in parts) for s in steps] for c, parts in CATEGORIES.items()}
    means = {c: statistics.fmean(values) for c, values in per_step.items()}
    leader, *others = sorted(means, key=means.get, reverse=True)
    gaps = {c: paired_gap(per_step[leader], per_step[c]) for c in others}
    close = [c for c in others if gaps[c][0] <= gaps[c][1]]
    wall = statistics.fmean(s.wall_ms for s in steps)
    count = f"over {len(steps)} steps"
    if close:
        named = [f"{CATEGORY_NAMES[c]} ({ms(means[c])} ms per step)" for c in (leader, *close)]
        gap, noise = gaps[close[0]]
        evidence = (
            f"{', '.join(named[:-1])} and {named[-1]} are within the noise of each other: "
            f"{CATEGORY_NAMES[leader]} leads {CATEGORY_NAMES[close[0]]} by {ms(gap)} ms, inside the "
            f"±{ms(noise)} ms noise margin {count} (a step takes {ms(wall)} ms)."
        )
        return Verdict(TOO_CLOSE, evidence, (leader, *close))
    runner_up = others[0]
    gap, noise = gaps[runner_up]
    evidence = (
        f"{CATEGORY_NAMES[leader]} took {ms(means[leader])} ms of a {ms(wall)} ms step "
        f"({means[leader] / wall:.0%}); next was {CATEGORY_NAMES[runner_up]} at {ms(means[runner_up])} ms "
        f"({means[runner_up] / wall:.0%}), {ms(gap)} ms less: beyond the ±{ms(noise)} ms noise margin {count}."
    )
    return Verdict(VERDICTS[leader], evidence, (leader,))


def _private_copy(model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """A deep copy of both at once, so the copied optimizer steps the copied parameters."""
    try:
        return copy.deepcopy((model, optimizer))
    except Exception as error:  # deepcopy raises whatever the object's own members raise
        raise ValueError(
            f"profile_training trains a deep copy of your model and optimizer, and copying failed: {error}"
        ) from error


def _device_of(model: torch.nn.Module, device) -> torch.device:
    """The device asked for, else the one the model's first parameter or buffer lives on, else the CPU."""
    if device is not None:
        return torch.device(device)
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    return first.device if first is not None else torch.device("cpu")


def _move_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Optimizer state (Adam's moments) goes where the parameters went."""
    for state in optimizer.state.values():
        for name, value in state.items():
            if torch.is_tensor(value) and value.dim():  # Adam's `step` counter stays a CPU scalar
                state[name] = value.to(device)


def _parameters_with_state(optimizer: torch.optim.Optimizer) -> int:
    """Parameters the optimizer keeps something for (SGD may leave an empty entry: that holds nothing)."""
    return sum(1 for state in optimizer.state.values() if state)


def _check_arguments(model, optimizer, loss_fn, split_batch, numbers: dict[str, int]) -> None:
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, not a {type(model).__name__}.")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer must be a torch.optim.Optimizer, not a {type(optimizer).__name__}.")
    if not callable(loss_fn) or not callable(split_batch):
        raise ValueError("loss_fn and split_batch must be callables.")
    for name, value in numbers.items():
        low, high = LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be an integer in [{low}, {high}], not {value!r}.")


def _private_copy_on(device: torch.device, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """The copies this profile trains, on `device`, with the tensor hooks of the caller's model."""
    copied, optimizer = _private_copy(model, optimizer)
    batches.carry_tensor_hooks(model, copied)
    copied.to(device)
    _move_state(optimizer, device)
    return copied, optimizer


def _progress(total: int, on_step: Callable[[int, int], None] | None) -> Callable[[], None]:
    """A step counter that reports (done, total) after each step; the report may raise to cancel."""
    done = 0

    def advance() -> None:
        nonlocal done
        done += 1
        if on_step:
            on_step(done, total)

    return advance


def _warm_up(stepper: _Stepper, optimizer, warmup: int, advance) -> tuple[list[StepTiming], int | None]:
    """The warm-up steps, timed by the stopwatch, and how many parameters the first step gave optimizer state."""
    steps, created, before = [], None, _parameters_with_state(optimizer)
    for _ in range(warmup):
        timings, wall = stepper.step()
        steps.append(StepTiming(timings, wall, source="perf_counter"))
        if created is None:
            created = _parameters_with_state(optimizer) - before
        advance()
    return steps, created


@dataclass(frozen=True)
class _Window:
    """What one profiled window needs: where its events go, and its schedule."""

    recorder: _Recorder
    device: torch.device
    profiler_warmup: int
    active: int

    def profiler(self):
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        plan = schedule(wait=0, warmup=self.profiler_warmup, active=self.active, repeat=1)
        return profile(activities=activities, on_trace_ready=self.recorder, schedule=plan)


def _rounds(stepper: _Stepper, window: _Window, roles: list[str], split: int, rounds: int, advance):
    """Each round: settle, a block without the profiler, then a profiled window. Returns the stopwatch's
    unprofiled steps, its wall times of the profiled steps, and each window's length in ms."""
    unprofiled, naive, windows = [], [], []
    with _PROFILER_LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
        for _ in range(rounds):
            for role in roles[:split]:
                timings, wall = stepper.step()
                if role == "unprofiled":
                    unprofiled.append(StepTiming(timings, wall, source="perf_counter"))
                advance()
            # The whole window: entering the profiler to having its events (on_trace_ready runs inside).
            start = time.perf_counter()
            with window.profiler() as prof:
                for role in roles[split:]:
                    wall = stepper.step()[1]
                    if role == "profiled":
                        naive.append(wall)
                    prof.step()
                    advance()
            windows.append((time.perf_counter() - start) * 1000)
    return unprofiled, naive, windows


def profile_training(
    model: torch.nn.Module,
    loader,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    *,
    split_batch: Callable = split_pair,
    device: str | torch.device | None = None,
    warmup: int = 2,
    active: int = 5,
    rounds: int = 3,
    synchronize: bool = True,
    trace_path: str | Path | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> ProfileResult:
    """Warm up, then `rounds` times: `active` steps without the profiler, then `active` steps under it.

    Batches, the model call and `loss_fn` follow `explorers.batches` (see the module docstring).
    Trains a deep copy of `model` and `optimizer` for real, in the modes (train/eval) you
    left them in, on `device` (default: where the model is). Only one profile runs at a
    time in a process; the profiler is always stopped, also on error.
    `on_step(done, total)` reports progress and may raise to cancel.
    """
    _check_arguments(model, optimizer, loss_fn, split_batch, {"warmup": warmup, "active": active, "rounds": rounds})
    batches.check_trainable(model, "training step to profile")
    batches.warn_module_hooks(model, "profile_training")
    device = _device_of(model, device)
    model, optimizer = _private_copy_on(device, model, optimizer)
    workers, prefetch = getattr(loader, "num_workers", 0), getattr(loader, "prefetch_factor", None)
    settle = settle_steps(workers, prefetch)
    trace_path = Path(trace_path or tempfile.mkstemp(prefix="step-trace-", suffix=".json")[1])
    recorder = _Recorder(active, rounds, trace_path)
    profiler_warmup = _profiler_warmup(settle)
    stepper = _Stepper(model, loader, optimizer, loss_fn, split_batch, device, synchronize)
    advance = _progress(total_steps(warmup, active, rounds, settle), on_step)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # your RNG stream is untouched
        warmup_steps, states_created = _warm_up(stepper, optimizer, warmup, advance)
        window = _Window(recorder, device, profiler_warmup, active)
        unprofiled, naive, windows = _rounds(
            stepper, window, _round_roles(active, settle), settle + active, rounds, advance
        )
    verdict = judge(recorder.steps)
    return ProfileResult(
        steps=tuple(recorder.steps),
        warmup_steps=tuple(warmup_steps),
        top_ops=recorder.top_ops(),
        naive_ms=tuple(naive),
        unprofiled_ms=tuple(step.wall_ms for step in unprofiled),
        steps_per_round=active,
        verdict=verdict.label,
        evidence=verdict.evidence,
        contenders=verdict.contenders,
        trace_path=str(trace_path),
        device=str(device),
        synchronized=stepper.sync,
        unprofiled_steps=tuple(unprofiled),
        window_ms=tuple(windows),
        profiler_warmup_steps=profiler_warmup,
        loader_workers=workers,
        prefetch_factor=prefetch or PREFETCH_FACTOR,
        first_iterator_ms=stepper.batches.first_iterator_ms,
        optimizer_states_created=states_created,
    )
