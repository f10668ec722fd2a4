"""The Reproducibility lab's answer card, its evidence read off this run's comparison and resume."""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.reproducibility.experiment import Comparison, ResumeResult
from explorers.reproducibility.lesson import QUESTION, badge, components_line, num


def answer_card(c: Comparison, r: ResumeResult) -> AnswerCard:
    full = next((run for run in r.resumed if not run.forgotten), None)
    forgot_optimizer = next((run for run in r.resumed if run.forgotten == ["optimizer state"]), None)
    evidence = badge(c)[1] + " " + components_line(c)
    if full is not None:
        evidence += f" Resumed at step {r.options.checkpoint_at} with full state: " + (
            "bitwise equal to the straight-through run."
            if full.equal
            else f"differs by up to {num(full.max_param_diff)}."
        )
    if forgot_optimizer is not None and not forgot_optimizer.equal:
        evidence += (
            f" Without the optimizer state: differs from step {forgot_optimizer.first_divergent_step}, final "
            f"parameters by up to {num(forgot_optimizer.max_param_diff)}."
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
            "versions, seeds, flags, data) yet whose final-parameter digests differ: then a source of randomness "
            "is not recorded, and the first component that differed names it."
        ),
    )
