"""The Profiler lab's lesson: what the run shows, an experiment to try, and the predict-then-reveal evidence.

Every sentence about a run is built from the measured numbers of that run, and a
difference is called when it exceeds the noise margin (`noise`): timings on a shared
machine scatter, and a sentence that flips between two identical runs teaches nothing.
What the lab says about PyTorch in general is in STATEMENTS, each with its scope and
source, and tested in tests/claims/test_profiler.py.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from explorers.profiler.experiment import OPTIMIZERS, THREADS_RANGE, WIDTH_RANGE, WIDTHS, WORKERS_RANGE, ProfileOptions
from explorers.profiler.noise import unpaired_gap
from explorers.profiler.your_model import PHASES, VERDICTS, ProfileResult
from explorers.statements import Statement
from explorers.units import ms

STATEMENTS: dict[str, Statement] = {
    "cuda_async": Statement(
        text=(
            "Without `torch.cuda.synchronize()` GPU work is asynchronous: a phase ends when its kernels are "
            "launched, and their time is charged to whatever waits for them later"
        ),
        scope="CUDA tensors; on the CPU each operator has finished when it returns",
        source="https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",
    ),
    "record_function": Statement(
        text=(
            "A `record_function` label becomes one event in the profiler's results, spanning every operator that "
            "runs inside it, so a phase's time can be read from the profile"
        ),
        scope="while torch.profiler records (not in its wait or warm-up steps); on the CPU, timed by the host clock",
        source="torch/autograd/profiler.py: record_function",
    ),
    "larger_batch": Statement(
        text=(
            "A larger batch gives each step more arithmetic, so a compute-bound step gets longer; it raises "
            "samples per second mainly when fixed per-step costs, not compute, fill the step"
        ),
        scope="models whose work grows with the batch (every row processed); the gain varies with the machine's load",
        source="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    ),
}

# --- Sentences the page shows around its controls ---------------------------------------------------

LIVE_NUMBERS = (
    "Every number here is measured live, so timings vary between runs and between machines: a shared link "
    "reopens the same settings and comparison, not the same numbers. **Profile again** shows how much they move."
)
DATA_COST_HELP = "Simulated augmentation: the collate function sleeps this long per batch."
PIN_MEMORY_HELP = "Page-locked host memory for host-to-GPU copies; the lab passes it to the DataLoader on CUDA."
SYNC_HELP = f"{STATEMENTS['cuda_async'].text}."


def active_help(rounds: int) -> str:
    return f"Per round: this many steps without the profiler, then as many with it, {rounds} rounds in all."


def experiment_offer(experiment: Experiment) -> str:
    return f"**An experiment the verdict points to:** {experiment.label}. Try it to measure whether it helps."


def top_ops_caption(result: ProfileResult) -> str:
    return f"Summed over all {len(result.steps)} profiled steps."


def data_cost_question() -> str:
    return (
        f"From these settings without data work, add {DATA_COST_QUESTION_MS} ms of it per batch (no workers). "
        "Which bar grows most?"
    )


SUGGESTED_WORKERS = 2
DATA_COST_QUESTION_MS = 20
OPTIMIZER_NAMES = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}
# The knobs an experiment changes, and every value each can be set back to: a link's `before` names one of them.
COMPARED = {
    "num_workers": tuple(range(WORKERS_RANGE[0], WORKERS_RANGE[1] + 1)),
    "pin_memory": (False, True),
    "optimizer": OPTIMIZERS,
    "threads": tuple(range(THREADS_RANGE[0], THREADS_RANGE[1] + 1)),
    "width": WIDTHS,
}
NO_COMPARISON = "none"


@dataclasses.dataclass(frozen=True)
class Experiment:
    label: str  # the change, in words: "2 CPU threads instead of 1"
    options: ProfileOptions


def suggestion(options: ProfileOptions, result: ProfileResult) -> Experiment | None:
    """The one change the verdict points to, as an experiment: whether it helps is measured, never assumed."""
    change = dataclasses.replace
    if result.verdict == VERDICTS["data"] and options.num_workers < min(SUGGESTED_WORKERS, WORKERS_RANGE[1]):
        return Experiment(
            f"{SUGGESTED_WORKERS} DataLoader workers instead of {options.num_workers}",
            change(options, num_workers=SUGGESTED_WORKERS),
        )
    if result.verdict == VERDICTS["copy"] and options.device == "cuda" and not options.pin_memory:
        return Experiment("pinned host memory for the copies", change(options, pin_memory=True))
    if result.verdict == VERDICTS["optimizer"] and options.optimizer != "sgd":
        return Experiment(
            f"plain SGD instead of {OPTIMIZER_NAMES[options.optimizer]} (no per-parameter state; another algorithm)",
            change(options, optimizer="sgd"),
        )
    if result.verdict == VERDICTS["compute"] and options.threads < THREADS_RANGE[1]:
        return Experiment(
            f"{THREADS_RANGE[1]} CPU threads instead of {options.threads}", change(options, threads=THREADS_RANGE[1])
        )
    if result.verdict == VERDICTS["compute"] and options.width > WIDTH_RANGE[0]:
        narrower = max(options.width // 2, WIDTH_RANGE[0])
        return Experiment(f"half the width: {narrower} instead of {options.width}", change(options, width=narrower))
    return None


def comparison_tokens() -> tuple[str, ...]:
    """Every value a link's `before` may hold: `knob=value`, the one knob that differed before the change."""
    return (NO_COMPARISON, *(f"{name}={value}" for name, values in COMPARED.items() for value in values))


