"""The Memory lab's lesson: what the measured steps show, in sentences built from their numbers.

Each sentence is computed from the point it describes; one whose premise does not hold for
this run (no optimizer state, no weight copies, no second measured batch) is left out.
"""

from __future__ import annotations

from explorers.memory.experiment import (
    IMAGE,
    MemoryOptions,
    Point,
    element_bytes,
    published_coefficients,
)
from explorers.memory.your_model import Measurement, StepMemory
from explorers.statements import Statement
from explorers.units import format_bytes, format_number

STATEMENTS: dict[str, Statement] = {
    "batch_split": Statement(
        text=(
            "Parameters, gradients and optimizer state do not depend on the batch size; the tensors saved for "
            "backward grow with it, and live from the forward to its backward."
        ),
        scope=(
            "for a fixed model with dense gradients and a per-parameter optimizer (SGD, SGD with momentum, Adam, "
            "AdamW); a sparse embedding's gradient (sparse=True), and the momentum SGD builds from it, grow with the "
            "rows a batch touches; a model that saves nothing for backward (an add-only model) has no activations "
            "to grow"
        ),
        source="https://pytorch.org/docs/stable/notes/autograd.html#saved-tensors",
    ),
    "optimizer_state": Statement(
        text=(
            "Adam, AdamW and SGD with momentum create a parameter's state in the first `step()` at which it has a "
            "gradient; it stays alive from then on, through every later forward and backward."
        ),
        scope="torch.optim's Adam, AdamW and SGD(momentum > 0); plain SGD keeps no state",
        source="torch/optim/adam.py: Adam._init_group; torch/optim/sgd.py: SGD._init_group",
    ),
    "graph_retention": Statement(
        text=(
            "A tensor kept across steps keeps the graph behind it alive, with every tensor saved for backward that "
            "no backward has freed yet; a float from `.item()` keeps nothing."
        ),
        scope=(
            "for tensors with a grad_fn; backward (without retain_graph=True) frees the saved tensors and leaves "
            "only the graph's small nodes"
        ),
        source="https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
    ),
    "kernel_memory": Statement(
        text=(
            "An operator can allocate working memory inside its kernel and free it before it returns; no tensor "
            "holds those bytes, so a count of the storages operators return misses them and the allocator's own "
            "record does not."
        ),
        scope=(
            "CPU runs, the allocator's events as torch.profiler.profile(profile_memory=True) records them; on CUDA "
            "the caching allocator also keeps freed blocks reserved, which neither count includes"
        ),
        source=(
            "torch/profiler/profiler.py (profile_memory); aten/src/ATen/native/ConvolutionMM2d.cpp "
            "(slow_conv2d_backward allocates its own columns buffer)"
        ),
    ),
}
# The help of the controls whose meaning is not in their label.
WIDTH_HELP = "Hidden units in the MLP, channels in the CNN, the model dimension in the transformer."
PRECISION_HELP = "bf16 and fp16 run the step under autocast; the weights stay fp32."
TRANSFORMER_ONLY = "The transformer preset's knob: the MLP and the CNN have no sequence or attention heads."
CHECKPOINTING_HELP = "Activation checkpointing around each top-level block of the model."
DOUBLING_QUESTION = "Double the batch size. Which of these grows?"

PHASES = {"forward": "the forward pass", "backward": "the backward pass", "optimizer step": "the optimizer step"}
PART_ORDER = (
    "parameters",
    "buffers",
    "batch",
    "gradients",
    "optimizer state",
    "activations",
    "weight copies",
    "forward temporaries",
    "backward temporaries",
    "optimizer step temporaries",
    "zero_grad temporaries",
)
# The parts a training step holds in full at some moment: name -> Measurement attribute.
WHOLE_PARTS = {
    "parameters": "parameters",
    "buffers": "buffers",
    "batch": "batch",
    "gradients": "gradients",
    "optimizer state": "optimizer_state",
    "activations": "activations",
    "weight copies": "weight_copies",
}
METRICS = ("parameters", "gradients", "optimizer state", "activations", "weight copies", "batch")  # shown per run
PROPORTIONAL = 0.01  # a batch-independent part under 1% of the smallest activations counts as none


