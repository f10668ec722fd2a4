"""The Real-scale lab's sentences, each built from a measured field (or a Statement with its scope and source)."""

from __future__ import annotations

import explorers.scale.models as models
from explorers.scale.experiment import GATHERED, GATHERED_GRADIENTS, Plan, PlanOptions
from explorers.scale.formulas import Formulas
from explorers.scale.remedies import Remedies
from explorers.scale.search import SEQ_GRID, Limit
from explorers.statements import Statement

STATEMENTS = {
    "fixed_parts": Statement(
        text=(
            "Parameters, gradients and optimizer state do not depend on the micro-batch or the sequence length; "
            "the activations saved for backward grow with both."
        ),
        scope="a fixed model, precision, optimizer and set of trainable parameters",
        source="torch/optim/adamw.py: AdamW._init_group (state shaped like each parameter); torch/autograd/graph.py",
    ),
    "checkpointing": Statement(
        text=(
            "With activation checkpointing on every block, each block keeps only its inputs for backward and "
            "runs its forward again during backward to remake the rest."
        ),
        scope=(
            "non-reentrant torch.utils.checkpoint applied to each decoder block, as transformers' "
            "activation_checkpointing_enable does; what lies outside the blocks (embeddings, head, loss) is kept"
        ),
        source="torch/utils/checkpoint.py: checkpoint(use_reentrant=False); transformers modeling_utils.py",
    ),
    "frozen": Statement(
        text="A frozen parameter (requires_grad=False) gets no gradient and, left out of the optimizer, no state.",
        scope="an optimizer built from the trainable parameters, as here; weights tied to a trainable one train too",
        source="torch/optim/optimizer.py: Optimizer.add_param_group; torch/autograd/__init__.py: backward",
    ),
    "foreach": Statement(
        text=(
            "On CUDA, AdamW's default multi-tensor (foreach) step keeps temporaries for every parameter at once, "
            "so its optimizer step peaks higher than a step that goes one parameter at a time."
        ),
        scope=(
            "parameters on a CUDA device, foreach and fused left at None (PyTorch then picks foreach); the extra "
            "bytes are the step's temporaries over all parameters of a group at once"
        ),
        source="torch/optim/optimizer.py: _default_to_fused_or_foreach; torch/optim/adam.py: _multi_tensor_adam",
    ),
    "zero": Statement(
        text=(
            "ZeRO-1 splits the optimizer state across the data-parallel GPUs, ZeRO-2 the gradients too, and "
            "ZeRO-3 (FSDP's full shard) the parameters too, gathering one unit's full parameters while it runs."
        ),
        scope=(
            "per GPU, computed here from the measured step, not measured on GPUs; communication buffers and "
            "prefetching a second unit are not counted"
        ),
        source="Rajbhandari et al. 2020, ZeRO (arXiv:1910.02054), section 5; torch/distributed/fsdp docs",
    ),
}

PRECISION_NAMES = {
    "fp32": "fp32",
    "bf16-mixed": "bf16 mixed (fp32 weights, bf16 autocast)",
    "bf16": "bf16 (weights, gradients, optimizer state)",
}
OPTIMIZER_NAMES = {"adamw": "AdamW", "sgd_momentum": "SGD with momentum", "sgd": "SGD"}
SHARDING_NAMES = {0: "DDP (no sharding)", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP full shard"}
TRAINABLE_NAMES = {"all": "everything", "last": "the last N blocks and the head", "head": "just the head"}
KIND_NAMES = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer state": "optimizer state",
    "activations": "activations",
    "weight copies": "autocast's weight copies",
    GATHERED: "one unit's gathered parameters (ZeRO-3, computed)",
    GATHERED_GRADIENTS: "that unit's full gradients before reduce-scatter (ZeRO-3, computed)",
    "batch": "batch",
    "buffers": "buffers",
}
POSITION_NOTE = "{name}'s position table holds {limit} positions: the sequence is cut to {limit}."
HOW_MEASURED = (
    "One training step of the library's own model code (forward with its loss, backward, optimizer step, "
    "zero_grad), and a second for the steady state, on fake tensors: nothing is allocated."
)


