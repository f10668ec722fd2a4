"""The Reproducibility lab's answer card, its evidence read off this run's comparison and resume."""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.reproducibility.experiment import Comparison, ResumeResult
from explorers.reproducibility.lesson import QUESTION, badge, components_line, plural_steps
from explorers.units import format_number as num

SEED_NAMES = {
    "torch": "torch",
    "numpy": "numpy",
    "python": "`random`",
    "dataloader_generator_and_worker_init_fn": "the DataLoader's generator and `worker_init_fn`",
}


def _this_comparison(c: Comparison) -> str:
    """Whether this comparison's manifests are such a test, read off run 1's manifest, and what it showed."""
    recorded = c.runs[0].manifest
    unseeded = [SEED_NAMES[name] for name, seeded in recorded["seeds"].items() if name in SEED_NAMES and not seeded]
    off = not recorded["determinism"]["use_deterministic_algorithms"]
    missing = [f"{' and '.join(unseeded)} unseeded"] if unseeded else []
    missing += ["deterministic algorithms off"] if off else []
    if missing:
        return f"This comparison is not such a test: its manifests record {' and '.join(missing)}."
    digests = {run.manifest["result"]["final_parameters_digest"] for run in c.runs}
    same = "the same final-parameter digest" if len(digests) == 1 else f"{len(digests)} different digests"
    return f"This comparison is such a test: {len(c.runs)} processes, every source seeded, {same}."


def answer_card(c: Comparison, r: ResumeResult) -> AnswerCard:
    full = next((run for run in r.resumed if not run.forgotten), None)
    forgot_optimizer = next((run for run in r.resumed if run.forgotten == ["optimizer state"]), None)
    evidence = badge(c)[1] + " " + components_line(c)
    if full is not None:
        evidence += f" Resumed after {plural_steps(r.options.checkpoint_at)} with full state: " + (
            "bitwise equal to the straight-through run."
            if full.equal
            else f"differs by up to {num(full.max_param_diff)}."
        )
    if forgot_optimizer is not None and not forgot_optimizer.equal:
        step = forgot_optimizer.first_divergent_step
        where = "every loss matched" if step is None else f"differs from step {step}"
        evidence += (
            f" Without the optimizer state: {where}, final parameters by up to {num(forgot_optimizer.max_param_diff)}."
        )
    trade_off = (
        "Deterministic algorithms and a fixed thread count can cost speed, and on CUDA some ops raise an error "
        "instead of running nondeterministically. For a hyper-parameter sweep, agreement within seed-to-seed noise "
        "is often the right level, and several seeds say more than one bitwise rerun."
    )
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "Rerun an experiment and get the same numbers, or know why not: bit for bit on the same machine and "
            "software for debugging and fair comparisons; within noise across machines. Assumed: the same code, "
            "data and library versions. Out of scope: bit-equality across GPU models or torch versions, which "
            "PyTorch does not promise."
        ),
        mechanism=(
            "Every random draw comes from a generator: torch's global RNG (init, dropout, and the shuffle and "
            "workers' base seed unless the DataLoader has its own generator), numpy's and `random`'s (augmentation "
            "in the main process), and each worker's, which PyTorch seeds from the base seed. Seed every source "
            "the job draws from, switch on deterministic algorithms for GPUs, record code, config, seeds, versions "
            "and data split in a manifest, and checkpoint weights, optimizer, RNG and sampler state."
        ),
        evidence=evidence,
        recovery=(
            "When two runs differ, diff their manifests first (code, versions, seeds, flags, data hash), then "
            "compare what each source produced step by step to find the first difference, as the table on this "
            "page does; seed one source at a time to bisect."
        ),
        trade_off=trade_off,
        could_prove_wrong=(
            "Two fresh processes on the same machine whose manifests agree on every field before `result` (code, "
            "versions, seeds, flags, data) and record every source seeded (torch, numpy, `random`, the DataLoader's "
            "generator and `worker_init_fn`) with deterministic algorithms on, yet whose final-parameter digests "
            "differ: then a source of randomness is not recorded, and the first component that differed names it. "
            + _this_comparison(c)
        ),
    )