def explain(options: MemoryOptions, point: Point, points: tuple[Point, ...]) -> list[str]:
    result = point.result
    lines = [_categories(options, point)]
    if result.weight_copies:
        lines.append(_weight_copies(point, points))
    batch = "micro-batch" if options.accumulation > 1 else "batch"
    lines.append(
        f"The {batch} itself (**{format_bytes(result.batch)}** of input) is not an activation: it exists without "
        "a graph. It is a part of its own at the peak."
    )
    growth = _growth(options, points)
    if growth:
        lines.append(growth)
    lines += _formula(options, point)
    lines += peak_lines(result)
    if options.accumulation > 1:
        lines.append(_accumulation(options, point))
    return lines


def _how(point: Point) -> str:
    return "measured" if point.measured else "estimated on fake tensors"


def _found(point: Point, size: float) -> str:
    return f"measured {format_bytes(size)}" if point.measured else f"estimated {format_bytes(size)} on fake tensors"


def _batch_words(options: MemoryOptions, point: Point) -> str:
    if options.accumulation > 1:
        return f"a micro-batch of {point.micro_batch:,}"
    return f"batch {point.batch:,}"


def _categories(options: MemoryOptions, point: Point) -> str:
    result = point.result
    keeps_none = " keeps none" if not result.optimizer_state else ""
    return (
        f"Parameters **{format_bytes(result.parameters)}**, gradients **{format_bytes(result.gradients)}** and "
        f"optimizer state **{format_bytes(result.optimizer_state)}** ({options.optimizer}{keeps_none}) do not depend "
        f"on the batch size; the activations saved for backward do: **{format_bytes(result.activations)}** at "
        f"{_batch_words(options, point)} ({_how(point)})."
    )


def _weight_copies(point: Point, points: tuple[Point, ...]) -> str:
    result = point.result
    same = len({p.result.weight_copies for p in points}) == 1
    predicted = result.predicted.get("weight_copies")
    return (
        "Autocast also saves low-precision copies of the weights for backward: "
        f"**{format_bytes(result.weight_copies)}**"
        + (" at every batch size in the sweep" if same and len(points) > 1 else "")
        + ", shown apart from the activations"
        + (f" (predicted {format_bytes(predicted)}: 2 bytes per weight that backward needs)" if predicted else "")
        + "."
    )


def _growth(options: MemoryOptions, points: tuple[Point, ...]) -> str | None:
    """How the measured activations grew across the sweep, from its first and last measured micro-batch."""
    measured = [p for p in points if p.measured]
    if len(measured) < 2 or measured[0].micro_batch == measured[-1].micro_batch:
        return None
    first, last = measured[0], measured[-1]
    a1, a2 = first.result.activations, last.result.activations
    m1, m2 = first.micro_batch, last.micro_batch
    sentence = (
        f"From {'micro-batch' if options.accumulation > 1 else 'batch'} {m1:,} to {m2:,} "
        f"({format_number(m2 / m1)}x) the measured activations grew {format_number(a2 / max(a1, 1))}x"
    )
    per_sample = (a2 - a1) / (m2 - m1)
    fixed = a1 - per_sample * m1
    if abs(fixed) <= PROPORTIONAL * a1:
        return sentence + ": in proportion to the batch."
    if fixed > 0:
        return (
            sentence + f": {format_bytes(per_sample)} per sample, plus {format_bytes(fixed)} that does not depend "
            "on the batch."
        )
    return sentence + "."