def kind_name(kind: str) -> str:
    return KIND_NAMES.get(kind, kind)


def gib(nbytes: int, digits: int = 1) -> str:
    """Bytes for people: GiB with `digits` decimals, two under 1 GiB, MiB under 0.1 GiB (no "0.1 or 0.1 GiB")."""
    if abs(nbytes) < 2**30 / 10:
        return f"{nbytes / 2**20:,.0f} MiB"
    return f"{nbytes / 2**30:,.{max(digits, 2) if abs(nbytes) < 2**30 else digits}f} GiB"


def gib_beside(nbytes: int, budget_gib: int) -> str:
    """`nbytes` with the fewest decimals (up to 3) that keep it from reading as the budget itself ("80.0 GiB")."""
    digits = 1
    while digits < 3 and f"{nbytes / 2**30:.{digits}f}" == f"{budget_gib:.{digits}f}":
        digits += 1
    if nbytes != budget_gib * 2**30 and f"{nbytes / 2**30:.{digits}f}" == f"{budget_gib:.{digits}f}":
        return f"{nbytes:,} B"  # within half a MiB of the budget: only the bytes tell the two apart
    return gib(nbytes, digits)


def setting_words(options: PlanOptions) -> str:
    trains = {"all": "all weights", "head": "just the head"}.get(
        options.trainable, f"the last {options.trainable_blocks} blocks and the head"
    )
    parts = [
        models.NAMES[options.model],
        PRECISION_NAMES[options.precision].split(" (")[0],
        OPTIMIZER_NAMES[options.optimizer],
        f"micro-batch {options.batch_size}",
        f"sequence {options.seq_len}",
        f"training {trains}",
    ]
    if options.checkpointing:
        parts.append("checkpointing")
    if options.micro_batches > 1:
        parts.append(f"{options.micro_batches} accumulation steps")
    if options.world_size > 1:
        parts.append(f"{SHARDING_NAMES[options.zero_stage].split(' /')[0]} over {options.world_size} GPUs")
    return ", ".join(parts)


def verdict(plan: Plan, budget_gib: int) -> tuple[bool, str]:
    """Fits or not in the chosen budget, and by how much, from the measured (and, if sharded, computed) peak."""
    budget = budget_gib * 2**30
    where = f"in the {plan.peak_phase} of step {plan.peak_step}"
    peak = gib_beside(plan.peak, budget_gib)
    if plan.fits(budget):
        return True, f"Fits in {budget_gib} GiB per GPU: the step peaks at {peak} {where}, " + (
            f"{gib(plan.headroom(budget))} to spare."
        )
    return False, f"Does not fit in {budget_gib} GiB per GPU: the step peaks at {peak} {where}, " + (
        f"{gib(-plan.headroom(budget))} more than the budget."
    )


def budget_rows(plan: Plan, budgets: tuple[int, ...]) -> list[dict[str, str]]:
    rows = []
    for budget_gib in budgets:
        room = plan.headroom(budget_gib * 2**30)
        rows.append(
            {
                "GPU memory": f"{budget_gib} GiB",
                "Fits": "yes" if room >= 0 else "no",
                "Spare or missing": ("+" if room >= 0 else "−") + gib(abs(room)),
            }
        )
    return rows


def peak_words(plan: Plan) -> str:
    """What was alive at the peak, largest first."""
    parts = sorted(plan.at_peak.items(), key=lambda kv: -kv[1])
    return "; ".join(f"{kind_name(kind)} {gib(nbytes)}" for kind, nbytes in parts if nbytes >= 2**20)


