"""The DDP lab's lesson: every sentence read off one run's records, and a sentence only for what happened.

A run that finished gets the averaging, the single-process comparison and the timings; a
run that failed gets what each rank was doing when it stopped. Padding is described only
when the sampler padded, Join only when the shards were uneven, and so on.
"""

from __future__ import annotations

import explorers.ddp.analysis as analysis
from explorers.ddp.options import bucket_label
from explorers.ddp.results import FORKSERVER_COLD, FORKSERVER_SHARED, FORKSERVER_WARM, THIS_MACHINE, TORCHRUN, DDPRun
from explorers.ddp.settings import COLLECTIVE_TIMEOUT_S
from explorers.statements import Statement
from explorers.units import format_bytes, sci, seconds

# --- How numbers and names go into sentences: short, and safe to render as markdown ---------------

LAUNCHERS = {"processes": "the lab's launcher", "torchrun": "torchrun"}
STARTED_BY = {  # how a run's ranks started, for the banner over its diagram
    FORKSERVER_WARM: "forked from a warm forkserver",
    FORKSERVER_COLD: "forkserver started for this run (torch imported once)",
    FORKSERVER_SHARED: "forked from a shared forkserver",
    TORCHRUN: "started by torchrun",
}
CLUSTER_COMMAND = (  # the same worker script on N machines; rank 0 writes the results file
    "torchrun --nnodes N --nproc-per-node GPUS --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\\n"
    "    -m explorers.ddp.worker --out ddp-results.json --per-rank-batch 4 --dataset-size 64 --device cuda"
)
FLOAT_TOLERANCE = 1e-5  # float32 training against a float64 reference, a dozen steps: differences are ~1e-7


def code(text: str) -> str:
    """Text from a run (an error message) as a code span: markdown inside it is never rendered."""
    return "`" + " ".join(text.replace("`", "'").split()) + "`"


def indices(values, shown: int = 12) -> str:
    values = list(values)
    text = ", ".join(str(v) for v in values[:shown])
    return text + (f" … ({len(values)} in all)" if len(values) > shown else "")


def ranks(ranks) -> str:
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + " and ".join(", ".join(map(str, ranks)).rsplit(", ", 1))


PLURALS = {"process": "processes", "entry": "entries", "micro-batch": "micro-batches", "batch": "batches"}


def plural(count: int, word: str) -> str:
    return f"{count} {word if count == 1 else PLURALS.get(word, word + 's')}"


QUESTION = "What does DistributedDataParallel do that several GPUs alone do not?"

# What the lab says about PyTorch in general, each tried on the zoo in tests/claims/test_ddp.py.
STATEMENTS = {
    "broadcast_at_wrap": Statement(
        text="DistributedDataParallel broadcasts rank 0's parameters and buffers to every rank when it wraps the "
        "model.",
        scope="at construction with init_sync=True (the default), over the wrapped model's process group; DDP "
        "refuses a model with no parameter that requires grad",
        source="torch/nn/parallel/distributed.py: DistributedDataParallel.__init__ (_sync_module_states)",
    ),
    "bucket_overlap": Statement(
        text="DDP starts a bucket's all-reduce as soon as every gradient in it is ready, so with two or more "
        "buckets communication overlaps the rest of backward.",
        scope="when the gradients span two or more buckets (bucket_cap_mb below their size), from the second "
        "iteration on; with one bucket the all-reduce starts after the last gradient",
        source="https://pytorch.org/docs/stable/notes/ddp.html#internal-design",
    ),
    "join_uneven": Statement(
        text="With uneven inputs, `Join` lets every rank finish: a rank that runs out of data shadows the others' "
        "all-reduces with zeros until they are done.",
        scope="when the ranks all-reduce at the same micro-batches and every parameter gets a gradient each "
        "iteration; it cannot pair ranks that disagree on which micro-batch all-reduces (no_sync accumulation "
        "over shards of different lengths)",
        source="torch/distributed/algorithms/join.py: Join; https://pytorch.org/tutorials/advanced/generic_join.html",
    ),
    "default_timeout": Statement(
        text="A process group made without a `timeout` lets a stuck collective wait 30 minutes on gloo and 10 "
        "minutes on NCCL before it fails.",
        scope="torch 2.13's defaults for init_process_group and new_group; NCCL's is enforced by its watchdog, on "
        "by default",
        source="torch/distributed/constants.py; torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp: "
        "kProcessGroupNCCLDefaultTimeout",
    ),
    "sampler_padding": Statement(
        text="With drop_last=False, DistributedSampler pads its index list to a multiple of the number of ranks by "
        "repeating entries from the start of the list.",
        scope="when the dataset size is not a multiple of the number of replicas; with shuffle on, the start of "
        "that epoch's shuffled list; a list shorter than the padding is repeated whole",
        source="torch/utils/data/distributed.py: DistributedSampler.__iter__",
    ),
    "set_epoch": Statement(
        text="Without `sampler.set_epoch(epoch)`, a shuffling DistributedSampler gives every epoch the same order.",
        scope="shuffle=True; the order is seeded by seed + epoch, and the epoch stays what set_epoch last set "
        "(0 at first)",
        source="torch/utils/data/distributed.py: DistributedSampler.set_epoch",
    ),
}


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
            f"); after wrapping, every replica summed to {after[0]:.4f}, rank 0's. "
            + STATEMENTS["broadcast_at_wrap"].text
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
        return [line + ran_out_clause(run)]
    if first.padding:
        line = (
            f"DistributedSampler: {n} samples do not split evenly over {world} ranks, so with drop_last=False it "
            f"padded its list to {first.slots} ({sizes} per rank) by repeating "
            + (f"its first {plural(first.padding, 'entry')}" if first.repeats_are_the_first else "entries")
        )
        return [line + trained_twice_clause(first)]
    if first.dropped:
        return [
            f"DistributedSampler with drop_last=True trimmed {n} samples to {first.slots} ({sizes} per rank): index "
            f"{indices(first.dropped)} was not trained on in epoch 0."
        ]
    return [f"DistributedSampler: {n} samples split evenly over {plural(world, 'rank')} ({sizes} each); none repeats."]