def _formula(options: MemoryOptions, point: Point) -> list[str]:
    result = point.result
    predicted, actual = result.predicted["activations"], result.activations
    if point.fitted_coefficients is not None:
        return _published_formula(options, point)
    if actual == predicted:
        return [f"The closed form ({_formula_terms(options, point)}) predicts exactly what was {_how(point)}."]
    closeness = "within 1%" if abs(actual - predicted) <= 0.01 * predicted else f"{format_number(actual / predicted)}x"
    return [
        f"The closed form ({_formula_terms(options, point)}) predicts {format_bytes(predicted)}; "
        f"{_found(point, actual)} ({closeness})."
    ]


def _formula_terms(options: MemoryOptions, point: Point) -> str:
    d, m, w, e = options.depth, point.micro_batch, options.width, element_bytes(options)
    loss = "and the output the loss keeps in fp32"
    batch_copy = f"the batch's {e}-byte copy, " if e < 4 else ""
    if options.preset == "mlp":
        if options.checkpointing:
            return f"{d} block outputs of {m:,}×{w:,} values at {e} bytes, which the checkpoints keep, {loss}"
        return f"each block's GELU input and output, 2×{d}×{m:,}×{w:,} values at {e} bytes, {batch_copy}{loss}"
    if options.preset == "cnn":
        maps = f"{m:,}×{w:,}×{IMAGE}×{IMAGE}"
        if options.checkpointing:
            return f"{d} block outputs of {maps} values at {e} bytes, which the checkpoints keep, {loss}"
        return (
            f"each block's BatchNorm input and ReLU output, 2×{d}×{maps} values at {e} bytes, the pooled features, "
            f"BatchNorm's saved statistics, {batch_copy}{loss}"
        )
    return (
        f"{d} block boundaries of {m:,}×{options.seq_len:,}×{w:,} values at 4 bytes, as LayerNorm's output stays "
        "fp32: every block's input but the batch, and the output the loss keeps"
    )


def _published_formula(options: MemoryOptions, point: Point) -> list[str]:
    result = point.result
    predicted, actual = result.predicted["activations"], result.activations
    per_token, per_score = point.fitted_coefficients
    token0, score0 = published_coefficients(options)
    d, b, s, h, a = options.depth, point.micro_batch, options.seq_len, options.width, options.heads
    at_fp32 = "; at fp32 its values take 4 bytes: sbh(66 + 9as/h)" if element_bytes(options) == 4 else ""
    other_s = s // 2 if s >= 16 else 2 * s
    lines = [
        "The published formula, sbh(34 + 5as/h) bytes per layer (Korthikanti et al. 2022: Megatron's layer, "
        f"2-byte values, 1-byte dropout masks{at_fp32}), predicts {format_bytes(predicted)}; "
        f"{_found(point, actual)} ({format_number(actual / predicted)}x).",
        f"Estimating sequence lengths {s:,} and {other_s:,} separates the two terms: per layer, at this "
        f"micro-batch of {b:,}, PyTorch's encoder layer keeps {format_number(per_token)} bytes per token per hidden "
        f"unit (the formula: {token0}) and "
        f"{format_number(per_score)} bytes per attention score (the formula: {score0}). The first accounts for "
        f"{format_bytes((per_token - token0) * s * b * h * d)} of the difference, the second for "
        f"{format_bytes((per_score - score0) * a * s * s * b * d)}"
        + (
            f", and the lab's loss, which saves the final output for backward, for the remaining "
            f"{format_bytes(point.loss_saved)}."
            if point.loss_saved
            else "."
        ),
    ]
    attention = _attention(result.graph_ops, per_score)
    if attention:
        lines.append(attention)
    return lines


def _attention(graph_ops: tuple[str, ...], per_score: float) -> str | None:
    """What the recorded graph says about attention: fused into one node, or op by op."""
    fused = [op for op in graph_ops if "Attention" in op]
    softmax = [op for op in graph_ops if "Softmax" in op]
    if fused:
        return f"The graph recorded attention fused into one node ({', '.join(fused)})."
    if softmax and "BmmBackward0" in graph_ops:
        kept = ""
        if per_score > 0:
            kept = f", and those saved for backward take the {format_number(per_score)} bytes per score"
        return (
            f"The graph recorded attention op by op (BmmBackward0, {', '.join(softmax)}), not fused: s×s attention "
            f"matrices are materialised{kept}."
        )
    return None


