"""The DDP lab's lesson: every sentence read off one run's records, and a sentence only for what happened.

A run that finished gets the averaging, the single-process comparison and the timings; a
run that failed gets what each rank was doing when it stopped. Padding is described only
when the sampler padded, Join only when the shards were uneven, and so on.
"""

from __future__ import annotations

from explorers.ddp import analysis, failures
from explorers.ddp.options import bucket_label
from explorers.ddp.results import FORKSERVER_COLD, FORKSERVER_SHARED, FORKSERVER_WARM, TORCHRUN, DDPRun
from explorers.ddp.words import FLOAT_TOLERANCE, LAUNCHERS, code, indices, plural, ranks, sci, seconds
from explorers.units import format_bytes

QUESTION = "What does DistributedDataParallel do that several GPUs alone do not?"


def processes_line(run: DDPRun) -> str:
    hosts = run.hosts
    where = f"on {plural(len(hosts), 'host')}" if len(hosts) > 1 else f"on {code(hosts[0])}"
    if run.nodes > 1:
        where += f" as {run.nodes} torchrun nodes"
    line = (
        f"**{plural(run.world_size, 'process')}** ({run.backend}, started by {LAUNCHERS[run.launcher]}) {where}, "
        f"each with its own replica of the {sum(n for _, n in run.parameters)}-parameter model and its own shard of "
        "the data."
    )
    before = [r.param_sum_before_ddp for r in run.ranks]
    after = [r.param_sum_after_ddp for r in run.ranks]
    complete = run.world_size > 1 and None not in before and None not in after
    if complete and len(set(before)) > 1 and len(set(after)) == 1:
        line += (
            f" Each rank built its model from its own seed (parameter sums {', '.join(f'{b:.4f}' for b in before)}"
            f"); after wrapping, every replica summed to {after[0]:.4f}, rank 0's: DDP broadcasts rank 0's "
            "parameters when it wraps the model."
        )
    return line


def one_writer_line(run: DDPRun) -> str | None:
    """Rank 0 alone writes the results, as it alone should write checkpoints and logs."""
    if run.single_process is None or run.world_size < 2:
        return None
    return (
        f"Rank 0 alone wrote the results file: the other {run.world_size - 1} rank(s) sent their records to it "
        "with `gather_object` over the process group. Checkpoints and logs belong to one rank too; W writers "
        "would race for the same file."
    )


def sampler_lines(run: DDPRun) -> list[str]:
    epochs = analysis.sampler_epochs(run)
    if not epochs:
        return []
    first, options, world = epochs[0], run.options, run.world_size
    n = options.dataset_size
    sizes = ", ".join(str(len(o)) for o in first.orders)
    if not options.uses_sampler:
        line = f"Each rank took its own slice `rank::{world}` of the {n} samples, no sampler: {sizes} samples."
        if len({len(o) for o in first.orders}) > 1:
            line += " The shards are uneven, so the ranks do not run out of data together."
        return [line]
    if first.padding:
        repeated = ", ".join(f"{i} ({ranks(owners)})" for i, owners in first.repeats.items())
        many = len(first.repeats) > 1
        line = (
            f"DistributedSampler: {n} samples do not split evenly over {world} ranks, so with drop_last=False it "
            f"padded its list to {first.slots} ({sizes} per rank) by repeating "
            + (f"its first {plural(first.padding, 'entry')}" if first.repeats_are_the_first else "entries")
            + f": {'indices' if many else 'index'} {repeated} {'were' if many else 'was'} trained on twice in epoch 0."
        )
        if options.shuffle:
            line += " With shuffle on, the first entries are the head of that epoch's shuffled order."
        return [line]
    if first.dropped:
        return [
            f"DistributedSampler with drop_last=True trimmed {n} samples to {first.slots} ({sizes} per rank): index "
            f"{indices(first.dropped)} was not trained on in epoch 0."
        ]
    return [f"DistributedSampler: {n} samples split evenly over {plural(world, 'rank')} ({sizes} each); none repeats."]


