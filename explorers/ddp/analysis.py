"""What a DDP run shows, read off its records: shards and padding, averaging, communication, unevenness, time.

Pure functions of a `DDPRun` (from this machine or from a results file); the lesson turns
them into sentences and the figures into charts, so both say the same thing.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from explorers.ddp.results import DDPRun, RankResult


@dataclass(frozen=True)
class SamplerEpoch:
    epoch: int
    orders: tuple[tuple[int, ...], ...]  # per rank, the indices its sampler (or slice) gave, in order
    slots: int  # samples handed out over all ranks
    repeats: dict[int, tuple[int, ...]]  # index -> the ranks that got it, for indices handed out more than once
    dropped: tuple[int, ...]  # indices no rank got
    global_order: tuple[int, ...]  # the sampler's list before the split: rank r took positions r, r + W, ...
    padding: int  # slots added beyond the dataset (DistributedSampler, drop_last=False)
    # What the ranks' batches really held this epoch (their micro-steps), not what the sampler listed:
    trained: dict[int, tuple[int, ...]]  # index -> the ranks that trained on it, once per time
    batches: tuple[int | None, ...]  # per rank, micro-batches it ran; None where its record ended before the epoch did

    @property
    def trained_twice(self) -> dict[int, tuple[int, ...]]:
        return {i: owners for i, owners in self.trained.items() if len(owners) > 1}

    @property
    def complete(self) -> bool:
        """Every rank's record covers the whole epoch, so what it trained on is known."""
        return None not in self.batches

    @property
    def repeats_are_the_first(self) -> bool:
        """DistributedSampler pads by repeating the head of its (maybe shuffled) list: check it in this run."""
        return self.padding > 0 and self.global_order[-self.padding :] == self.global_order[: self.padding]


def sampler_epochs(run: DDPRun) -> list[SamplerEpoch]:
    size, world = run.options.dataset_size, run.world_size
    epochs = min((len(r.sampler_orders) for r in run.ranks), default=0)
    found = []
    for epoch in range(epochs):
        orders = tuple(r.sampler_orders[epoch] for r in run.ranks)
        counts = Counter(i for order in orders for i in order)
        owners = {i: tuple(r for r, order in enumerate(orders) for j in order if j == i) for i in counts}
        longest = max(len(o) for o in orders)
        global_order = tuple(orders[r][k] for k in range(longest) for r in range(world) if k < len(orders[r]))
        found.append(
            SamplerEpoch(
                epoch=epoch,
                orders=orders,
                slots=sum(counts.values()),
                repeats={i: owners[i] for i in sorted(counts) if counts[i] > 1},
                dropped=tuple(i for i in range(size) if i not in counts),
                global_order=global_order,
                padding=max(0, sum(counts.values()) - size),
                trained=trained_indices(run, epoch),
                batches=batches_per_epoch(run)[epoch] if epoch < len(batches_per_epoch(run)) else (0,) * world,
            )
        )
    return found


def same_order_every_epoch(run: DDPRun) -> bool | None:
    """Whether every rank saw its samples in the same order each epoch (None with fewer than two epochs)."""
    epochs = sampler_epochs(run)
    if len(epochs) < 2:
        return None
    return all(e.orders == epochs[0].orders for e in epochs[1:])


@dataclass(frozen=True)
class GradientCheck:
    step: int
    ranks_with_data: tuple[int, ...]  # ranks that recorded a local gradient in this step (the others had no batch)
    spread_across_ranks: float  # largest difference between two of those ranks' gradients after the all-reduce
    gap_to_share: float  # largest difference between the synced gradient and (sum of their local gradients) / W
    gap_to_their_mean: float  # ... and the mean of their local gradients (the same as the share when all W trained)


def gradient_checks(run: DDPRun) -> list[GradientCheck]:
    """Per step, on the ranks that recorded it: are the synced gradients equal, and to what are they equal?"""
    world = run.world_size
    by_step: dict[int, list] = {}
    for rank in run.ranks:
        for entry in rank.steps:
            by_step.setdefault(entry.step, []).append((rank.rank, entry))
    checks = []
    for step, entries in sorted(by_step.items()):
        synced = [e.synced for _, e in entries]
        total = [sum(values) for values in zip(*(e.local for _, e in entries), strict=True)]
        checks.append(
            GradientCheck(
                step=step,
                ranks_with_data=tuple(r for r, _ in entries),
                spread_across_ranks=max(_gap(s, synced[0]) for s in synced),
                gap_to_share=max(_gap(s, [t / world for t in total]) for s in synced),
                gap_to_their_mean=max(_gap(s, [t / len(entries) for t in total]) for s in synced),
            )
        )
    return checks


