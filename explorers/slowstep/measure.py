"""Measuring a slow-step drill: the evidence an engineer reads, and the fix's speedup with its noise margin.

`evidence_run(drill, seed)` builds the drill's loop and its correct loop on one seed and, in turn:
- warms both up;
- times them in turn, each phase with `perf_counter`: step by step (`PAIRS` of each, the order swapped
  each pair), or in blocks when a loop has DataLoader workers (`ROUNDS` of `BLOCK` steps, what its workers
  prefetched meanwhile used up first). The median of the paired differences is each phase's extra time, with
  the half-width of its sign-test interval as the noise margin (`paired_median_gap`, explorers/profiler/noise.py);
- profiles a window of each under `torch.profiler` (record_shapes on): the slow loop's steps,
  operators and one step's timeline are the evidence; the correct loop's are kept for after the answer.

`fix_run(drill, seed, fix)` times the slow loop against it with one fix applied, the same way, and
compares their losses step by step: a fix that changes them beyond float rounding changed training.

    from explorers.slowstep import measure
    run = measure.evidence_run("float64_model", seed=3)
    run.extra_ms("backward"), run.evidence.ops[0], run.answer_phases, run.answer_ops
"""

from __future__ import annotations

import contextlib
import gzip
import re
import statistics
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

import explorers.slowstep.catalogue as catalogue
from explorers.profiler.noise import paired_median_gap
from explorers.profiler.your_model import _PROFILER_LOCK, LABEL, STEP_LABEL, _progress, settle_steps
from explorers.rng import isolated_rng
from explorers.slowstep.loops import PHASES, Loop, Trainer

WARMUP = 3
# The two loops take turns step by step, the order swapped each pair, so a burst of load on the machine falls on
# both alike. A loop with DataLoader workers takes turns in blocks instead: its workers prefetch while the other
# loop runs, so a block starts by using up what they made (the Profiler lab's settle steps).
PAIRS = 24  # steps of each loop, in turn: 24 paired differences
ROUNDS = 12  # with workers: blocks of each loop, in turn (12 pairs: the sign test's interval is the 3rd of each end)
BLOCK = 2  # timed steps per block
PROFILED = 2  # steps each profiler window records (after one warm-up step): the operators and the timeline
TOP_OPS = 12
NO_OP = "(Python: no operator)"  # a phase's own time, outside every operator it called
SHARE_OF_EXTRA = 0.2  # evidence that holds at least this share of the extra time counts as pointing at it
# An operator row the correct loop never ran (a shape, a dtype, an operator of the bug's own) counts from this share:
# the per-sample loop's [1, 256] matrix products each hold a few percent of its extra time.
NEW_ROW_SHARE = 0.05
LOSS_TOLERANCE = 1e-3  # relative: float32 against float64 differs by about 1e-4 here; a changed recipe by far more
THREADS = 1  # each run on one core: two sessions' runs on a small machine do not share one


@dataclass(frozen=True)
class OpRow:
    phase: str
    name: str
    inputs: str  # dtypes and shapes of the tensor inputs, as record_shapes saw them
    calls: float  # per step
    self_ms: float  # per step

    @property
    def key(self) -> str:
        return f"{self.phase}|{self.name}|{self.inputs}"


@dataclass(frozen=True)
class Span:
    lane: str  # "phase" or "operator"
    name: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class Evidence:
    """One loop under torch.profiler: what its steps spent, phase by phase and operator by operator."""

    phases: dict[str, float]  # median ms per step over the timed turns (perf_counter, no profiler)
    step_ms: float  # the profiled median step's
    ops: tuple[OpRow, ...]  # the largest self times, per step, with each phase's own Python time
    all_ops: tuple[OpRow, ...]  # every row, for comparing two loops
    timeline: tuple[Span, ...]  # the median step's phases and the operators they called directly
    hidden_spans: int  # operators too short to draw in the timeline
    trace_gz: bytes  # the window's Chrome trace, gzipped (Perfetto opens it)
    steps: int


@dataclass(frozen=True)
class Blocks:
    """Per turn, the mean ms per step of each phase and of the whole step, for two loops timed in turn."""

    slow: tuple[dict[str, float], ...]
    other: tuple[dict[str, float], ...]
    steps_per_turn: int = 1

    @property
    def how(self) -> str:
        """How the two loops took turns, in words."""
        if self.steps_per_turn == 1:
            return f"paired over {len(self.slow)} steps of each loop, taken in turn"
        return f"paired over {len(self.slow)} rounds of {self.steps_per_turn} steps"

    @property
    def steps(self) -> int:
        return len(self.slow) * self.steps_per_turn

    def gap(self, part: str = "wall") -> tuple[float, float]:
        """How much more the slow loop spends in `part` per step (the median of the paired differences), and the
        half-width of its distribution-free interval: a hiccup of the machine in one turn moves neither far."""
        return paired_median_gap([r[part] for r in self.slow], [r[part] for r in self.other])

    def typical(self, which: str, part: str = "wall") -> float:
        """The median ms per step of `part` in one loop's turns ("slow" or "other")."""
        return statistics.median(r[part] for r in getattr(self, which))