def token_for(before: ProfileOptions, after: ProfileOptions) -> str:
    """The token that turns `after` back into `before` (they differ in one compared knob)."""
    changed = [name for name in COMPARED if getattr(before, name) != getattr(after, name)]
    return f"{changed[0]}={getattr(before, changed[0])}" if len(changed) == 1 else NO_COMPARISON


def before_options(options: ProfileOptions, token: str) -> ProfileOptions | None:
    """The settings to compare against: these with one knob set back, or None when there is nothing to compare."""
    for name, values in COMPARED.items():
        for value in values:
            if token == f"{name}={value}" and getattr(options, name) != value:
                return dataclasses.replace(options, **{name: value})
    return None


def describe_change(before: ProfileOptions, after: ProfileOptions) -> str:
    return ", ".join(
        f"{name} {getattr(before, name)} → {getattr(after, name)}"
        for name in COMPARED
        if getattr(before, name) != getattr(after, name)
    )


def outcome(change: str, before: Sequence[float], after: Sequence[float]) -> tuple[str, str]:
    """("faster" | "slower" | "same", the sentence) for step times without the profiler, before and after a change."""
    a, b = statistics.fmean(before), statistics.fmean(after)
    gap, noise = unpaired_gap(after, before)
    measured = f"{ms(a)} → {ms(b)} ms per step without the profiler"
    margin = f"the ±{ms(noise)} ms noise margin"
    if gap < -noise:
        return "faster", f"Measured: {change} made the step faster, {measured} ({a / b:.2f}× as fast), beyond {margin}."
    if gap > noise:
        return "slower", (
            f"Measured: {change} made the step slower, {measured} ({b / a:.2f}× as long), beyond {margin}: "
            "here it does not help."
        )
    return "same", f"Measured: {change} made no difference beyond the noise, {measured}, within {margin}."


def per_step_overhead(ratios: Sequence[float], steps_per_round: int) -> str:
    """The profiler's cost per recorded step, from alternating blocks; within the noise when their spread spans 1."""
    low, high = min(ratios), max(ratios)
    spread = f"{low:.2f}× to {high:.2f}×"
    blocks = f"{len(ratios)} rounds of {steps_per_round} steps without the profiler, then {steps_per_round} with it"
    if low > 1:
        return (
            f"Per step, the profiler made each recorded step about {statistics.median(ratios):.2f}× as long as "
            f"without it ({spread} over {blocks})."
        )
    if high < 1:
        return (
            f"Per step, the recorded steps ran faster than the steps without the profiler in every round: they took "
            f"{spread} as long, over {blocks}."
        )
    return (
        f"Per step, too close to call: recorded steps took {spread} as long as the steps without the profiler, "
        f"over {blocks}."
    )