def _parts(step: StepMemory, micro_batches: int = 1) -> str:
    order = {name: i for i, name in enumerate(PART_ORDER)}
    named = sorted((name for name, size in step.at_peak.items() if size), key=lambda n: order.get(n, len(order)))
    return ", ".join(f"{part_name(name, micro_batches)} {format_bytes(step.at_peak[name])}" for name in named)


def part_name(name: str, micro_batches: int = 1) -> str:
    """A part's name as shown: with accumulation, the batch a pass holds is one micro-batch."""
    return "micro-batch" if name == "batch" and micro_batches > 1 else name


def largest_at_peak(step: StepMemory) -> tuple[tuple[str, ...], int]:
    """The largest parts alive at a step's peak, temporaries included, and their size: what cutting would lower
    that peak most. Several when they tie to the byte (a layer's parameters and their gradients often do)."""
    size = max(step.at_peak.values())
    return tuple(name for name, nbytes in step.at_peak.items() if nbytes == size), size


def peak_lines(result: Measurement) -> list[str]:
    """The two measured peaks, what was alive at each, and which kind of steady state this run has."""
    first, steady = result.first_step, result.steady_step
    same = first.peak == steady.peak and first.peak_phase == steady.peak_phase and first.at_peak == steady.at_peak
    if same:
        lines = [
            f"Steps 1 and 2 both peaked at **{format_bytes(first.peak)}** during {_during(first.peak_phase)}: "
            f"{_parts(first, result.micro_batches)}."
        ]
    else:
        lines = [
            f"Step 1 peaked at **{format_bytes(first.peak)}** during {_during(first.peak_phase)}: "
            f"{_parts(first, result.micro_batches)}.",
            f"Step 2, which every later step repeats, peaked at **{format_bytes(steady.peak)}** during "
            f"{_during(steady.peak_phase)}: {_parts(steady, result.micro_batches)}.",
        ]
    seen = allocator_words(result)
    if seen:
        lines.append(seen)
    state = steady.at_peak.get("optimizer state", 0)
    if not result.optimizer_state:
        if same:
            lines.append("With no optimizer state, step 2 holds what step 1 held.")
    elif steady.peak > first.peak and state and steady.peak_phase in ("forward", "backward"):
        phase = steady.peak_phase  # the same phase in both steps: the state is what step 1's lacked there
        rise = steady.phase_peaks.get(phase, 0) - first.phase_peaks.get(phase, 0)
        elsewhere = (
            f" (step 1's own peak was in {_during(first.peak_phase)}, where the state already existed)"
            if first.peak_phase != phase
            else ""
        )
        lines.append(
            f"From step 2 on, the optimizer state ({format_bytes(state)}), made by step 1's optimizer step, is alive "
            f"through forward and backward and adds to what they hold: in {_during(phase)}, step 2 peaked "
            f"{format_bytes(rise)} above step 1{elsewhere}. The steady peak is the one a long run must fit."
        )
    elif steady.peak_phase == "optimizer step":
        passes = max(steady.phase_peaks.get("forward", 0), steady.phase_peaks.get("backward", 0))
        lines.append(
            f"From step 2 on, the optimizer state ({format_bytes(result.optimizer_state)}) is alive through forward "
            f"and backward too, but there the step held at most {format_bytes(passes)}, below its optimizer step."
        )
    optimizer = _optimizer_sentence(result)
    if optimizer:
        lines.append(optimizer)
    unheld = _not_all_at_once(result)
    if unheld:
        lines.append(unheld)
    return lines


