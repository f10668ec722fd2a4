"""The DDP lab's answer card, its predict-then-reveal question, and the DataParallel-versus-DDP table.

The card's evidence, the question's answer and the table's last column are read off the
run on screen; change a knob and they change with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import explorers.ddp.analysis as analysis
import explorers.ddp.lesson as lesson
from explorers.cards import AnswerCard
from explorers.ddp.lesson import LAUNCHERS, STATEMENTS, indices, ranks
from explorers.ddp.results import DDPRun
from explorers.ddp.settings import COLLECTIVE_TIMEOUT_S
from explorers.units import format_bytes, sci, seconds


def answer_card(run: DDPRun) -> AnswerCard:
    return AnswerCard(
        question=lesson.QUESTION,
        requirement=(
            "Train one model on W devices so that a step uses W times the data and gives the same update as one "
            "process on the combined batch. Assumed: the model fits on one device (otherwise FSDP or tensor "
            "parallelism); out of scope: tuning the network between machines."
        ),
        mechanism=(
            "One process per device, each with a full replica and its own shard from DistributedSampler. "
            + STATEMENTS["broadcast_at_wrap"].text
            + " During backward, gradients are grouped into buckets and each bucket is all-reduced, so every replica "
            "applies the same averaged gradient. "
            + STATEMENTS["bucket_overlap"].text
            + " `nn.DataParallel` is one process instead: each step it scatters the batch, copies the model to every "
            "device and gathers the outputs, from Python threads that share one GIL."
        ),
        evidence=_evidence(run),
        recovery=(
            _uneven_recovery(run)
            + f" A hung collective: a short process-group timeout (here {COLLECTIVE_TIMEOUT_S:g} s) turns a hang into "
            "an error naming the rank. "
            + STATEMENTS["default_timeout"].text
            + " Checkpoints and logs: rank 0 writes, the others wait at a barrier."
        ),
        trade_off=(
            "The effective batch grows with W (and with accumulation), so the learning rate or the number of steps "
            "must follow; on a tiny model, starting processes and communicating cost more than they save."
        ),
        could_prove_wrong=(
            "The ranks' gradients after backward differing, or one process trained on the same combined batches "
            "ending with different parameters beyond float tolerance, would show DDP is not plain data parallelism."
        ),
    )


def _uneven_recovery(run: DDPRun) -> str:
    """Join's promise with its scope; when this run had Join on and did not finish, what the run did instead."""
    join = STATEMENTS["join_uneven"]
    advice = "Uneven inputs: make shards even (DistributedSampler pads or drops) or wrap the loop in `Join`"
    if not (run.options.join and run.outcome != "finished"):
        return f"{advice}. {join.text} It holds {join.scope}."
    line = f"{advice}, which lets every rank finish {join.scope}. This run had Join on and ended **{run.outcome}**"
    found = analysis.first_sync_disagreement(run)
    if found is not None:
        return line + (
            f": at micro-batch {found.micro_batch} of the run {ranks(found.all_reduced)} all-reduced while "
            f"{ranks(found.under_no_sync)} ran backward under `no_sync()`."
        )
    failed = analysis.failed_ranks(run)
    named = ", ".join(f"rank {r.rank} {r.outcome} during {r.phase}" for r in failed)
    return line + (f": {named}." if named else ".")


def _evidence(run: DDPRun) -> str:
    parts = [f"{run.world_size} rank(s), {run.backend}, outcome **{run.outcome}**."]
    averaging = lesson.averaging_evidence(run)
    if averaging:
        parts.append(averaging)
    if run.single_process is not None:
        parts.append(f"Against one process on the combined batches: {sci(run.single_process_max_diff)}.")
    epochs = analysis.sampler_epochs(run)
    if epochs and epochs[0].padding:
        parts.append(f"Padded indices: {', '.join(map(str, epochs[0].repeats))}.")
    if epochs and epochs[0].trained_twice:
        parts.append(f"Trained on twice in epoch 0: {', '.join(map(str, epochs[0].trained_twice))}.")
    per_step = analysis.samples_per_step(run)
    steps = f"; the steps had {indices(per_step)} samples" if per_step else ""
    parts.append(f"Effective batch {run.options.effective_batch}{steps}.")
    shares = analysis.time_shares(run)
    if shares is not None:
        parts.append(f"Launch: {shares.launch_share:.0%} of {seconds(shares.total_s)}.")
    failed = analysis.failed_ranks(run)
    if failed:
        parts.append(f"Failed: {', '.join(f'rank {r.rank} during {r.phase}' for r in failed)}.")
    return " ".join(parts)


# --- Predict, then reveal ----------------------------------------------------------------------

NONE_REPEAT = "None: every index once"
FIRST_REPEAT = "The first ones of the sampler's list"
LAST_REPEAT = "The last ones of the sampler's list"
RANDOM_REPEAT = "A random few"
CHOICES = (NONE_REPEAT, FIRST_REPEAT, LAST_REPEAT, RANDOM_REPEAT)