def _warmup_reason(result: ProfileResult) -> str:
    """Why the profiler warmed up this many steps, from what the loader that ran holds; empty without workers."""
    if not result.loader_workers:
        return ""
    workers = f"{result.loader_workers} worker{'s' if result.loader_workers > 1 else ''}"
    return (
        f" It warms up for {result.profiler_warmup_steps} steps, one per batch the loader's {workers} × "
        f"{result.prefetch_factor} prefetched may hold after the pause, so those are used up before recording."
    )


def window_overhead(result: ProfileResult) -> str:
    """The whole profiler window against as many plain steps as it trained: what profiling costs beyond the steps."""
    windows, plain, ratios = result.window_ms, result.window_plain_ms, result.window_ratios
    i = ratios.index(statistics.median_low(ratios))
    n, active, warm = result.window_steps, result.steps_per_round, result.profiler_warmup_steps
    return (
        f"The whole profiler window (entering it, {warm} warm-up step{'s' if warm > 1 else ''}, {active} recorded "
        f"steps, stopping it and collecting its results) took {ms(windows[i])} ms against {ms(plain[i])} ms for as "
        f"many steps without it ({n} × the round's mean step), {ratios[i]:.1f}× as long (median round; "
        f"{min(ratios):.1f}× to {max(ratios):.1f}× over {len(ratios)} rounds).{_warmup_reason(result)}"
    )


def overhead(result: ProfileResult) -> str:
    """Both costs of profiling: per recorded step, and the whole window around the recorded steps."""
    per_step = per_step_overhead(result.overhead_ratios, result.steps_per_round)
    return f"{per_step} {window_overhead(result)}" if result.window_ms else per_step


def _first_step(result: ProfileResult) -> str:
    first = result.warmup_steps[0]
    slowest = max(result.unprofiled_ms)
    if first.wall_ms <= slowest:
        return (
            f"The first warm-up step ({ms(first.wall_ms)} ms) was no slower than the slowest steady step "
            f"({ms(slowest)} ms, same stopwatch, no profiler): no one-off cost shows in this run."
        )
    typical = statistics.median_low(result.unprofiled_ms)  # a step that ran, never the mean of two
    line = (
        f"The first warm-up step took {ms(first.wall_ms)} ms, {first.wall_ms / typical:.1f}× the middle steady step "
        f"({ms(typical)} ms, same stopwatch, no profiler; the {len(result.unprofiled_ms)} steady steps took "
        f"{ms(min(result.unprofiled_ms))} to {ms(slowest)} ms)"
    )
    if result.unprofiled_steps:
        line += f"; {_extra_time(first.phases, first.wall_ms - typical, result)}"
    measured = _one_off_work(result)
    return f"{line}. {measured}An average that includes it is skewed, so the lab measures after warm-up."


def _extra_time(first: dict[str, float], extra: float, result: ProfileResult) -> str:
    """Which phase measured the first step's extra time, against the same phase of the middle steady step (one
    step that ran: the phases of different steps are never mixed)."""
    walls = [s.wall_ms for s in result.unprofiled_steps]
    usual = result.unprofiled_steps[walls.index(statistics.median_low(walls))].phases
    phase = max(PHASES, key=lambda p: first[p] - usual[p])
    share = (first[phase] - usual[phase]) / extra
    amount = "most of the extra time" if share > 0.5 else f"the largest part of the extra time ({share:.0%})"
    return f"{amount} was in `{phase}`, {ms(first[phase])} ms against {ms(usual[phase])} ms in the middle steady step"


def _one_off_work(result: ProfileResult) -> str:
    """One-off work this run measured in its first step (not a list of usual suspects)."""
    seen = []
    if result.first_iterator_ms is not None:
        seen.append(f"creating the loader's iterator took {ms(result.first_iterator_ms)} ms (inside `data`)")
    if result.optimizer_states_created:
        created = result.optimizer_states_created
        seen.append(f"the optimizer created state for {created} parameters (inside `optimizer`)")
    return f"Measured in that step: {' and '.join(seen)}. " if seen else ""