@dataclass(frozen=True)
class EvidenceRun:
    drill: str
    seed: int
    evidence: Evidence  # the slow loop: what the learner reads
    correct: Evidence  # the correct loop on the same seed and data: shown once answered
    blocks: Blocks  # slow against correct
    losses: tuple[float, ...]
    correct_losses: tuple[float, ...]
    torch_version: str
    threads: int

    def extra_ms(self, part: str = "wall") -> tuple[float, float]:
        return self.blocks.gap(part)

    @property
    def shown(self) -> bool:
        """The run shows a bottleneck: the slow step is slower beyond the noise, and the phase that gained most holds
        its extra time beyond its own noise (otherwise the bars would point at one phase and the words at another)."""
        gap, noise = self.extra_ms()
        leader = max(PHASES, key=lambda p: self.extra_ms(p)[0])
        return gap > noise and leader in self.answer_phases

    @property
    def answer_phases(self) -> tuple[str, ...]:
        """The phases whose extra time is beyond their noise and at least `SHARE_OF_EXTRA` of the step's."""
        total = self.extra_ms()[0]
        picked = []
        for phase in PHASES:
            gap, noise = self.extra_ms(phase)
            if gap > noise and gap >= SHARE_OF_EXTRA * total:
                picked.append(phase)
        return tuple(picked)

    @property
    def op_growth(self) -> dict[str, float]:
        """Per shown operator row: how much more time per step it took than the same row in the correct loop."""
        before = {row.key: row.self_ms for row in self.correct.all_ops}
        return {row.key: row.self_ms - before.get(row.key, 0.0) for row in self.evidence.ops}

    @property
    def answer_ops(self) -> tuple[str, ...]:
        """The shown operator rows that hold the extra time: in a phase that holds it (`answer_phases`, measured in
        pairs), the row that grew most, any that grew by a fifth of the step's extra time, and any the correct loop
        never ran that grew by a twentieth. Two profiled steps per loop are too few to judge a row by itself: its
        phase's paired measurement vouches for it."""
        if not self.shown:
            return ()
        grew = self.op_growth
        growth = {row.key: grew[row.key] for row in self.evidence.ops if row.phase in self.answer_phases}
        if not growth:
            return ()
        top = max(growth, key=growth.get)
        total = self.extra_ms()[0]
        correct = {row.key for row in self.correct.all_ops}
        return tuple(
            k for k, g in growth.items()
            if k == top or g >= SHARE_OF_EXTRA * total or (k not in correct and g >= NEW_ROW_SHARE * total)
        )  # fmt: skip

    @property
    def answers(self) -> tuple[str, ...]:
        """Every piece of evidence that points at the bottleneck: `phase:<name>` or `op:<row key>`."""
        return tuple(f"phase:{p}" for p in self.answer_phases) + tuple(f"op:{k}" for k in self.answer_ops)


@dataclass(frozen=True)
class FixRun:
    drill: str
    seed: int
    fix: str
    blocks: Blocks  # slow against fixed
    losses: tuple[float, ...]
    fixed_losses: tuple[float, ...]

    @property
    def saved_ms(self) -> tuple[float, float]:
        """Milliseconds per step the fix saves (negative: it costs), and the paired noise margin."""
        return self.blocks.gap()

    @property
    def speedup(self) -> float:
        return self.blocks.typical("slow") / self.blocks.typical("other")

    @property
    def verdict(self) -> str:
        """ "faster", "slower" or "inside the noise"."""
        saved, noise = self.saved_ms
        if abs(saved) <= noise:
            return "inside the noise"
        return "faster" if saved > 0 else "slower"

    @property
    def loss_difference(self) -> float:
        """The largest relative difference between the two loops' losses, step by step."""
        return max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(self.losses, self.fixed_losses, strict=True))

    @property
    def same_training(self) -> bool:
        return self.loss_difference <= LOSS_TOLERANCE


# --- Running ---------------------------------------------------------------------------------------


def _steps_needed(loop: Loop) -> int:
    settle = settle_steps(loop.workers, None)
    turns, steps = (ROUNDS, BLOCK) if loop.workers else (PAIRS, 1)  # at most: the other loop may add workers
    return 2 * (WARMUP + max(turns * (settle + steps), ROUNDS * (settle + BLOCK)) + settle + 1 + PROFILED)