def epoch_order_line(run: DDPRun) -> str | None:
    epochs = analysis.sampler_epochs(run)
    same = analysis.same_order_every_epoch(run)
    if same is None or not run.options.uses_sampler:
        return None
    zero, one = epochs[0].orders[0], epochs[1].orders[0]
    if not run.options.shuffle:
        return (
            f"shuffle=False: rank 0 saw {indices(zero)} in epoch 0 and {indices(one)} in epoch 1, the same order "
            "each epoch whatever set_epoch does."
        )
    if same:
        return (
            f"Without set_epoch the shuffle is seeded the same every epoch: rank 0 saw {indices(zero)} in epoch 0 "
            f"and again {indices(one)} in epoch 1. Call `sampler.set_epoch(epoch)` before each epoch."
        )
    return f"set_epoch reshuffled each epoch: rank 0 saw {indices(zero)} in epoch 0, then {indices(one)}."


def averaging_line(run: DDPRun) -> str | None:
    checks = analysis.gradient_checks(run)
    full = [c for c in checks if len(c.ranks_with_data) == run.world_size]
    if not full or run.world_size < 2:
        return None
    spread = max(c.spread_across_ranks for c in full)
    gap = max(c.gap_to_mean for c in full)
    same = "exactly the same gradient" if spread == 0 else f"the same gradient (largest difference {sci(spread)})"
    return (
        f"After each backward, {'both' if run.world_size == 2 else f'all {run.world_size}'} ranks held {same} "
        f"over {plural(len(full), 'step')}, equal to "
        f"the mean of their local gradients to {sci(gap)}: each rank divided its bucket by {run.world_size} and "
        "the all-reduce summed them."
    )


def single_process_lines(run: DDPRun) -> list[str]:
    single = run.single_process
    if single is None:
        return []
    options = run.options
    k = f" × {options.accumulation} micro-batches" if options.accumulation > 1 else ""
    head = (
        f"One process trained on the same combined batches ({options.per_rank_batch} × {run.world_size} ranks{k}) "
        f"ends with parameters within **{sci(single.max_param_diff)}** of DDP's"
    )
    if single.max_param_diff <= FLOAT_TOLERANCE:
        return [head + ": the same training, to float tolerance."]
    first = next(
        (i for i, d in enumerate(single.grad_max_diffs) if d is not None and d > FLOAT_TOLERANCE),
        None,
    )
    line = head + f", beyond float tolerance ({sci(FLOAT_TOLERANCE)})."
    if first is not None:
        sizes = {r.rank: sum(len(m.indices) for m in r.micro_steps if m.step == first) for r in run.ranks}
        line += (
            f" They part at step {first}, where the ranks trained on {', '.join(str(s) for s in sizes.values())} "
            f"samples: DDP averages per-rank means over all {run.world_size} ranks, which equals the combined "
            "batch's mean only when every rank's batch is the same size."
        )
    return [line]


def effective_batch_line(run: DDPRun) -> str:
    options = run.options
    per_step = analysis.samples_per_step(run)
    line = (
        f"Effective batch: {options.per_rank_batch} per rank × {run.world_size} ranks × {options.accumulation} "
        f"accumulation = **{options.effective_batch}** samples per optimizer step"
    )
    if per_step and any(s != options.effective_batch for s in per_step):
        line += (
            f"; this run's {plural(len(per_step), 'step')} had {indices(per_step)} (fewer where an epoch's end "
            "cut a batch or an accumulation group short)"
        )
    return line + "."