def _hidden(waited: float, cost: float) -> str:
    return f"{1 - waited / cost:.0%} of it hidden" if waited < cost else "none of it hidden"


def _data_work(options: ProfileOptions, result: ProfileResult) -> str:
    waits = [s.phases["data"] for s in result.steps]
    waited, median = statistics.fmean(waits), statistics.median_low(waits)  # the middle step's own wait
    cost = options.data_cost_ms
    if not options.num_workers:
        return (
            f"With `num_workers=0` the {cost} ms of per-batch data work runs on the training loop's own thread, "
            f"so every step waits for it: the data phase took {ms(waited)} ms per step."
        )
    line = (
        f"{options.num_workers} worker process(es) prepare batches while the model trains: the loop waited "
        f"{ms(waited)} ms per step on average for its batch, against the {cost} ms of work each batch is set to cost "
        f"({_hidden(waited, cost)})"
    )
    long = [w for w in waits if w > cost]
    if not long:
        spread = f"{ms(min(waits))} to {ms(max(waits))} ms"
        return f"{line}; the middle step waited {ms(median)} ms (the steps waited {spread})."
    return (
        f"{line}. {len(long)} of the {len(waits)} steps waited longer than that work "
        f"({', '.join(ms(w) for w in long)} ms) and lift the mean: the middle step waited {ms(median)} ms "
        f"({_hidden(median, cost)})."
    )


def explain(options: ProfileOptions, result: ProfileResult) -> list[str]:
    phases = result.mean_phases()
    wall = result.mean_wall_ms
    covered = sum(phases.values())
    lines = [
        f"**{result.verdict}**: {result.evidence}",
        f"The five phases cover {ms(covered)} of {ms(wall)} ms per profiled step ({covered / wall:.0%}); the grey "
        "`other` bar is the rest of the step: its own code between and around the phases.",
    ]
    if result.warmup_steps:
        lines.append(_first_step(result))
    if options.data_cost_ms:
        lines.append(_data_work(options, result))
    lines.append(overhead(result))
    if result.device == "cuda" and not result.synchronized:
        lines.append(f"{STATEMENTS['cuda_async'].text}.")
    return lines


def data_cost_pair(options: ProfileOptions) -> tuple[ProfileOptions, ProfileOptions]:
    """The predict-then-reveal experiment: these settings without data work, then with 20 ms per batch (no workers)."""
    without = dataclasses.replace(options, data_cost_ms=0, num_workers=0)
    return without, dataclasses.replace(without, data_cost_ms=DATA_COST_QUESTION_MS)


def data_cost_evidence(without: ProfileResult, with_cost: ProfileResult) -> tuple[str, str]:
    """(the phase that grew most, what the two runs showed), each phase compared with its noise margin."""
    before = {p: [s.phases[p] for s in without.steps] for p in PHASES}
    after = {p: [s.phases[p] for s in with_cost.steps] for p in PHASES}
    gaps = {p: unpaired_gap(after[p], before[p]) for p in PHASES}
    grown = max(PHASES, key=lambda p: gaps[p][0])

    def change(p: str) -> str:
        return f"`{p}` {ms(statistics.fmean(before[p]))} → {ms(statistics.fmean(after[p]))} ms"

    lines = [
        f"Measured just now, without and then with {DATA_COST_QUESTION_MS} ms of data work per batch: "
        f"`{grown}` grew most ({change(grown)} per step)."
    ]
    rest = [p for p in PHASES if p not in (grown, "copy")]
    moved = [p for p in rest if abs(gaps[p][0]) > gaps[p][1]]
    steady = [p for p in rest if p not in moved]
    if steady:
        lines.append(f"{', '.join(change(p) for p in steady)}: within the noise, no measurable change.")
    if moved:
        lines.append(
            f"{', '.join(change(p) for p in moved)}: beyond the noise, though the model does the same math both times."
        )
    return grown, " ".join(lines)