def _build(loop: Loop, seed: int) -> Trainer:
    with isolated_rng(seed):
        return Trainer(loop, seed, _steps_needed(loop))


def _block(trainer: Trainer, steps: int, advance) -> dict[str, float]:
    """Settle (use up what the loader's workers prefetched while this loop waited), then time `steps` steps."""
    for _ in range(settle_steps(trainer.loop.workers, None)):
        trainer.step()
        advance()
    timings = []
    for _ in range(steps):
        timings.append(trainer.step())
        advance()
    return {part: statistics.fmean(t.get(part, 0.0) for t in timings) for part in (*PHASES, "wall")}


def _medians(turns: tuple[dict[str, float], ...]) -> dict[str, float]:
    return {phase: statistics.median(t[phase] for t in turns) for phase in PHASES}


def _turns(*loops: Loop) -> tuple[int, int]:
    """(turns, steps per turn): step by step, or in blocks when a loop has DataLoader workers."""
    return (ROUNDS, BLOCK) if any(loop.workers for loop in loops) else (PAIRS, 1)


def _alternate(slow: Trainer, other: Trainer, advance) -> Blocks:
    turns, steps = _turns(slow.loop, other.loop)
    slow_turns, other_turns = [], []
    for _ in range(WARMUP):
        for trainer in (slow, other):
            trainer.step()
            advance()
    for turn in range(turns):
        order = ((slow, slow_turns), (other, other_turns))
        for trainer, kept in order if turn % 2 == 0 else order[::-1]:
            kept.append(_block(trainer, steps, advance))
    return Blocks(tuple(slow_turns), tuple(other_turns), steps)


@dataclass(eq=False)
class _Event:
    name: str
    start: int  # ns
    end: int
    raw: object  # the profiler's own event: its input dtypes and shapes are read only for the rows kept
    parent: _Event | None = None
    children_ns: int = 0

    @property
    def self_ms(self) -> float:
        return (self.end - self.start - self.children_ns) / 1e6

    @property
    def phase(self) -> str | None:
        node = self.parent
        while node is not None:
            if node.name.startswith(LABEL):
                return node.name.removeprefix(LABEL)
            node = node.parent
        return None


def _events(prof) -> list[_Event]:
    """The window's CPU events, each with its parent on its thread: read from the profiler's raw (Kineto) events,
    about ten times faster than `prof.events()` on the drills' many small operators."""
    threads: dict[int, list[_Event]] = {}
    for raw in prof.profiler.kineto_results.events():
        if raw.device_type() == torch.autograd.DeviceType.CPU:
            start = raw.start_ns()
            threads.setdefault(raw.start_thread_id(), []).append(
                _Event(raw.name(), start, start + raw.duration_ns(), raw)
            )
    events = []
    for thread in threads.values():
        thread.sort(key=lambda e: (e.start, -e.end))
        open_: list[_Event] = []
        for event in thread:
            while open_ and open_[-1].end <= event.start:
                open_.pop()
            if open_:
                event.parent = open_[-1]
                open_[-1].children_ns += event.end - event.start
            open_.append(event)
        events += thread
    return events


def _inputs(raw) -> str:
    """The dtypes and the first two shapes of an operator's tensor inputs, as record_shapes saw them."""
    tensors = [(shape, dtype) for shape, dtype in zip(raw.shapes(), raw.dtypes(), strict=False) if shape and dtype]
    dtypes = sorted({dtype for _, dtype in tensors})  # a Python number wrapped as a tensor has no shape: left out
    return " ".join([*dtypes, *(str(list(shape)) for shape, _ in tensors[:2])])


def _ops(events: list[_Event], steps: int) -> tuple[OpRow, ...]:
    """Every operator (by phase, name and inputs) and every phase's own time, per step, largest self time first."""
    totals: dict[tuple[str, str, str], list[float]] = {}
    for event in events:
        if event.name.startswith(LABEL):
            key = (event.name.removeprefix(LABEL), NO_OP, "")
        elif event.name.startswith((STEP_LABEL, "ProfilerStep")) or (phase := event.phase) is None:
            continue
        else:
            key = (phase, event.name, _inputs(event.raw))
        total = totals.setdefault(key, [0.0, 0.0])
        total[0] += 1
        total[1] += event.self_ms
    rows = [OpRow(p, n, i, calls / steps, self_ms / steps) for (p, n, i), (calls, self_ms) in totals.items()]
    return tuple(sorted(rows, key=lambda r: r.self_ms, reverse=True))