def sharding_words(plan: Plan) -> str | None:
    """Said when the per-GPU numbers are computed from the measured step, not measured."""
    if not plan.sharded:
        return None
    o = plan.options
    words = (
        f"Per GPU under {SHARDING_NAMES[o.zero_stage]} over {o.world_size} GPUs, computed from the measured step: "
        f"parameters {gib(plan.parameters)} (of {gib(plan.measured.parameters)}), gradients {gib(plan.gradients)} "
        f"(of {gib(plan.measured.gradients)}), optimizer state {gib(plan.optimizer_state)} "
        f"(of {gib(plan.measured.optimizer_state)})."
    )
    if plan.gathered_unit:
        words += (
            f" Forward and backward each gather the largest unit's full parameters, in the weights' own precision "
            f"({gib(plan.gathered_unit)})"
        )
        if plan.gathered_gradients:
            words += (
                f"; in backward, that unit's full gradients ({gib(plan.gathered_gradients)}) are held until they "
                "are reduce-scattered"
            )
        words += "."
    return words


def optimizer_words(plan: Plan) -> str:
    """How the optimizer stepped, read back from the optimizer that ran (`Measurement.optimizer_call`)."""
    call = plan.measured.optimizer_call
    if "foreach=True" in call:
        return f"The optimizer ran as {call}: every parameter in one multi-tensor step, CUDA's default."
    if "foreach=False" in call:
        return (
            f"The optimizer ran as {call}: one parameter at a time, PyTorch's default on CPU. "
            + STATEMENTS["foreach"].text
        )
    return f"The optimizer ran as {call}."


def head_words(plan: Plan) -> str | None:
    """What "the head" is in this model, when only part of it trains; tied weights train the embedding too."""
    if plan.options.trainable == "all":
        return None
    words = f"The head is {models.NAMES[plan.options.model]}'s output projection ({plan.head_parameters:,} parameters)"
    if plan.head_tied:
        words += ", the same matrix as the token embedding: training the head trains the embedding"
    return words + f"; {plan.trainable_count:,} parameters train in all."


def unsharded_words(plan: Plan) -> str | None:
    """Said when a ZeRO stage is chosen with one GPU: there is nothing to shard across."""
    o = plan.options
    if o.zero_stage and o.world_size == 1:
        return f"{SHARDING_NAMES[o.zero_stage]} over 1 GPU shards nothing: every number here is the whole step's."
    return None


def provenance(plan: Plan) -> str:
    return (
        f"{HOW_MEASURED} {optimizer_words(plan)} torch {plan.torch_version}, CPU kernels; "
        f"transformers {plan.transformers_version}; "
        f"hyperparameters from {plan.source}; {plan.parameter_count:,} parameters, {plan.trainable_count:,} "
        f"trainable; {plan.seconds:.1f} s here."
    ) + (SCALED_NOTE if plan.scaled else "")


SCALED_NOTE = (
    " Scaled from copies with one and two blocks, each place in the step (before, in and after the blocks) on "
    "its own: equal to the whole model's step, byte for byte, in every setting tested (see docs/labs/scale.md)."
)


def limit_words(limit: Limit, budget_gib: int) -> str:
    knob = "micro-batch" if limit.knob == "batch_size" else f"sequence (in steps of {SEQ_GRID})"
    if limit.value is None:
        smallest_peak = gib_beside(limit.next_up.peak, budget_gib)
        return f"No {knob} fits in {budget_gib} GiB: the smallest tried peaks at {smallest_peak}."
    peak = gib_beside(limit.fits.peak, budget_gib)
    words = f"Largest {knob} that fits in {budget_gib} GiB: {limit.value:,} (peak {peak})"
    if limit.next_up is not None:
        next_value = getattr(limit.next_up.options, limit.knob)
        next_peak = gib_beside(limit.next_up.peak, budget_gib)
        return words + f"; {next_value:,} peaks at {next_peak}. {steps_measured(limit.measured)}."
    return words + f", the end of the range tried ({limit.end:,}). {steps_measured(limit.measured)}."


def steps_measured(count: int) -> str:
    return f"{count} step{'s' * (count != 1)} measured"


def remedy_how(remedy) -> str:
    return "computed from the measured step" if remedy.computed else "measured"