@dataclass(frozen=True)
class Prediction:
    question: str
    choices: tuple[str, ...]
    answer: str
    evidence: str


def padding_prediction(run: DDPRun) -> Prediction | None:
    """Which indices repeat, asked for this run's settings and answered from its epoch 0; None without a sampler."""
    epochs = analysis.sampler_epochs(run)
    if not run.options.uses_sampler or not epochs:
        return None
    first, options = epochs[0], run.options
    question = (
        f"{options.dataset_size} samples, {run.world_size} ranks, drop_last={options.drop_last}"
        f"{', shuffled' if options.shuffle else ''}: which indices repeat?"
    )
    sizes = ", ".join(str(len(o)) for o in first.orders)
    listed = " · ".join(f"rank {r}: {list(order)}" for r, order in enumerate(first.orders))
    if not first.repeats:
        if first.dropped:
            evidence = (
                f"This run: drop_last=True trimmed to {first.slots} ({sizes} per rank), so nothing repeats and "
                f"index {', '.join(map(str, first.dropped))} was left out. Epoch 0: {listed}."
            )
        else:
            evidence = f"This run: {options.dataset_size} split evenly ({sizes} per rank). Epoch 0: {listed}."
        return Prediction(question, CHOICES, NONE_REPEAT, evidence)
    answer = FIRST_REPEAT if first.repeats_are_the_first else RANDOM_REPEAT
    head = ", ".join(map(str, first.global_order[: first.padding]))
    evidence = (
        f"This run: {options.dataset_size} samples need {first.slots} slots for {run.world_size} equal shards, so "
        f"DistributedSampler appended the first {first.padding} entries of its list ({head}) again. Epoch 0: {listed}."
    )
    return Prediction(question, CHOICES, answer, evidence)


# --- DataParallel against DDP ------------------------------------------------------------------

COMPARISON_CAPTION = (
    "On GPUs, DDP uses NCCL with one process per GPU. "
    + STATEMENTS["bucket_overlap"].text
    + " DataParallel's single process is limited by the GIL and by device 0, which gathers every output."
)


def comparison_rows(run: DDPRun) -> list[dict[str, str]]:
    """The two designs side by side, and what this run measured for each row DDP claims."""
    comm = analysis.communication(run)
    overlap = max(analysis.overlaps(run), key=lambda o: o.lead_ms, default=None)
    checks = analysis.gradient_checks(run)
    spread = max((c.spread_across_ranks for c in checks), default=None)
    every = all(len(c.ranks_with_data) == run.world_size for c in checks)
    who = "every rank" if every else "the ranks that trained in a step"
    equal = (
        "not recorded: no rank finished a synchronised step"
        if spread is None
        else f"identical on {who}"
        if spread == 0
        else f"equal on {who} to {sci(spread)}"
    )
    overlap_text = (
        "overlap not recorded"
        if overlap is None
        else f"first all-reduce {overlap.lead_ms:.2f} ms before the last gradient (step {overlap.step})"
        if overlap.lead_ms > 0
        else f"{max(comm.buckets, default=0)} bucket(s): no all-reduce before the last gradient"
    )
    return [
        {
            "": "Processes",
            "DataParallel": "one; a thread per device",
            "DistributedDataParallel": "one per device (rank)",
            "This run": f"{run.world_size} process(es) on {len(run.hosts)} host(s)",
        },
        {
            "": "Model replicas",
            "DataParallel": "copied from device 0 every step",
            "DistributedDataParallel": "built once, rank 0's weights broadcast at wrap",
            "This run": "parameter sums after wrap: "
            + ", ".join(f"{r.param_sum_after_ddp:.4f}" for r in run.ranks if r.param_sum_after_ddp is not None),
        },
        {
            "": "Data",
            "DataParallel": "one batch, scattered across devices",
            "DistributedDataParallel": "each rank loads its own shard (DistributedSampler)",
            "This run": f"{run.options.per_rank_batch} per rank, effective {run.options.effective_batch}",
        },
        {
            "": "Gradients",
            "DataParallel": "summed onto device 0, which steps",
            "DistributedDataParallel": "all-reduced (averaged) on every rank, every rank steps",
            "This run": f"synced gradients {equal}",
        },
        {
            "": "Communication",
            "DataParallel": "after backward, through device 0",
            "DistributedDataParallel": "bucketed, overlapping backward; NCCL on GPUs, gloo on CPUs",
            "This run": f"{run.backend}; {format_bytes(comm.bytes_per_step)} per step; {overlap_text}",
        },
        {
            "": "Scale",
            "DataParallel": "one machine; the GIL and device 0 limit it",
            "DistributedDataParallel": "many machines (torchrun --nnodes)",
            "This run": f"started by {LAUNCHERS[run.launcher]}" + (f", {run.nodes} nodes" if run.nodes > 1 else ""),
        },
    ]