def allocator_words(result: Measurement) -> str | None:
    """The allocator's record of one more step 2 beside the tensors' count: the same, or what only it saw."""
    record, steady = result.allocator, result.steady_step
    if record is None:
        return None
    where = f"during {_during(record.phase)}" + (f", while `{record.operator}` ran" if record.operator else "")
    if format_bytes(record.peak) == format_bytes(steady.peak) and record.phase == steady.peak_phase:
        return f"The CPU allocator's own record of one more step 2 agrees: {format_bytes(record.peak)} {where}."
    peak, counted = _apart(record.peak, steady.peak)
    words = (
        f"The CPU allocator's own record of one more step 2 (torch.profiler's memory events) peaked at "
        f"**{peak}** {where}"
    )
    if record.peak > steady.peak:
        words += (
            f": {format_bytes(record.peak - steady.peak)} more than the tensors counted here held at most ({counted})"
        )
    if record.phase != steady.peak_phase:
        held, _ = _apart(record.phase_peaks.get(steady.peak_phase, 0), record.peak)
        reached, _ = _apart(steady.phase_peaks.get(record.phase, 0), steady.peak)
        words += (
            f". The two records put the step's highest point in different phases: the allocator in "
            f"{_during(record.phase)}, the tensors in {_during(steady.peak_phase)}, where the allocator "
            f"held {held}; in {_during(record.phase)} the tensors reached {reached}"
        )
    return words + "."


def _apart(nbytes: int, other: int) -> tuple[str, str]:
    """Both sizes for people, in exact bytes when the usual rounding would make two different sizes read the same."""
    if nbytes != other and format_bytes(nbytes) == format_bytes(other):
        return f"{nbytes:,} B", f"{other:,} B"
    return format_bytes(nbytes), format_bytes(other)


def _during(phase: str) -> str:
    return PHASES.get(phase, phase)


def _optimizer_sentence(result: Measurement) -> str | None:
    """Which optimizer implementation ran, when it decides the peak, and its step's measured temporaries."""
    if "foreach=False" not in result.optimizer_call or result.steady_step.peak_phase != "optimizer step":
        return None
    temporaries = result.steady_step.at_peak.get("optimizer step temporaries", 0)
    held = ""
    if temporaries and result.largest_parameter:
        ratio = format_number(temporaries / result.largest_parameter)
        held = (
            f": at the peak its step's temporaries were {format_bytes(temporaries)}, {ratio}x the largest "
            f"parameter ({format_bytes(result.largest_parameter)})"
        )
    return (
        f"The optimizer ran as `{result.optimizer_call}`, one parameter at a time{held}. "
        "`memory.measure(..., foreach=None)` measures PyTorch's default implementation for your device instead."
    )


def _not_all_at_once(result: Measurement) -> str | None:
    """Adding up every category overstates the peak when some were not all alive at that moment."""
    whole = {name: getattr(result, attribute) for name, attribute in WHOLE_PARTS.items()}
    total = sum(whole.values())
    steady = result.steady_step
    if format_bytes(total) == format_bytes(steady.peak) or total < steady.peak:  # only a difference one can see
        return None
    partial = [
        f"{part_name(name, result.micro_batches)} {format_bytes(steady.at_peak.get(name, 0))} of {format_bytes(size)}"
        for name, size in whole.items()
        if format_bytes(steady.at_peak.get(name, 0)) != format_bytes(size)
    ]
    return (
        f"Adding every category up gives {format_bytes(total)}, more than the steady peak: they were not all "
        f"alive at once. At the peak the step held {', '.join(partial)}."
    )


def _accumulation(options: MemoryOptions, point: Point) -> str:
    k, m = options.accumulation, point.micro_batch
    later = (
        f" The lab measures the first two of the {k} micro-batches of a step; the later ones are not measured."
        if k > 2
        else ""
    )
    return (
        f"With {k} accumulation steps, each forward and backward sees a micro-batch of {m:,} ({k} of them, "
        f"{k * m:,} samples, per optimizer step): the activations above are one micro-batch's. The gradients stay "
        f"alive from one micro-batch to the next; parameters and optimizer state do not change.{later}"
    )