def trained_twice_clause(epoch: analysis.SamplerEpoch) -> str:
    """What the batches that ran in the epoch held: a listed repeat is trained on twice only if both batches ran."""
    twice = epoch.trained_twice
    if twice:
        many = len(twice) > 1
        listed = ", ".join(f"{i} ({ranks(owners)})" for i, owners in twice.items())
        return f": {'indices' if many else 'index'} {listed} {'were' if many else 'was'} trained on twice in epoch 0."
    listed = ", ".join(f"{i} for {ranks(owners)}" for i, owners in epoch.repeats.items())
    if not epoch.complete:
        return f" ({listed})."
    trained = sum(len(owners) for owners in epoch.trained.values())
    return f" ({listed}), but the batches that ran in epoch 0 held {plural(trained, 'sample')}, none of them twice."


def ran_out_clause(run: DDPRun) -> str:
    """When each rank ran out of its slice in epoch 0, from the batches it ran (ranks that trained it all)."""
    after = analysis.ran_out_after(run, 0)
    if len(after) < run.world_size:
        return ""
    batches = sorted(set(after.values()))
    if len(batches) == 1:
        return f" In epoch 0 every rank ran out of data after {plural(batches[0], 'batch')}, together."
    parts = [f"{ranks([r for r, b in after.items() if b == count])} after {count}" for count in reversed(batches)]
    return f" In epoch 0 the ranks ran out of data at different steps: {', '.join(parts)} batches."


def _trained(rank, epoch: int) -> list[int]:
    return [i for m in rank.micro_steps if m.epoch == epoch for i in m.indices]


def epoch_order_line(run: DDPRun) -> str | None:
    """Rank 0's sampler order in epochs 0 and 1, and, where the run stopped before an epoch's list ran out, what
    its batches held instead (from the batches that ran)."""
    epochs = analysis.sampler_epochs(run)
    same = analysis.same_order_every_epoch(run)
    if same is None or not run.options.uses_sampler:
        return None
    zero, one = epochs[0].orders[0], epochs[1].orders[0]
    rank = run.ranks[0]
    cut = [(e, _trained(rank, e)) for e in (0, 1) if _trained(rank, e) != list(epochs[e].orders[0])]
    ran = ""
    if cut:
        steps = len({m.step for m in rank.micro_steps})
        ended = (
            f"the run stopped at its {plural(steps, 'step')}"
            if steps == run.options.steps and rank.recorded and rank.outcome == "finished"
            else "its record ends there"
        )
        trained = "; ".join(f"in epoch {e} on {indices(held) if held else 'none of them'}" for e, held in cut)
        ran = f" Rank 0 trained {trained}: {ended}."
    if not run.options.shuffle:
        again = "the same order" if same else "a different order"
        return (
            f"shuffle=False: rank 0's sampler listed {indices(zero)} in epoch 0 and {indices(one)} in epoch 1, "
            f"{again} with set_epoch {'on' if run.options.set_epoch else 'off'}.{ran}"
        )
    if same:
        return (
            f"Without set_epoch the shuffle is seeded the same every epoch: rank 0's sampler listed {indices(zero)} in "
            f"epoch 0 and again {indices(one)} in epoch 1.{ran} " + STATEMENTS["set_epoch"].text
        )
    listed = f"rank 0's sampler listed {indices(zero)} in epoch 0, then {indices(one)}"
    return f"set_epoch reshuffled each epoch: {listed}.{ran}"


