"""The DDP lab's sentences about uneven inputs and failed ranks: Join's shadowing, pairing by call order, timeouts.

Each sentence appears only when its case happened in the run, with the run's own numbers;
text that came from a rank (an error message) is shown as a code span, never as markdown.
"""

from __future__ import annotations

import math

from explorers.ddp import analysis
from explorers.ddp.results import THIS_MACHINE, DDPRun
from explorers.ddp.settings import COLLECTIVE_TIMEOUT_S
from explorers.ddp.words import code, plural, ranks, seconds


def uneven_lines(run: DDPRun) -> list[str]:
    uneven = analysis.uneven_epochs(run)
    failed = analysis.failed_ranks(run)
    if not uneven and not failed:
        return []
    lines = []
    counts = analysis.batches_per_epoch(run)
    if uneven:
        epoch = uneven[0]
        lines.append(
            f"Uneven inputs: in epoch {epoch} the ranks had {', '.join(map(str, counts[epoch]))} micro-batches."
        )
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
            "collectives paired up by count. Uneven inputs hang only when the ranks' numbers of calls differ."
        )
    plan = sync_plan_line(run)
    if plan and failed:
        lines.append(plan)
    for pairing in analysis.mismatched_pairings(run)[:2]:
        where = "; ".join(
            f"rank {r}: " + ("never made it" if p is None else f"epoch {p[0]} step {p[1]}")
            for r, p in enumerate(pairing.positions)
        )
        lines.append(
            f"All-reduce call {pairing.call} paired different work ({where}): collectives match by call order, "
            "not by meaning."
        )
    start = run.started_at
    for rank in failed:
        when = f" at {seconds(rank.finished_at - start)}" if rank.finished_at else ""
        error = f": {code(rank.error)}" if rank.error else ""
        lines.append(f"Rank {rank.rank} {rank.outcome} during {rank.phase}{when}{error}")
    timed_out = [r.rank for r in failed if r.error and "Timed out" in r.error]
    if timed_out and run.source == THIS_MACHINE:
        lines.append(
            f"{ranks(timed_out).capitalize()} gave up after the process group's {COLLECTIVE_TIMEOUT_S:g} s timeout "
            "(the default is 30 minutes), and the launcher then ended every process of the run."
        )
    if run.outcome == "timed_out" and run.note:
        lines.append(f"The launcher's note: {code(run.note)}.")
    return lines


def sync_plan_line(run: DDPRun) -> str | None:
    """With accumulation and uneven shards, where each rank's first all-reduce falls (from the shard sizes)."""
    options = run.options
    if options.accumulation < 2 or options.uses_sampler:
        return None
    sizes = [len(range(r, options.dataset_size, run.world_size)) for r in range(run.world_size)]
    batches = [math.ceil(size / options.per_rank_batch) for size in sizes]
    first_sync = [min(options.accumulation, b) for b in batches]  # the micro-batch whose backward all-reduces
    if len(set(first_sync)) < 2:
        return None
    where = ", ".join(f"rank {r}: its micro-batch {m}" for r, m in enumerate(first_sync))
    return (
        f"With accumulation {options.accumulation} and shards of {', '.join(map(str, batches))} batches, the ranks' "
        f"first all-reduce falls at different micro-batches ({where}): one rank's backward all-reduces while "
        "another's runs under `no_sync()`, so their collectives stop pairing up."
    )
