"""The precision lab's sentences: each about this run built from a result field, each general one a Statement."""

from __future__ import annotations

import re
from dataclasses import replace

from explorers.precision.experiment import INPUT_EXP_RANGE, LAYERS, PrecisionOptions, PrecisionResult, PrecisionRun
from explorers.statements import Statement
from explorers.units import format_bytes
from explorers.wording import count, series


def first_sentence(message: str) -> str:
    return re.split(r"(?<=[a-z\]\)`])\.\s", message, maxsplit=1)[0]


AMP_DOC = "https://docs.pytorch.org/docs/stable/amp.html"
STATEMENTS: dict[str, Statement] = {
    "formats": Statement(
        text=(
            "bfloat16 keeps float32's 8 exponent bits, so its range is float32's (largest finite about 3.4e38, "
            "smallest normal about 1.2e-38), with 8 bits of precision; float16 has 5 exponent bits: largest "
            "finite 65504, smallest normal about 6.1e-5, subnormals down to about 6e-8."
        ),
        scope="IEEE float16 and bfloat16 as torch.finfo describes them",
        source="torch.finfo; https://docs.pytorch.org/docs/stable/type_info.html",
    ),
    "autocast": Statement(
        text=(
            "Inside `torch.autocast`, ops on its lower-precision list (matmul, linear's addmm, conv) run on "
            "lower-precision copies of their inputs, ops on its float32 list run in float32, ops on neither run in "
            "the dtype of the inputs they get, and the parameters themselves stay float32; their gradients are "
            "float32 too."
        ),
        scope="float32 inputs of ops called inside the autocast region on its device (the CPU lists of torch 2.13 "
        "here; CUDA's lists differ, its float32 list holds layer_norm; float64 inputs stay float64)",
        source=f"{AMP_DOC}#autocast-op-reference",
    ),
    "scaler": Statement(
        text=(
            "`GradScaler` multiplies the loss by its scale before backward; `scaler.step()` unscales the "
            "gradients and skips `optimizer.step()` when any holds inf or nan, and `update()` then multiplies "
            "the scale by backoff_factor (0.5); after growth_interval (2000) steps in a row without one, by "
            "growth_factor (2)."
        ),
        scope="torch.amp.GradScaler with its default factors, enabled, on the optimizer's parameters",
        source=f"{AMP_DOC}#gradient-scaling and torch/amp/grad_scaler.py",
    ),
    "fp16_loss_outside_autocast": Statement(
        text=(
            "Compute the loss inside autocast. Outside it, a loss computed from float16 outputs is float16, and "
            "so is the gradient backward starts from: GradScaler's default scale, 65536, is above float16's "
            "largest value, 65504, so that gradient is inf and the first step is skipped, whatever the loss."
        ),
        scope="torch.amp.GradScaler at its default init_scale (2**16); float16 outputs of a CPU autocast region in "
        "torch 2.13, whose float32 list holds cross_entropy's log_softmax (inside the region the loss is float32)",
        source=f"{AMP_DOC}#gradient-scaling and the autocast op reference",
    ),
    "scheduler_order": Statement(
        text=(
            "An `lr_scheduler.step()` whose optimizer has not stepped yet warns *Detected call of "
            "`lr_scheduler.step()` before `optimizer.step()`*: a GradScaler that skips the first steps sets it off."
        ),
        scope="the scheduler's first step; once the optimizer has stepped, later skipped steps do not warn",
        source="torch/optim/lr_scheduler.py: LRScheduler.step",
    ),
}
NAMES = {"fp32": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast", "fp16 + GradScaler": "fp16 + GradScaler"}


def _loss(value: float) -> str:
    return f"{value:.3f}" if value == value and abs(value) != float("inf") else str(value)


def loss_sentence(result: PrecisionResult) -> str:
    parts = [f"{NAMES[p]} {_loss(run.losses[-1])}" for p, run in result.runs.items()]
    return f"Loss at step {result.options.steps}: " + ", ".join(parts) + "."


def run_sentences(run: PrecisionRun) -> list[str]:
    """What this precision did at the first step and over the run."""
    name, lines = NAMES[run.precision], []
    bad = [(layer, c) for layer, c in run.layers.items() if c.inf or c.nan]
    if bad:
        layer, c = bad[0]
        lines.append(
            f"{name}: at step 1, `{layer}`'s output held {c.inf} inf and {c.nan} nan of {c.values} values"
            + (f", and {len(bad) - 1} later layer{'s' * (len(bad) != 2)} held inf or nan too" if len(bad) > 1 else "")
            + "."
        )
    under = [(layer, c) for layer, c in run.layers.items() if c.grad_underflow]
    if under:
        lines.append(
            f"{name}: at step 1, gradient values flowing into each layer's output that were zero here where fp32's "
            "were below this dtype's smallest normal value (underflow): "
            + ", ".join(f"`{layer}` {c.grad_underflow} of {c.grad_values}" for layer, c in under)
            + "."
        )
    rounded = [(layer, c) for layer, c in run.layers.items() if c.grad_rounded_to_zero]
    if rounded:
        lines.append(
            f"{name}: at step 1, gradient values that were zero here although fp32's lay within this dtype's range "
            "(rounding, not underflow): "
            + ", ".join(f"`{layer}` {c.grad_rounded_to_zero} of {c.grad_values}" for layer, c in rounded)
            + "."
        )
    updates = run.updates
    still = [i for i, s in enumerate(updates, 1) if not s]
    if still:
        lines.append(
            f"{name}: the weights did not change at {series('step', still)} ({sum(updates)} of "
            f"{len(updates)} steps that left the weights finite moved them)."
        )
    if run.nonfinite_from:
        lines.append(f"{name}: from step {run.nonfinite_from} on, some weights held inf or nan.")
    return lines


NO_TROUBLE = "No precision had an inf or nan output, or lost a gradient value to zero, at step 1."


def trouble_lines(result: PrecisionResult) -> list[str]:
    """Every precision's run sentences, or the one sentence saying the run witnessed none of them."""
    return [line for run in result.runs.values() for line in run_sentences(run)] or [NO_TROUBLE]


def scaler_sentences(run: PrecisionRun) -> list[str]:
    if not run.scales:
        return []
    skipped = run.skipped_steps
    first, last = run.scales[0][0], run.scales[-1][1]
    lines = [f"GradScaler's scale started at {first:g} and ended at {last:g}."]
    if skipped:
        lines.append(
            f"It skipped the optimizer step at {series('step', skipped)}: the weights did not change there, and "
            "update() cut the scale after each."
        )
    else:
        lines.append("It cut its scale at no step: it skipped none.")
    order = [w for w in run.warnings if "lr_scheduler.step()" in w]
    if order:
        lines.append(
            "The scheduler stepped after a skipped step, and PyTorch warned: "
            f"*{first_sentence(order[0].split(': ', 1)[1])}*."
        )
    return lines


def falling_scale_sentence(run: PrecisionRun) -> str:
    """What a falling scale meant on this run: a layer whose output was already inf or nan in the forward (no scale
    undoes that); else scaled gradients that overflowed, at every scale tried or only until the scale fell low
    enough."""
    bad = [layer for layer, c in run.layers.items() if c.inf or c.nan]
    if bad:
        return (
            f"On this run it was the forward: `{bad[0]}`'s output held inf or nan at step 1, before any scale "
            "applies, so no scale can help; keep that op in float32, scale the inputs down, or use bf16."
        )
    cut = [i for i, (before, after) in enumerate(run.scales, 1) if after < before]
    first, last = run.scales[0][0], run.scales[-1][1]
    cuts = f"On this run GradScaler cut its scale at {series('step', cut)}, from {first:g} to {last:g}"
    clean = "no layer's output held inf or nan at step 1"
    if len(cut) == len(run.scales):
        return f"{cuts}: {clean}, so its scaled gradients overflowed at every scale it tried."
    return (
        f"{cuts}, and at none of the other {len(run.scales) - len(cut)} steps: {clean}, so the scaled gradients "
        "overflowed at the higher scales, not at the lower."
    )


def bf16_sentence(result: PrecisionResult) -> str:
    """The same settings in bf16 with no scaler: the run as the witness of why bf16 usually needs none."""
    bf16, fp16 = result.run("bf16"), result.run("fp16")

    def trouble(run: PrecisionRun) -> tuple[int, int, int]:  # inf or nan outputs, underflowed grads, steps moved
        return (sum(c.inf + c.nan for c in run.layers.values()), sum(c.grad_underflow for c in run.layers.values()),
                sum(run.updates))  # fmt: skip

    b, f = trouble(bf16), trouble(fp16)
    steps = len(bf16.stepped)
    return (
        f"At these settings, with no scaler, at step 1 bf16 had {count(b[0], 'inf or nan output')} and "
        f"{count(b[1], 'underflowed gradient value')}, fp16 {count(f[0], 'inf or nan output')} and "
        f"{count(f[1], 'underflowed gradient value')}; bf16 moved the weights, and left them finite, at {b[2]} of "
        f"{steps} steps, fp16 at {f[2]}."
    )


def dtype_sentence(run: PrecisionRun) -> str:
    """Which ops the first forward ran in the lower precision and which gave float32, as dispatched."""
    ops = [(op, dtype) for op, dtype in run.op_dtypes if op != "_to_copy"]
    low = list(dict.fromkeys(op for op, dtype in ops if dtype != "float32"))
    kept = list(dict.fromkeys(op for op, dtype in ops if dtype == "float32"))
    name = NAMES[run.precision]
    if not low:
        return f"{name}: every op of the forward produced float32 ({', '.join(kept)})."
    words = f"{name}: {', '.join(f'`{o}`' for o in low)} produced {next(d for _, d in ops if d != 'float32')}"
    return words + (f"; {', '.join(f'`{o}`' for o in kept)} produced float32." if kept else ".")


def dtype_rows(result: PrecisionResult) -> list[dict]:
    columns = {p: [d for op, d in run.op_dtypes if op != "_to_copy"] for p, run in result.runs.items()}
    ops = [op for op, _ in result.run("fp16").op_dtypes if op != "_to_copy"]
    return [{"op": op, **{NAMES[p]: columns[p][i] if i < len(columns[p]) else "" for p in columns}}
            for i, op in enumerate(ops)]  # fmt: skip


def explain(result: PrecisionResult) -> list[str]:
    keys = ["formats", "autocast"]
    scaled = result.run("fp16 + GradScaler")
    if any(after < before for before, after in scaled.scales):
        keys.append("scaler")
    if any("lr_scheduler.step()" in w for w in scaled.warnings):
        keys.append("scheduler_order")
    return [STATEMENTS[k].text for k in keys]


PREDICT_CHOICES = ["Yes", "No"]


def what_if(options: PrecisionOptions) -> PrecisionOptions:
    """The setting the prediction asks about: inputs a hundred times larger (smaller at the top of the range), whose
    runs are not on screen until the prediction is made."""
    larger = options.input_exp + 2
    return replace(options, input_exp=larger if larger <= INPUT_EXP_RANGE[1] else options.input_exp - 2)


def predict_question(options: PrecisionOptions) -> str:
    other = what_if(options)
    return (
        f"Now with inputs × 1e{other.input_exp} instead of × 1e{options.input_exp}: will fp16 autocast without a "
        "scaler move the weights at every step?"
    )


def predicted_answer(result: PrecisionResult) -> str:
    fp16 = result.run("fp16")
    return "Yes" if len(fp16.updates) == len(fp16.stepped) and all(fp16.updates) else "No"


def predicted_evidence(result: PrecisionResult) -> str:
    """What the other setting's fp16 run did: the steps that moved the weights, then why, from its sentences."""
    fp16 = result.run("fp16")
    moved = (
        f"At inputs × 1e{result.options.input_exp}, fp16 autocast moved the weights, and left them finite, at "
        f"{sum(fp16.updates)} of {len(fp16.stepped)} steps."
    )
    return " ".join([moved, *run_sentences(fp16)])


def layer_rows(result: PrecisionResult) -> list[dict]:
    return [
        {
            "precision": NAMES[p],
            "layer": layer,
            "inf": run.layers[layer].inf,
            "nan": run.layers[layer].nan,
            "underflowed grads": run.layers[layer].grad_underflow,
            "grads rounded to zero": run.layers[layer].grad_rounded_to_zero,
            "of": run.layers[layer].grad_values,
        }
        for p, run in result.runs.items()
        for layer in LAYERS
    ]


def memory_sentence(parts: dict[str, dict[str, int]]) -> str:
    """Bytes per part under each precision, as the Memory lab's tracker measured one steady step."""
    fp32, bf16 = parts["fp32"], parts["bf16"]
    return (
        f"One steady SGD step, measured by the Memory lab's tracker: activations saved for backward "
        f"{format_bytes(fp32['activations'])} in fp32, {format_bytes(bf16['activations'])} under bf16 autocast, "
        f"{format_bytes(parts['fp16']['activations'])} under fp16; autocast's weight copies "
        f"{format_bytes(bf16['weight_copies'])} (bf16) and {format_bytes(parts['fp16']['weight_copies'])} (fp16); "
        + _same_or_each(parts, "parameters")
        + "; "
        + _same_or_each(parts, "gradients")
        + f"; the step's peak {format_bytes(fp32['peak'])}, {format_bytes(bf16['peak'])} and "
        f"{format_bytes(parts['fp16']['peak'])}."
    )


def _same_or_each(parts: dict[str, dict[str, int]], part: str) -> str:
    values = [parts[p][part] for p in ("fp32", "bf16", "fp16")]
    if len(set(values)) == 1:
        return f"{part} {format_bytes(values[0])} in each precision"
    return f"{part} " + ", ".join(
        f"{format_bytes(v)} ({p})" for v, p in zip(values, ("fp32", "bf16", "fp16"), strict=True)
    )