def _steps(steps) -> str:
    steps = list(steps)
    return ("step " if len(steps) == 1 else "steps ") + " and ".join(", ".join(map(str, steps)).rsplit(", ", 1))


def averaged_to(group: analysis.Averaging, run: DDPRun, short: bool = False) -> str:
    """What a group of steps' synced gradient equalled, from the recorded gradients: "the mean of 4 local
    gradients (to 5.2e-08)", or for steps some ranks had no batch in, the sum of the others' divided by W."""
    world, trained, gap = run.world_size, len(group.trained), sci(group.gap)
    if group.equals == analysis.MEAN:
        return f"the mean of the {world} local gradients (to {gap})"
    if group.equals == analysis.SHARE:
        text = f"the sum of {trained} local gradients divided by {world} (to {gap})"
        if short:
            return text
        joined = all(analysis.shadowed(run.ranks[r]) for r in group.absent)
        return (
            f"the sum of the local gradients of {ranks(group.trained)} divided by {world} (to {gap}), not their "
            f"mean: {ranks(group.absent)} had no batch in {'it' if len(group.steps) == 1 else 'them'}"
            + (" and, having joined, added zeros" if joined else "")
        )
    if group.equals == analysis.THEIR_MEAN:
        return f"the mean of the {trained} local gradients of {ranks(group.trained)} (to {gap})"
    return f"neither the mean of the {trained} local gradients nor their sum divided by {world} (off by {gap})"


def averaging_line(run: DDPRun) -> str | None:
    """Per step, from the recorded gradients: were the synced gradients equal, and equal to what."""
    groups = analysis.averaging(run, FLOAT_TOLERANCE)
    if not groups or run.world_size < 2:
        return None
    checks = analysis.gradient_checks(run)
    spread = max(c.spread_across_ranks for c in checks)
    same = "exactly the same gradient" if spread == 0 else f"the same gradient (largest difference {sci(spread)})"
    how = f"each rank divided its bucket by {run.world_size} and the all-reduce summed them."
    if len(groups) == 1 and groups[0].equals == analysis.MEAN:
        everyone = "both" if run.world_size == 2 else f"all {run.world_size}"
        return (
            f"After each step's all-reduce, {everyone} ranks held {same} over {plural(len(checks), 'step')}, equal "
            f"to the mean of their local gradients to {sci(groups[0].gap)}: {how}"
        )
    parts = [f"{_steps(g.steps).capitalize()}: {averaged_to(g, run)}." for g in groups]
    return (
        f"After each step's all-reduce, the ranks that trained in it held {same} ({plural(len(checks), 'step')}). "
        + " ".join(parts)
        + f" {how[0].upper()}{how[1:]}"
    )


def averaging_evidence(run: DDPRun) -> str | None:
    """The card's short form of the averaging line, from the same groups."""
    groups = analysis.averaging(run, FLOAT_TOLERANCE)
    if not groups or run.world_size < 2:
        return None
    spread = max(c.spread_across_ranks for c in analysis.gradient_checks(run))
    who = "every rank" if all(g.equals == analysis.MEAN for g in groups) else "the ranks that trained in a step"
    across = f"identical on {who}" if spread == 0 else f"equal on {who} to {sci(spread)}"
    if len(groups) == 1:
        return f"Synced gradients: {across}, {averaged_to(groups[0], run, short=True)}."
    parts = "; ".join(f"{_steps(g.steps)}: {averaged_to(g, run, short=True)}" for g in groups)
    return f"Synced gradients: {across}; {parts}."