def _timeline(events: list[_Event], body: _Event) -> tuple[tuple[Span, ...], int]:
    """One step: its phases, and the operators each phase called directly (under 0.5% of it: counted, not drawn)."""
    smallest = (body.end - body.start) * 0.005
    spans, hidden = [], 0
    for event in events:
        if not (body.start <= event.start and event.end <= body.end):
            continue
        start, stop = (event.start - body.start) / 1e6, (event.end - body.start) / 1e6
        if event.name.startswith(LABEL):
            spans.append(Span("phase", event.name.removeprefix(LABEL), start, stop))
        elif event.parent is not None and event.parent.name.startswith(LABEL):
            if event.end - event.start >= smallest:
                spans.append(Span("operator", event.name, start, stop))
            else:
                hidden += 1
    return tuple(sorted(spans, key=lambda s: s.start_ms)), hidden


def _anonymous(trace: bytes) -> bytes:
    """The trace as a learner downloads it: without the server's host name and the temporary file's path."""
    trace = re.sub(rb'"host_name": "[^"]*"', b'"host_name": ""', trace, count=1)
    return re.sub(rb'"traceName": "[^"]*"', b'"traceName": "slow-step"', trace, count=1)


def _profile(trainer: Trainer, phases: dict[str, float], advance) -> Evidence:
    """Profile PROFILED steps (after one warm-up step): their operators, one step's timeline and the trace."""
    for _ in range(settle_steps(trainer.loop.workers, None)):
        trainer.step()
        advance()
    path = Path(tempfile.mkstemp(prefix="slow-step-", suffix=".json")[1])
    plan = schedule(wait=0, warmup=1, active=PROFILED, repeat=1)
    try:
        with _PROFILER_LOCK, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=plan) as prof:
                for _ in range(1 + PROFILED):
                    trainer.step()
                    prof.step()
                    advance()
            events = _events(prof)
            prof.export_chrome_trace(str(path))
        trace = gzip.compress(_anonymous(path.read_bytes()), compresslevel=6)
    finally:
        path.unlink(missing_ok=True)
    bodies = sorted((e for e in events if e.name == STEP_LABEL), key=lambda e: e.start)
    ops = _ops(events, len(bodies))
    median = sorted(bodies, key=lambda e: e.end - e.start)[len(bodies) // 2]
    timeline, hidden = _timeline(events, median)
    return Evidence(phases, (median.end - median.start) / 1e6, ops[:TOP_OPS], ops, timeline, hidden, trace, len(bodies))


def _total(*loops: Loop, profiled: bool) -> int:
    turns, per_turn = _turns(*loops)
    steps = sum(WARMUP + turns * (settle_steps(loop.workers, None) + per_turn) for loop in loops)
    if profiled:
        steps += sum(settle_steps(loop.workers, None) + 1 + PROFILED for loop in loops)
    return steps


@contextlib.contextmanager
def _on_one_thread():
    """Run on THREADS threads, and give the caller's thread count back afterwards (a notebook keeps its own)."""
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def evidence_run(drill: str, seed: int, report=None) -> EvidenceRun:
    """The drill's slow loop and its correct loop on one seed: timed in turn, then each profiled."""
    chosen = catalogue.DRILLS[drill]
    advance = _progress(_total(chosen.loop, chosen.correct, profiled=True), report)
    with _on_one_thread():
        slow, correct = _build(chosen.loop, seed), _build(chosen.correct, seed)
        try:
            blocks = _alternate(slow, correct, advance)
            evidence = _profile(slow, _medians(blocks.slow), advance)
            correct_evidence = _profile(correct, _medians(blocks.other), advance)
        finally:
            slow.close()
            correct.close()
    count = min(len(slow.losses), len(correct.losses))
    return EvidenceRun(
        drill, seed, evidence, correct_evidence, blocks,
        tuple(slow.losses[:count]), tuple(correct.losses[:count]), torch.__version__, THREADS,
    )  # fmt: skip


def fix_run(drill: str, seed: int, fix: str, report=None) -> FixRun:
    """The drill's slow loop against it with `fix` applied, on one seed: timed in turn, losses compared."""
    chosen = catalogue.DRILLS[drill]
    fixed_loop = catalogue.FIXES[fix].apply(chosen.loop)
    advance = _progress(_total(chosen.loop, fixed_loop, profiled=False), report)
    with _on_one_thread():
        slow, fixed = _build(chosen.loop, seed), _build(fixed_loop, seed)
        try:
            blocks = _alternate(slow, fixed, advance)
        finally:
            slow.close()
            fixed.close()
    count = min(len(slow.losses), len(fixed.losses))
    return FixRun(drill, seed, fix, blocks, tuple(slow.losses[:count]), tuple(fixed.losses[:count]))