def remedy_rows(remedies: Remedies, budget_gib: int) -> list[dict[str, str]]:
    budget = budget_gib * 2**30
    return [
        {
            "Change": r.name,
            "Peak per GPU": gib_beside(r.plan.peak, budget_gib),
            "Saves": ("" if r.saved >= 0 else "−") + gib(abs(r.saved)),
            f"Fits {budget_gib} GiB": "yes" if r.plan.fits(budget) else "no",
            "How": remedy_how(r),
        }
        for r in remedies.remedies
    ]


def formula_lines(f: Formulas) -> list[str]:
    """The usual formulas beside the measured numbers, each gap given as measured parts."""
    per_parameter = f.measured_state / f.parameter_count
    lines = [
        f"ZeRO's 16 bytes per parameter for mixed-precision Adam: {gib(f.adam_16)} for {f.parameter_count:,} "
        f"parameters. Measured parameters, gradients and optimizer state: {gib(f.measured_state)}, "
        f"{per_parameter:.1f} bytes per parameter ({f.trainable_count:,} of them trainable).",
    ]
    korthikanti = (
        f"Korthikanti et al.'s activations for a GPT-3 block in 16-bit: {gib(f.korthikanti_block)} per block with "
        f"the attention scores stored, {gib(f.korthikanti_block_fused)} without; × {f.blocks} blocks = "
        f"{gib(f.blocks * f.korthikanti_block)} or {gib(f.blocks * f.korthikanti_block_fused)}."
    )
    unlike = [
        *(["activation checkpointing is on"] if f.options.checkpointing else []),
        *(["not every block trains"] if f.options.trainable != "all" else []),
        *(["the step runs in fp32, 4 bytes where the formula counts 2"] if f.options.precision == "fp32" else []),
    ]
    if unlike:  # the formula assumes every block trains, in 16-bit, keeping all it saves
        lines.append(
            f"{korthikanti} It assumes every block trains in 16-bit and keeps what it saves; here "
            f"{' and '.join(unlike)}, so the measured {gib(f.measured_activations)} is not its counterpart."
        )
    else:
        lines.append(f"{korthikanti} Measured for the whole model: {gib(f.measured_activations)}.")
    if f.measured_block is not None:
        lines.append(
            f"Measured per block: {gib(f.measured_block)}; outside the blocks (embeddings, final norm, head, loss): "
            f"{gib(f.measured_outside)}."
        )
    if f.upcasts_logits:
        lines.append(
            f"The loss works on an fp32 copy of the 16-bit logits: batch × sequence × vocabulary × 4 bytes = "
            f"{gib(f.logits_fp32)}."
        )
    if f.measured_weight_copies:
        lines.append(
            f"Autocast's 16-bit weight copies, {gib(f.measured_weight_copies)}, are counted apart: neither formula "
            "counts them."
        )
    return lines


def metric_parts(plan: Plan) -> list[tuple[str, int]]:
    """The step's parts per GPU, each as the bar and the prediction count it; weight copies only under autocast."""
    parts = [
        ("Parameters", plan.parameters),
        ("Gradients", plan.gradients),
        ("Optimizer state", plan.optimizer_state),
        ("Activations", plan.activations),
    ]
    return parts + ([("Weight copies", plan.weight_copies)] if plan.weight_copies else [])


PREDICT_QUESTION = "At this step's peak, which of these four takes the most memory per GPU?"
PREDICT_CHOICES = ("parameters", "gradients", "optimizer state", "activations")


def predict_answers(plan: Plan) -> tuple[str, ...]:
    """The largest of the four at the peak, as measured; several when they tie (parameters and gradients
    of the same dtype often do). Autocast's weight copies are none of the four, here as on the bar."""
    parts = {
        "parameters": plan.at_peak.get("parameters", 0),
        "gradients": plan.at_peak.get("gradients", 0),
        "optimizer state": plan.at_peak.get("optimizer state", 0),
        "activations": plan.at_peak.get("activations", 0),
    }
    largest = max(parts.values())
    return tuple(name for name, nbytes in parts.items() if nbytes == largest)


def predict_evidence(plan: Plan) -> str:
    return f"At the peak ({plan.peak_phase}, step {plan.peak_step}): {peak_words(plan)}."
