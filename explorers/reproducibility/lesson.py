"""The Reproducibility lab's sentences: each one a reading of the runs it is given.

A sentence about a source of randomness says which case applied in this comparison (the job
drew from it in the process where it was left unseeded, or it did not) and what the runs then
showed; a branch whose condition the runs do not meet is not said. Steps count from 0, in the
charts' numbering; a checkpoint written after k steps holds the state after step k - 1, and a run resumed from it
starts at step k.
"""

from __future__ import annotations

import explorers.reproducibility.fresh as fresh
from explorers import uploads
from explorers.reproducibility.experiment import COMPONENTS, Comparison, ResumedRun, ResumeResult
from explorers.reproducibility.job import SOURCES
from explorers.statements import Statement
from explorers.units import format_number as num
from explorers.units import seconds

QUESTION = "How would you make a PyTorch experiment reproducible?"

# What the lab says about PyTorch in general, each tried in tests/claims/test_reproducibility.py.
STATEMENTS = {
    "worker_seeding": Statement(
        text="Each DataLoader worker seeds `random` and torch with base seed + worker id, and, since PyTorch 1.9, "
        "numpy's global RNG from the same two numbers; the DataLoader draws the base seed from its generator, or "
        "from torch's global RNG when it has none.",
        scope="DataLoader with num_workers > 0, before any worker_init_fn runs; numpy's legacy global RNG (np.random."
        "*), not a numpy Generator a dataset made itself",
        source="torch/utils/data/_utils/worker.py: _worker_loop; PyTorch 1.9 release notes (DataLoader seeds numpy)",
    ),
    "unseeded_torch": Statement(
        text="A new process that does not call `torch.manual_seed` starts torch's global RNG from a "
        "nondeterministic seed.",
        scope="the CPU default generator of a fresh interpreter; `torch.initial_seed()` reports the seed it got",
        source="aten/src/ATen/CPUGeneratorImpl.cpp: getDefaultCPUGenerator (seeded from c10::detail::"
        "getNonDeterministicRandom)",
    ),
    "first_call_imports": Statement(
        text="In a new process, whichever comes first of building a `torch.optim` optimizer and calling "
        "`torch.use_deterministic_algorithms` (with True or False) imports `torch._dynamo` and `torch._inductor`; "
        "the other finds them loaded, so a job that builds an optimizer pays that import whatever the flag.",
        scope="torch 2.13 in an interpreter that has not imported them yet; an optimizer given at least one "
        "parameter (its first `add_param_group`, wrapped by `torch._disable_dynamo`, imports torch._dynamo, which "
        "imports torch._inductor); an empty parameter list raises before that",
        source="torch/optim/optimizer.py: Optimizer.__init__, add_param_group; torch/_compile.py: _disable_dynamo; "
        "torch/__init__.py: use_deterministic_algorithms (imports torch._inductor.config)",
    ),
    "weights_only": Statement(
        text="`torch.load(weights_only=True)` rebuilds tensors and plain containers only and runs no code from "
        "the file.",
        scope="the default allowlist of the weights-only unpickler (torch.serialization.add_safe_globals extends "
        "it); a file that needs another global raises UnpicklingError",
        source="torch/_weights_only_unpickler.py; https://pytorch.org/docs/stable/generated/torch.load.html",
    ),
}
NAMES = {"torch": "torch's", "numpy": "numpy's", "python": "`random`'s"}


def badge(c: Comparison) -> tuple[str, str]:
    """(kind, text): kind is "equal", "differs" or "params_differ"."""
    if c.bitwise_equal and c.first_divergent_step is None:
        return "equal", (
            f"Bitwise equal: {c.options.runs} fresh runs, the same loss at all {c.steps} steps and final "
            "parameters identical to the bit."
        )
    if c.first_divergent_step is not None:
        return "differs", (
            f"Differs from step {c.first_divergent_step} by up to {num(c.max_loss_diff)} in loss; final "
            f"parameters differ by up to {num(c.max_param_diff)}."
        )
    return "params_differ", (f"Every loss matched, yet the final parameters differ by up to {num(c.max_param_diff)}.")