def communication_lines(run: DDPRun) -> list[str]:
    comm = analysis.communication(run)
    if comm.micro_steps == 0:  # rank 0 left no record of its steps
        return []
    lines = []
    k = run.options.accumulation
    if k > 1:
        skipped = comm.micro_steps - comm.synced_micro_steps
        lines.append(
            f"Rank 0 trained on {plural(comm.micro_steps, 'micro-batch')} and all-reduced after "
            f"{comm.synced_micro_steps} of them: under `no_sync()` the other {skipped} only added to the local "
            f"`.grad`, so communication happened once per {k} micro-batches (or fewer at an epoch's end)."
        )
    if comm.buckets:
        lines.append(bucket_line(run, comm))
    overlap = overlap_ms(run)
    if overlap is not None:
        lines.append(
            f"The first bucket's all-reduce started {overlap:.2f} ms before backward finished: communication "
            "overlaps the rest of backward, which is what buckets are for."
        )
    return lines


def bucket_line(run: DDPRun, comm: analysis.Communication) -> str:
    """How many buckets (all-reduce calls) each step used, and their sizes; DDP rebuilds them after step 0."""
    rank = run.ranks[0]
    sizes = {}
    for c in rank.collectives:
        if not c.shadow:
            sizes.setdefault(c.step, []).append(c.bytes)
    cap = f"bucket_cap_mb={bucket_label(run.options.bucket_cap_mb)}"
    first, last = comm.buckets[0], comm.buckets[-1]
    listed = ", ".join(format_bytes(b) for b in sizes.get(rank.steps[-1].step, []))
    if first != last:
        return (
            f"{cap}: the first step all-reduced all {format_bytes(comm.bytes_per_step)} of gradients in {first} "
            f"bucket(s); after it DDP rebuilt its buckets in the order the gradients became ready, and each later "
            f"backward made {last} all-reduce calls ({listed})."
        )
    return f"{cap}: each synchronised backward all-reduced its gradients in {plural(last, 'bucket')} ({listed})."


def overlap_ms(run: DDPRun) -> float | None:
    """Mean time between the first bucket's all-reduce start and the end of backward, when a step had 2+ buckets."""
    rank = run.ranks[0]
    gaps = []
    for entry in rank.micro_steps:
        calls = [c for c in rank.collectives if not c.shadow and c.step == entry.step and c.epoch == entry.epoch]
        if entry.synced and len(calls) > 1:
            gaps.append((entry.backward[1] - min(c.start for c in calls)) * 1000)
    return sum(gaps) / len(gaps) if gaps else None


LAUNCH_REASONS = {
    FORKSERVER_WARM: "forked from a server process that had already imported torch",
    FORKSERVER_COLD: "the lab's forkserver imported torch once, for this run and the next ones",
    FORKSERVER_SHARED: "forked from a forkserver another part of this process started, so each rank imported "
    "DDP's own modules (torch._dynamo) itself",
    TORCHRUN: "torchrun's agent, then a fresh interpreter importing torch per rank",
}


def timing_line(run: DDPRun) -> str | None:
    shares = analysis.time_shares(run)
    if shares is None:
        return None
    phases = analysis.mean_phase_ms(run)
    steps = ", ".join(f"{name} {value:.2f} ms" for name, value in phases.items())
    reason = LAUNCH_REASONS.get(run.launch_method, "from each rank's script start: importing torch")
    return (
        f"Of the run's {seconds(shares.total_s)}, starting the processes took {seconds(shares.launch_s)} "
        f"(**{shares.launch_share:.0%}**: {reason}), init {seconds(shares.init_s)}, training "
        f"{seconds(shares.training_s)}. Per micro-batch: {steps}."
    )


def explain(run: DDPRun) -> list[str]:
    """The lesson of this run, one markdown sentence (or two) per fact, from its records."""
    lines = [processes_line(run), *sampler_lines(run)]
    lines += [line for line in (epoch_order_line(run), averaging_line(run)) if line]
    lines += single_process_lines(run)
    lines.append(effective_batch_line(run))
    lines += communication_lines(run)
    lines += failures.uneven_lines(run)
    lines += [line for line in (one_writer_line(run), timing_line(run)) if line]
    return lines