def single_process_lines(run: DDPRun) -> list[str]:
    single = run.single_process
    if single is None:
        return []
    per_step = analysis.samples_per_step(run)  # what the ranks trained on together, from their records
    sizes = f" ({indices(per_step)} samples per step)" if per_step else ""
    head = (
        f"One process trained on the same combined batches{sizes} "
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
        line += f" They part at step {first}, " + _parting_words(run, first)
    return [line]


def _parting_words(run: DDPRun, step: int) -> str:
    """Why DDP and one process differ at `step`, from the micro-batch sizes each rank recorded there.

    The reference averages each combined micro-batch over its samples; DDP averages each rank's own
    micro-batch means, so the two differ exactly where the ranks' micro-batch j differ in size.
    """
    sizes = analysis.micro_batch_sizes(run, step)
    if all(len(s) <= 1 for s in sizes.values()):
        totals = ", ".join(str(sum(s)) for s in sizes.values())
        return (
            f"where the ranks trained on {totals} samples: DDP gave each rank's mean gradient the same weight, "
            f"1/{run.world_size}, while one process weighted every sample the same."
        )
    longest = max(len(s) for s in sizes.values())
    uneven = [j for j in range(longest) if len({s[j] if j < len(s) else 0 for s in sizes.values()}) > 1]
    if not uneven:
        return "where every rank's micro-batches had the same sizes (the difference is not in the batch sizes)."
    said = "; ".join(
        f"micro-batch {j + 1} held "
        + _and(
            [
                f"{s[j] if j < len(s) else 'no'} sample{'s' * (j >= len(s) or s[j] != 1)} on rank {rank}"
                for rank, s in sizes.items()
            ]
        )
        for j in uneven
    )
    everyone = all(j < len(s) for j in uneven for s in sizes.values())
    return (
        f"where {said}: DDP averaged each rank's micro-batch means, while one process averaged each combined "
        "micro-batch over its samples"
        + (", so a sample in the smaller micro-batch weighed more in DDP's step." if everyone else ".")
    )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


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
    unequal = _unequal_micro_batches(run)
    if unequal:
        step, sizes = unequal
        line += (
            f". In step {step} a rank's micro-batches held {' and '.join(map(str, sizes))} samples: the step "
            "averages the micro-batches' mean losses, so it is not the mean over its samples (each sample of a "
            "smaller micro-batch weighs more)"
        )
    return line + "."


def _unequal_micro_batches(run: DDPRun) -> tuple[int, list[int]] | None:
    """The first step in which some rank's micro-batches differ in size, with those sizes (the witness)."""
    steps = sorted({m.step for r in run.ranks for m in r.micro_steps})
    for step in steps:
        for sizes in analysis.micro_batch_sizes(run, step).values():
            if len(set(sizes)) > 1:
                return step, sizes
    return None


def communication_lines(run: DDPRun) -> list[str]:
    comm = analysis.communication(run)
    if comm.micro_steps == 0 or not run.ranks[0].recorded:  # rank 0's steps are not all known
        return []
    lines = []
    k = run.options.accumulation
    if k > 1:
        skipped = comm.micro_steps - comm.synced_micro_steps
        lines.append(
            f"Rank 0 trained on {plural(comm.micro_steps, 'micro-batch')} and all-reduced after "
            f"{comm.synced_micro_steps} of them: under `no_sync()` the other {skipped} accumulated into the local "
            f"`.grad` without communicating, once per {k} micro-batches (or fewer at an epoch's end)."
        )
    if comm.buckets:
        lines.append(bucket_line(run, comm))
    overlap = overlap_line(run)
    if overlap:
        lines.append(overlap)
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


def overlap_line(run: DDPRun) -> str | None:
    """Did an all-reduce start before backward had computed its last gradient? From hook times (rank 0)."""
    measured = analysis.overlaps(run)
    if not measured:
        return None  # a file from before the gradient times were recorded, or no synchronised step
    best = max(measured, key=lambda o: o.lead_ms)
    if best.lead_ms > 0:
        overlapped = sum(o.lead_ms > 0 for o in measured)
        return (
            f"In step {best.step}, the first of its {plural(best.buckets, 'bucket')} started its all-reduce "
            f"{best.lead_ms:.2f} ms before backward accumulated its last gradient: communication overlapped the "
            f"rest of backward ({overlapped} of {plural(len(measured), 'synchronised backward')})."
        )
    return (
        f"Every all-reduce started after backward had accumulated its last gradient (the closest by "
        f"{-best.lead_ms:.2f} ms, with {plural(best.buckets, 'bucket')}): nothing overlapped in this run."
    )


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
    lines += uneven_lines(run)
    lines += [line for line in (one_writer_line(run), timing_line(run)) if line]
    return lines


# --- The page's words: help texts, banners and captions, here so that claims tests can reach them ------------

NO_SAMPLER_HELP = "DistributedSampler's option: the own-slice sharding has no sampler."
HELP = {
    "world_size": "Ranks: one process each.",
    "accumulation": "no_sync for k-1 of k.",
    "steps": "Optimizer steps in the whole run.",
    "sharding": "Sampler: DistributedSampler (pads or drops to even shards). Own slice: rank::W, no padding.",
    "join": "torch.distributed.algorithms.Join, for uneven inputs.",
    "launcher": "forkserver: ranks fork from a process with torch loaded. torchrun: fresh interpreters, seconds each.",
}
NO_GRADIENTS = "No rank finished a synchronised step, so there are no gradients to compare."
TOPOLOGY_CAPTION = "Each box a process with its own model replica and its epoch-0 shard (* repeated by the sampler)"
CLUSTER_INTRO = (
    "The ranks here run `explorers/ddp/worker.py`, the same script torchrun starts on a cluster; rank 0 writes the "
    "same results file. On each of N machines:"
)


def bucket_help(gradient_bytes: int) -> str:
    return f"DDP's bucket_cap_mb. The model's gradients are {format_bytes(gradient_bytes)}: tiny caps split them."


def cpu_fallback_line(cuda_devices: int, world_size: int) -> str:
    return (
        f"DDP runs on the CPU with gloo here: NCCL needs one GPU per rank, and this machine has {cuda_devices} CUDA "
        f"device(s) for {world_size} rank(s)."
    )


def banner(run: DDPRun, where: str) -> tuple[bool, str]:
    """(finished, the banner over the run's diagram), read off the ranks' outcomes."""
    if run.outcome == "finished":
        return True, f"**Finished**: {plural(run.world_size, 'rank')}, {where}."
    failed = [r for r in run.ranks if r.outcome != "finished"]
    named = ", ".join(f"rank {r.rank} {r.outcome} during {r.phase}" for r in failed)
    if not failed:  # the run's outcome with no rank's record to say which failed (a file can say so)
        named = "every rank's own record ends finished" + (
            "; the launcher's note, shown as plain text under *Why*, says what ended the run"
            if run.note
            else ", and the file holds no note on what ended the run"
        )
        return False, f"**{run.outcome.replace('_', ' ').capitalize()}**: {named}."
    return False, f"**{run.outcome.replace('_', ' ').capitalize()}**: {named}. See *Why* below."


def upload_label(limit: str) -> str:
    return f"Load a results file (JSON, at most {limit})"


def sample_label(name: str) -> str:
    return f"Show the sample: {name}, written by torchrun on 2 nodes × 2 ranks"


def not_a_results_file(quoted_name: str) -> str:
    return f"{quoted_name} is not a DDP lab results file:"


# --- Uneven inputs and failed ranks: Join's shadowing, pairing by call order, timeouts ---------------------
# Each sentence appears only when its case happened in the run, with the run's own numbers; text that came from a
# rank (an error message) is a code span, never markdown. A rank that left no complete record counts as unknown,
# never as zero: what it did after its record ends is not said.


def _progress(p: analysis.EpochProgress) -> str:
    """What one rank ran in an epoch, as its record says: a count, how it failed, or unknown."""
    if not p.known:
        return "unknown (its record ended early)"
    if not p.failed:
        return str(p.completed)
    if p.failed_in_next:  # its record holds the all-reduce that micro-batch's backward started
        return f"{p.completed}, then failed during the {'first' if p.completed == 0 else 'next'}"
    return f"{p.completed}, then failed"


def ran_line(run: DDPRun, epoch: int) -> str:
    """Uneven inputs: the shards' sizes and the micro-batches each rank ran in the epoch, from its record."""
    progress = analysis.epoch_progress(run, epoch)
    shards = analysis.shard_sizes(run, epoch)
    line = f"Uneven inputs: in epoch {epoch} "
    if None not in shards and len(set(shards)) > 1:
        line += f"the ranks' shards held {', '.join(map(str, shards))} samples and "
    if all(p.known and not p.failed for p in progress):
        return line + f"the ranks ran {', '.join(str(p.completed) for p in progress)} micro-batches."
    said: dict[str, list[int]] = {}
    for rank, p in enumerate(progress):
        said.setdefault(_progress(p), []).append(rank)
    return line + "the ranks ran these micro-batches: " + "; ".join(f"{ranks(r)}: {t}" for t, r in said.items()) + "."


def uneven_lines(run: DDPRun) -> list[str]:
    uneven = analysis.uneven_epochs(run)
    failed = analysis.failed_ranks(run)
    if not uneven and not failed and not (run.outcome == "timed_out" and run.note):
        return []
    lines = []
    if uneven:
        lines.append(ran_line(run, uneven[0]))
    if run.options.join and not failed:
        joined = [(r.rank, analysis.shadowed(r)) for r in run.ranks if analysis.shadowed(r)]
        if joined:
            who = "; ".join(f"rank {r} shadowed {plural(n, 'all-reduce')}" for r, n in joined)
            lines.append(
                f"With Join every rank finished: a rank that ran out of data joined and matched the others' "
                f"all-reduces with zeros ({who}); DDP still divided by {run.world_size}, and Join's end broadcast the "
                "final model to every rank."
            )
    calls = [sum(not c.shadow for c in r.collectives) for r in run.ranks]
    if uneven and not run.options.join and not failed and len(set(calls)) == 1:
        lines.append(
            f"Without Join this run still finished: every rank made {plural(calls[0], 'all-reduce call')}, so the "
            "collectives paired up by count and no rank waited for a partner."
        )
    disagreement = sync_disagreement_line(run)
    if disagreement and failed:
        lines.append(disagreement)
    lines += [pairing_line(p) for p in analysis.mismatched_pairings(run)[:2]]
    start = run.started_at
    for rank in failed:
        when = f" at {seconds(rank.finished_at - start)}" if rank.finished_at else ""
        error = f": {code(rank.error)}" if rank.error else ""
        lines.append(f"Rank {rank.rank} {rank.outcome} during {rank.phase}{when}{error}")
    timed_out = [r.rank for r in failed if r.error and "Timed out" in r.error]
    if timed_out and run.source == THIS_MACHINE:
        from explorers.ddp.lesson import STATEMENTS  # lesson imports this module

        lines.append(
            f"{ranks(timed_out).capitalize()} gave up after the process group's {COLLECTIVE_TIMEOUT_S:g} s timeout, "
            "and the launcher then ended every process of the run. " + STATEMENTS["default_timeout"].text
        )
    if run.outcome == "timed_out" and run.note:
        lines.append(f"The launcher's note: {code(run.note)}.")
    return lines


def _where(position) -> str:
    if isinstance(position, tuple):
        return f"epoch {position[0]} step {position[1]}"
    return {
        analysis.NO_CALL: "made no such call",
        analysis.SHADOW: "a shadow all-reduce of zeros",
        analysis.UNKNOWN: "unknown (its record ended before it)",
    }[position]


def pairing_line(pairing: analysis.Pairing) -> str:
    where = "; ".join(f"rank {r}: {_where(p)}" for r, p in enumerate(pairing.positions))
    if pairing.different_work:
        return (
            f"All-reduce call {pairing.call} paired different work ({where}): the ranks' calls met by their order, "
            "whatever step each belonged to."
        )
    callers = [r for r, p in enumerate(pairing.positions) if isinstance(p, tuple)]
    return f"All-reduce call {pairing.call} had no partner ({where}): {ranks(callers)} made it and waited."


def sync_disagreement_line(run: DDPRun) -> str | None:
    """Where the ranks' records disagree on whether a micro-batch's backward all-reduced (accumulation)."""
    from explorers.ddp.lesson import STATEMENTS  # lesson imports this module

    found = analysis.first_sync_disagreement(run)
    if found is None:
        return None
    return (
        f"At micro-batch {found.micro_batch} of the run, {ranks(found.all_reduced)} all-reduced its gradients while "
        f"{ranks(found.under_no_sync)} ran backward under `no_sync()` and made no all-reduce."
    ) + (f" Join was on, and its promise holds {STATEMENTS['join_uneven'].scope}." if run.options.join else "")
