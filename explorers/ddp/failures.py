"""The DDP lab's sentences about uneven inputs and failed ranks: Join's shadowing, pairing by call order, timeouts.

Each sentence appears only when its case happened in the run, with the run's own numbers;
text that came from a rank (an error message) is shown as a code span, never as markdown.
A rank that left no complete record counts as unknown, never as zero: what it did after its
record ends is not said.
"""

from __future__ import annotations

from explorers.ddp import analysis
from explorers.ddp.results import THIS_MACHINE, DDPRun
from explorers.ddp.settings import COLLECTIVE_TIMEOUT_S
from explorers.ddp.words import code, plural, ranks
from explorers.units import seconds


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
    if not uneven and not failed:
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