def _joined(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def components_line(c: Comparison) -> str:
    first = c.component_first_difference
    same = [name for name in COMPONENTS if first[name] is None]
    different = [f"{name} (from step {first[name]})" for name in COMPONENTS if first[name] is not None]
    parts = []
    if same:
        parts.append(f"identical in every run: {_joined(same)}")
    if different:
        parts.append(f"different: {_joined(different)}")
    return "What each source produced, run against run: " + "; ".join(parts) + "."


def _where_augmentation_ran(c: Comparison) -> str:
    workers = [w for w in c.runs[0].workers_seen if w >= 0]
    if not workers:
        return "in the main process (`num_workers=0`)"
    return f"in {len(workers)} DataLoader worker process{'es' if len(workers) > 1 else ''}"


def _global_source_line(c: Comparison, source: str) -> str:
    """numpy or python left unseeded: did the main process draw from it, and what happened."""
    drew = c.runs[0].main_drew[source]
    augmentation = c.component_first_difference["augmentation"]
    name = NAMES[source]
    if drew:
        line = (
            f"{name.capitalize()} global RNG was not seeded, and the job drew from it in the main process (its "
            f"state moved during the run): the augmentation ran {_where_augmentation_ran(c)}."
        )
        if augmentation is not None:
            line += f" So the augmentation differed from step {augmentation}."
        return line
    line = (
        f"{name.capitalize()} global RNG was not seeded, but nothing in the main process drew from it (its state "
        "was the same after the run), so this seed had nothing to fix."
    )
    if c.options.augmentation == "generator_in_init":
        line += " The augmentation drew from the dataset's own Generator instead."
    elif c.options.num_workers:
        base = "a seeded generator of its own" if c.options.seed_workers else "no generator of its own"
        seeded = c.options.seed_workers or c.options.seed_torch
        line += f" The augmentation ran {_where_augmentation_ran(c)}. " + STATEMENTS["worker_seeding"].text
        line += f" Here the DataLoader had {base}"
        if not c.options.seed_workers:
            line += f" and torch was {'seeded' if seeded else 'not seeded'}"
        if augmentation is None:
            line += ", and the augmentation was identical in every run."
        else:
            line += f", and the augmentation differed from step {augmentation}."
    return line


def source_lines(c: Comparison) -> list[str]:
    """One sentence per source left out: which case applied, and what the runs showed."""
    o, first = c.options, c.component_first_difference
    lines = []
    if not o.seed_torch:
        weights = first["initial weights"]
        line = "torch was not seeded"
        line += (
            ", so the initial weights (`nn.Linear`'s init) differed from step 0"
            if weights is not None
            else ", yet the initial weights were identical"
        )
        if first["dropout RNG"] is not None:
            line += f" and dropout drew from a different RNG state from step {first['dropout RNG']}"
        lines.append(line + ".")
    for source, seeded in (("numpy", o.seed_numpy), ("python", o.seed_python)):
        if not seeded:
            lines.append(_global_source_line(c, source))
    if not o.seed_workers:
        order, augmentation = first["batch order"], first["augmentation"]
        line = "The DataLoader got no generator and no `worker_init_fn`: its shuffle"
        line += " and its workers' base seed come" if o.num_workers else " comes"
        line += " from torch's global RNG"
        if o.seed_torch and order is None:
            line += ", which was seeded, so the batch order was identical in every run"
            if o.num_workers and o.augmentation == "global" and augmentation is None:
                line += " and so was the worker augmentation: no `worker_init_fn` was needed"
        elif order is not None:
            line += f", so the batch order differed from step {order}"
        lines.append(line + ".")
    if not o.deterministic:
        if c.bitwise_equal:
            lines.append(
                "Deterministic algorithms were off, and the runs were still bitwise equal: on the CPU the ops "
                "this job uses gave the same bits without the flag. It matters for GPU kernels that accumulate "
                "with atomics, which this lab cannot show on a machine without CUDA."
            )
        elif all(first[name] is None for name in COMPONENTS):
            lines.append(
                "Deterministic algorithms were off, and every source gave the same numbers in every run, yet "
                "the results differ: the difference came from the computation itself."
            )
    return lines


def duplicates_line(c: Comparison) -> str | None:
    run = c.runs[0]
    if c.options.augmentation != "generator_in_init":
        return None
    workers = [w for w in run.workers_seen if w >= 0]
    line = f"The augmentation drew from a numpy Generator made in the dataset's `__init__`: {run.repeated_draws} of "
    line += f"{run.draws} draws in run 1 repeated an earlier draw"
    if run.repeated_draws and len(workers) > 1:
        line += (
            f". Each of the {len(workers)} workers got a copy of the same Generator state, so they handed out the "
            "same noise and scales in the same order (the table below shows the first two batches)"
        )
    elif not run.repeated_draws:
        line += ": one copy of the Generator, in one process, handed out no draw twice"
    if c.component_first_difference["augmentation"] is None:
        line += ". It was seeded with the config's seed, so every run agreed: reproducible"
        line += ", and wrong" if run.repeated_draws else ""
    return line + "."


def _span(values: list[float]) -> str:
    low, high = seconds(min(values)), seconds(max(values))
    return low if low == high else f"{low} to {high}"


FIRST_IMPORT = {  # the job's phase in which a fresh process first had the heavy modules loaded
    "seeding": "turning on deterministic algorithms",
    "building": "building the data, the model and Adam",
}


def start_line(c: Comparison) -> str:
    """How the runs' processes started (each run's `launch`) and what that took."""
    starts = _span([run.start_s for run in c.runs])
    totals = _span([run.total_s for run in c.runs])
    if all(run.launch == fresh.INTERPRETER for run in c.runs):
        return f"Each run was a new Python interpreter: starting it and importing torch took {starts} of its {totals}"
    line = (
        "Each run was a new process forked from a template interpreter (torch, torch's compiler stack and the job's "
        "code imported, none of it run), with the torch, numpy and `random` generators reseeded from the OS: "
        "starting it took "
        f"{starts} of its {totals}"
    )
    waited = sum(run.launch == fresh.TEMPLATE_COLD for run in c.runs)
    if waited:
        first = "the first run" if waited == 1 else f"the first {waited} runs"
        line += f" ({first} waited for the template to start and import torch and its compiler stack)"
    if len(c.runs) > 1 and len({run.str_hash for run in c.runs}) == 1:  # hash() of the same string, per run
        line += "; Python's string-hash seed was the same in every run (forks share the template's)"
    return line


def cost_line(c: Comparison) -> str:
    """What a fresh process cost, phase by phase, and where it first imported torch's compiler modules."""
    setup = max(run.timings["seeding"] + run.timings["building"] for run in c.runs)
    line = f"{start_line(c)}; setting up the job (seeds and flags, data, model, Adam) took up to {seconds(setup)}"
    first = next((phase for phase in FIRST_IMPORT if c.runs[0].imports.get(phase)), None)
    if first is not None:
        names = _joined([f"`{name}`" for name in c.runs[0].imports[first]])
        line += f" and imported {names}, first while {FIRST_IMPORT[first]}"
    loader = max(run.timings["first_batch"] for run in c.runs)
    steps = max(run.timings["steps"] for run in c.runs)
    line += f"; starting the DataLoader and waiting for its first batch took up to {seconds(loader)}"
    line += f"; the {c.steps} steps themselves took up to {seconds(steps)}."
    return line + (" " + STATEMENTS["first_call_imports"].text if first is not None else "")


def explain(c: Comparison) -> list[str]:
    kind, text = badge(c)
    lines = [f"**{text}**"]
    if kind == "equal" and all(getattr(c.options, source) for source in SOURCES):
        lines.append(
            f"Every source seeded: the final parameters' digest was `{c.runs[0].parameters_digest}` in all "
            f"{c.options.runs} processes."
        )
    lines.append(components_line(c))
    lines += source_lines(c)
    duplicates = duplicates_line(c)
    if duplicates:
        lines.append(duplicates)
    lines.append(cost_line(c))
    return lines


# --- Resume ------------------------------------------------------------------------------------------------


def plural_steps(k: int) -> str:
    """The checkpoint holds the state after k steps: steps 0 to k - 1 in the charts' numbering."""
    return f"{k} step{'s' if k != 1 else ''}"


def variant_name(run: ResumedRun) -> str:
    return "with full state" if not run.forgotten else "without " + _joined(run.forgotten)


def resume_line(r: ResumeResult, run: ResumedRun) -> str:
    k = r.options.checkpoint_at
    name = variant_name(run)
    if run.equal and run.first_divergent_step is None:
        return (
            f"Resumed after {plural_steps(k)} {name}: every later loss and the final parameters matched the "
            "straight-through run bit for bit."
        )
    line = f"Resumed after {plural_steps(k)} {name}: "
    s = run.first_divergent_step
    if s is None:
        line += f"every loss matched, but the final parameters differ by up to {num(run.max_param_diff)}"
        return line + "."
    if s > k:
        line += (
            f"the loss at step {k}, its first, still matched (computed from the restored weights before any update), "
            "then "
        )
    line += f"from step {s} the losses differ by up to {num(run.max_loss_diff)}; final parameters by up to "
    line += f"{num(run.max_param_diff)}"
    why = []
    if not run.kept["keep_optimizer_state"]:
        why.append("Adam restarted its step count and moment estimates, so its updates had another size")
    if not run.kept["keep_rng_state"]:
        why.append("dropout and augmentation drew from the seed's start again, not from where the run had got to")
    if not run.kept["keep_sampler_state"]:
        why.append("the sampler began the epoch's order again, so it fed batches the run had already used")
    return line + (" (" + "; ".join(why) + ")" if why else "") + "."


def resume_lines(r: ResumeResult) -> list[str]:
    from explorers import units

    lines = [resume_line(r, run) for run in r.resumed]
    lines.append(
        f"The checkpoint held {_joined(r.checkpoint_parts)} ({units.format_bytes(r.checkpoint_bytes)}); each resumed "
        "process loaded it with `torch.load(weights_only=True)`. " + STATEMENTS["weights_only"].text
    )
    return lines


# --- Study mode ---------------------------------------------------------------------------------------------


def predict_evidence(with_workers: Comparison, main_process: Comparison) -> tuple[str, str]:
    """(the answer the runs give, the evidence) for: seed torch only, 2 workers, numpy augmentation: equal?"""
    answer = PREDICT_CHOICES[0] if with_workers.bitwise_equal else PREDICT_CHOICES[1]
    drew = with_workers.runs[0].main_drew["numpy"]
    evidence = (
        f"Measured just now, {with_workers.options.runs} fresh processes with torch seeded (numpy, `random` and the "
        f"workers not) and {with_workers.options.num_workers} workers: {badge(with_workers)[1]} Numpy's global RNG "
        f"in the main process {'moved' if drew else 'did not move'}; the augmentation "
        + (
            "was identical in every run. " + STATEMENTS["worker_seeding"].text
            if with_workers.component_first_difference["augmentation"] is None
            else f"differed from step {with_workers.component_first_difference['augmentation']}."
        )
    )
    evidence += f" The same seeds with `num_workers=0` (augmentation in the main process): {badge(main_process)[1]}"
    return answer, evidence


# --- The page's words, here so that claims tests can reach them --------------------------------------------------


def resume_caption(total_steps: int, checkpoint_at: int) -> str:
    """The resume section's caption, for the steps and the checkpoint chosen."""
    return (
        f"One process trains straight through {total_steps} steps (0 to {total_steps - 1}) and writes a checkpoint "
        f"after {plural_steps(checkpoint_at)}; each resumed run is a new process that loads it with "
        f"`torch.load(weights_only=True)`, restores what you keep, and trains from step {checkpoint_at} to the end. "
        "All seeds set, data read in the main process."
    )


CPU_ONLY = "This lab's job runs on the CPU; the device choice does not apply to it."
SHORT_RUN_CHECKPOINT = "With 2 steps, the checkpoint is written after 1 step: the resumed runs start at step 1."
CHECKPOINT_LABEL = "Checkpoint after (steps)"
MANIFESTS_IDENTICAL = "The two manifests are identical, field for field."


def fields_differ(fields: list[str]) -> str:
    """The fields in which two manifests differ, each a code span that shows an uploaded key literally."""
    return f"**{len(fields)} field(s) differ:** " + ", ".join(uploads.code(field) for field in fields)


COMPARE_MANIFESTS = "**Compare two manifests.** Run 1 against the last run, unless you upload your own for either side."
DRAWS_CAPTION = "Run 1's first two batches: who made them, and the scales drawn"
PREDICT_CHOICES = ["Yes, bitwise equal", "No, they differ"]


def predict_question(options) -> str:
    """The question for the comparison the prediction will run (torch seeded, the other sources not)."""
    workers = f"{options.num_workers} DataLoader workers" if options.num_workers else "no DataLoader workers"
    return (
        f"Seed torch, but not numpy, random or the workers; {workers}, augmentation drawing from numpy and random: "
        f"are {options.runs} fresh runs bitwise equal?"
    )