MEAN = "mean"  # every rank trained: the synced gradient is the mean of all W local gradients
SHARE = "share"  # some ranks had no batch: the synced gradient is the trained ranks' sum divided by W
THEIR_MEAN = "their mean"  # some ranks had no batch, and the synced gradient is the mean of the others'
NEITHER = "neither"  # none of these within float tolerance


@dataclass(frozen=True)
class Averaging:
    """Steps whose synced gradient equalled the same thing, read off the recorded gradients."""

    steps: tuple[int, ...]
    trained: tuple[int, ...]  # ranks with a local gradient in these steps
    absent: tuple[int, ...]  # ranks without one
    equals: str  # MEAN, SHARE, THEIR_MEAN or NEITHER
    gap: float  # the largest difference from it (from the nearer of the two when NEITHER)


def averaging(run: DDPRun, tolerance: float) -> list[Averaging]:
    """The steps grouped by what their synced gradient equalled, in the order the groups first occur."""
    world = tuple(range(run.world_size))
    groups: dict[tuple, list[GradientCheck]] = {}
    for check in gradient_checks(run):
        if len(check.ranks_with_data) == run.world_size:
            equals = MEAN
        elif check.gap_to_share <= tolerance and check.gap_to_share <= check.gap_to_their_mean:
            equals = SHARE
        elif check.gap_to_their_mean <= tolerance:
            equals = THEIR_MEAN
        else:
            equals = NEITHER
        groups.setdefault((check.ranks_with_data, equals), []).append(check)
    found = []
    for (trained, equals), checks in groups.items():
        gaps = [c.gap_to_their_mean if equals == THEIR_MEAN else c.gap_to_share for c in checks]
        if equals == NEITHER:
            gaps = [min(c.gap_to_share, c.gap_to_their_mean) for c in checks]
        absent = tuple(r for r in world if r not in trained)
        found.append(Averaging(tuple(c.step for c in checks), trained, absent, equals, max(gaps)))
    return found