def doubling_evidence(points: tuple[Point, ...], batch: int) -> str | None:
    """What doubling the batch did to each category: from this batch up, or (at the top of the sweep) from half of it.

    None when the sweep holds no such pair whose micro-batch doubled too.
    """
    by_batch = {p.batch: p for p in points}
    for low in (batch, batch // 2):
        pair = [by_batch[b] for b in (low, 2 * low) if b in by_batch]
        if len(pair) == 2 and pair[1].micro_batch == 2 * pair[0].micro_batch:
            break
    else:
        return None
    batch = pair[0].batch
    small, large = (p.result for p in pair)
    how = {(True, True): "Measured", (False, False): "Estimated on fake tensors"}.get(
        (pair[0].measured, pair[1].measured), "Measured and estimated"
    )
    changes = []
    for name, attribute in WHOLE_PARTS.items():
        before, after = getattr(small, attribute), getattr(large, attribute)
        if before:
            changes.append(f"{name} ×{after / before:.2f}")
        elif after:
            changes.append(f"{name} 0 B → {format_bytes(after)}")
    return f"{how} just now, batch {batch:,} → {2 * batch:,}: " + ", ".join(changes) + "."


# --- Page text and accidental retention -------------------------------------------------------


def estimate_notice(point: Point, limit: int) -> str | None:
    """Why a point was estimated rather than measured; None for a measured one."""
    if point.measured:
        return None
    return (
        f"Batch {point.batch:,} was estimated on fake tensors, not allocated: its estimated peak "
        f"({format_bytes(point.result.peak)}) is over what this lab allocates for real "
        f"(the smaller of {format_bytes(limit)} and a quarter of this machine's free memory)."
    )


def metrics_caption(options: MemoryOptions, point: Point, definition: str) -> str:
    return (
        f"At {_batch_words(options, point)}, {_how(point)}. Activations: {definition} "
        + ("Autocast's weight copies are saved too, and shown apart. " if point.result.weight_copies else "")
        + "The batch is its own part."
    )


def metric_label(options: MemoryOptions, name: str) -> str:
    """A metric's label: with accumulation, the activations and the batch shown are one micro-batch's."""
    if options.accumulation > 1 and name == "activations":
        return "activations, per micro-batch"
    return part_name(name, options.accumulation)


REMEDIES_HEADING = "The largest power-of-two batch that fits, under each remedy"


def invalid_options_notice(error: Exception) -> str:
    return f"{error}. Showing the defaults instead."


def remedies_button(budget_gb: int) -> str:
    return f"Find them for a {budget_gb} GiB device (estimated, nothing allocated)"


def retention_caption(options: MemoryOptions, batch: int, steps: int) -> str:
    return (
        f"Four loops on the same MLP (width {options.width}, depth {options.depth}, batch {batch}), none under "
        f"`no_grad`, live memory after each of {steps} steps: two train, two evaluate; each keeps a running "
        "total of `loss.item()` or of the `loss` tensor."
    )


def retention_lines(curves: dict[str, list[int]]) -> list[str]:
    """What each loop measured, and which kept tensors grew memory, from the curves alone."""
    growth = {name: (live[-1] - live[0]) / max(len(live) - 1, 1) for name, live in curves.items()}
    parts = [
        f"{name}: flat at {format_bytes(curves[name][-1])}"
        if not step
        else f"{name}: {'grew' if step > 0 else 'shrank'} by {format_bytes(abs(step))} per step"
        for name, step in growth.items()
    ]
    lines = [f"Measured over {len(next(iter(curves.values())))} steps: " + "; ".join(parts) + "."]
    grew = [name for name, step in growth.items() if step > 0]
    flat = [name for name, step in growth.items() if not step]
    if grew and flat:
        lines.append(
            f"Memory grew in {_names(grew)} and stayed flat in {_names(flat)}. " + STATEMENTS["graph_retention"].text
        )
    return lines


def _names(names: list[str]) -> str:
    quoted = [f"*{n}*" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