def _gap(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class Communication:
    micro_steps: int  # micro-batches rank 0 trained on
    synced_micro_steps: int  # of which ended with an all-reduce
    calls: int  # all-reduce calls rank 0 made for gradients
    buckets: tuple[int, ...]  # per synchronised step, how many buckets (calls)
    bytes_per_step: int  # gradient bytes all-reduced per synchronised step


def communication(run: DDPRun) -> Communication:
    rank = run.ranks[0]
    real = [c for c in rank.collectives if not c.shadow]
    steps = {c.step for c in real}
    per_step = [sum(c.bytes for c in real if c.step == s) for s in sorted(steps)]
    return Communication(
        micro_steps=len(rank.micro_steps),
        synced_micro_steps=sum(m.synced for m in rank.micro_steps),
        calls=len(real),
        buckets=tuple(s.buckets for s in rank.steps),
        bytes_per_step=max(per_step, default=0),
    )


def trained_indices(run: DDPRun, epoch: int) -> dict[int, tuple[int, ...]]:
    """Index -> the ranks whose batches held it in this epoch (a rank twice if it trained on it twice)."""
    found: dict[int, list[int]] = {}
    for rank in run.ranks:
        for entry in rank.micro_steps:
            if entry.epoch == epoch:
                for index in entry.indices:
                    found.setdefault(index, []).append(rank.rank)
    return {i: tuple(found[i]) for i in sorted(found)}


def record_covers(rank: RankResult, epoch: int) -> bool:
    """Whether the rank's record holds all of this epoch: it went on to a later epoch, or it finished the run
    and wrote its own ending. A rank that failed did not finish the epoch it failed in."""
    if any(m.epoch > epoch for m in rank.micro_steps) or len(rank.sampler_orders) > epoch + 1:
        return True
    return rank.recorded and rank.outcome == "finished"


def batches_per_epoch(run: DDPRun) -> list[tuple[int | None, ...]]:
    """Per epoch, the micro-batches each rank ran; None (unknown, not 0) where its record does not cover the epoch."""
    epochs = max((m.epoch for r in run.ranks for m in r.micro_steps), default=-1) + 1
    epochs = max(epochs, min((len(r.sampler_orders) for r in run.ranks), default=0))
    return [
        tuple(sum(m.epoch == e for m in r.micro_steps) if record_covers(r, e) else None for r in run.ranks)
        for e in range(epochs)
    ]


@dataclass(frozen=True)
class EpochProgress:
    """What one rank's record says it ran in one epoch."""

    completed: int  # micro-batches whose record is complete
    known: bool  # the record covers the epoch, or the rank failed in it and wrote its own record as it failed
    failed: bool  # the rank failed during this epoch, after `completed` micro-batches
    failed_in_next: bool  # ... while that next micro-batch's backward was all-reducing (its call is recorded)


def epoch_progress(run: DDPRun, epoch: int) -> tuple[EpochProgress, ...]:
    found = []
    for rank in run.ranks:
        completed = sum(m.epoch == epoch for m in rank.micro_steps)
        if record_covers(rank, epoch):
            found.append(EpochProgress(completed, True, False, False))
            continue
        own = rank.recorded and rank.outcome == "failed" and len(rank.sampler_orders) == epoch + 1
        following = len(rank.micro_steps)  # the run's index of the micro-batch after the last complete one
        in_next = own and any(c.micro_batch == following and not c.shadow for c in rank.collectives)
        found.append(EpochProgress(completed, own, own, in_next))
    return tuple(found)


def uneven_epochs(run: DDPRun) -> list[int]:
    """Epochs in which the ranks' shards held different numbers of samples, or the ranks whose records cover the
    epoch ran different numbers of micro-batches."""
    found = []
    for e, counts in enumerate(batches_per_epoch(run)):
        shards = {len(r.sampler_orders[e]) for r in run.ranks if e < len(r.sampler_orders)}
        if len(shards) > 1 or len({c for c in counts if c is not None}) > 1:
            found.append(e)
    return found


def shard_sizes(run: DDPRun, epoch: int) -> tuple[int | None, ...]:
    """Per rank, the samples its sampler (or slice) listed for the epoch; None where its record has no list."""
    return tuple(len(r.sampler_orders[epoch]) if epoch < len(r.sampler_orders) else None for r in run.ranks)


def ran_out_after(run: DDPRun, epoch: int) -> dict[int, int]:
    """Rank -> the batches after which it had trained on its whole shard in this epoch (ranks that did)."""
    found = {}
    for rank in run.ranks:
        if epoch >= len(rank.sampler_orders) or not record_covers(rank, epoch):
            continue
        batches = [m.indices for m in rank.micro_steps if m.epoch == epoch]
        if [i for batch in batches for i in batch] == list(rank.sampler_orders[epoch]):
            found[rank.rank] = len(batches)
    return found


def shadowed(rank: RankResult) -> int:
    """All-reduces of zeros this rank made after its data ran out (Join's shadowing)."""
    return sum(c.shadow for c in rank.collectives)


UNKNOWN = "unknown"  # a rank's record ended before this call: whether it made it is not known
NO_CALL = "no call"  # the rank's complete record holds no such call
SHADOW = "shadow"  # a joined rank's all-reduce of zeros


@dataclass(frozen=True)
class Pairing:
    call: int  # the n-th gradient all-reduce on every rank (1-based)
    positions: tuple[tuple[int, int] | str, ...]  # per rank (epoch, step), or NO_CALL, SHADOW or UNKNOWN
    different_work: bool  # two ranks' calls belong to different steps; else a rank made no such call


def _position(rank: RankResult, n: int) -> tuple[int, int] | str:
    if n >= len(rank.collectives):
        return NO_CALL if rank.recorded else UNKNOWN
    call = rank.collectives[n]
    return SHADOW if call.shadow else (call.epoch, call.step)


def mismatched_pairings(run: DDPRun) -> list[Pairing]:
    """Collectives pair by call order: the calls where ranks' n-th all-reduces belong to different steps, or
    where a rank whose record is complete made no n-th call (without Join, the others waited for it)."""
    longest = max((len(r.collectives) for r in run.ranks), default=0)
    found = []
    for n in range(longest):
        positions = tuple(_position(rank, n) for rank in run.ranks)
        real = {p for p in positions if isinstance(p, tuple)}
        if len(real) > 1 or (len(real) == 1 and NO_CALL in positions and not run.options.join):
            found.append(Pairing(n + 1, positions, different_work=len(real) > 1))
    return found


@dataclass(frozen=True)
class SyncDisagreement:
    micro_batch: int  # the run's n-th micro-batch (from 0) on every rank
    all_reduced: tuple[int, ...]  # ranks whose backward all-reduced there
    under_no_sync: tuple[int, ...]  # ranks whose backward ran under no_sync there


def first_sync_disagreement(run: DDPRun) -> SyncDisagreement | None:
    """The first micro-batch at which one rank's backward made a gradient all-reduce while another rank's
    record shows it ran that micro-batch under no_sync (a partial record counts for what it holds)."""
    longest = max((len(r.micro_steps) for r in run.ranks), default=0)
    for n in range(longest):
        reduced = tuple(
            r.rank
            for r in run.ranks
            if any(c.micro_batch == n and not c.shadow for c in r.collectives)
            or (n < len(r.micro_steps) and r.micro_steps[n].synced)
        )
        skipped = tuple(r.rank for r in run.ranks if n < len(r.micro_steps) and not r.micro_steps[n].synced)
        if reduced and skipped:
            return SyncDisagreement(n, reduced, skipped)
    return None


@dataclass(frozen=True)
class Overlap:
    epoch: int
    step: int
    buckets: int  # all-reduce calls of this backward
    lead_ms: float  # how long before the last gradient was accumulated the first all-reduce started (< 0: after)


def overlaps(run: DDPRun) -> list[Overlap]:
    """Per synchronised backward of rank 0: its first all-reduce's start against its last gradient's time."""
    rank = run.ranks[0]
    found = []
    for entry in rank.micro_steps:
        calls = [c for c in rank.collectives if not c.shadow and (c.epoch, c.step) == (entry.epoch, entry.step)]
        if entry.synced and calls and entry.last_gradient_at is not None:
            lead = (entry.last_gradient_at - min(c.start for c in calls)) * 1000
            found.append(Overlap(entry.epoch, entry.step, len(calls), lead))
    return found


def samples_per_step(run: DDPRun) -> list[int]:
    """Per optimizer step, how many samples all ranks together trained on (the effective batch as it was)."""
    totals: Counter = Counter()
    for rank in run.ranks:
        for entry in rank.micro_steps:
            totals[entry.step] += len(entry.indices)
    return [totals[s] for s in sorted(totals)]


def micro_batch_sizes(run: DDPRun, step: int) -> dict[int, list[int]]:
    """rank -> the sizes of its micro-batches in `step`, in order, from the indices each rank recorded."""
    sizes: dict[int, list[int]] = {}
    for rank in run.ranks:
        entries = sorted((m for m in rank.micro_steps if m.step == step), key=lambda m: m.micro)
        sizes[rank.rank] = [len(m.indices) for m in entries]
    return sizes


@dataclass(frozen=True)
class TimeShares:
    total_s: float
    launch_s: float  # the slowest rank's start: interpreter and imports
    init_s: float  # until the last rank has its DDP model
    training_s: float  # from there to the last rank's end of training
    rest_s: float  # gathering, the reference, writing the file, exiting

    @property
    def launch_share(self) -> float:
        return self.launch_s / self.total_s if self.total_s else 0.0


def time_shares(run: DDPRun) -> TimeShares | None:
    """Where the run's wall-clock time went; None if some rank never got through init."""
    ranks = run.ranks
    if any(r.ready_at is None or r.init_done_at is None or r.finished_at is None for r in ranks):
        return None
    start = run.started_at
    ready, inited = max(r.ready_at for r in ranks), max(r.init_done_at for r in ranks)
    trained = max(r.finished_at for r in ranks)
    end = run.launch_ended_at or trained
    return TimeShares(end - start, ready - start, inited - ready, trained - inited, max(0.0, end - trained))


def mean_phase_ms(run: DDPRun) -> dict[str, float]:
    """Mean milliseconds per micro-batch of each phase over every rank (for the lesson's summary)."""
    phases: dict[str, list[float]] = {"data": [], "forward": [], "backward": [], "optimizer": []}
    for rank in run.ranks:
        for m in rank.micro_steps:
            for name in ("data", "forward", "backward"):
                span = getattr(m, name)
                phases[name].append((span[1] - span[0]) * 1000)
            if m.optimizer is not None:
                phases["optimizer"].append((m.optimizer[1] - m.optimizer[0]) * 1000)
    return {name: statistics.fmean(values) for name, values in phases.items() if values}


def failed_ranks(run: DDPRun) -> list[RankResult]:
    return [r for r in run.ranks if r.outcome != "finished"]
