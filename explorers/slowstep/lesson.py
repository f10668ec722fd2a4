"""The slow-step lab's sentences: each built from a measured field, each mechanism a Statement.

A sentence about a run is built from an `EvidenceRun` or a `FixRun` (explorers/slowstep/measure.py):
the extra time, the noise margin, the speedup and the loss difference are the numbers that
witnessed it. Why each bug is slow is said once the answer is given, by the Statements below, each
with its scope and source and a claims test that tries to falsify it (tests/claims/test_slowstep.py).
"""

from __future__ import annotations

import explorers.slowstep.catalogue as catalogue
import explorers.slowstep.measure as measure
from explorers import capacity
from explorers.evidence.lesson import STATEMENTS as GPU_STATEMENTS
from explorers.slowstep.loops import BATCH
from explorers.statements import Statement
from explorers.units import ms

TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
STATEMENTS: dict[str, Statement] = {
    "workers": Statement(
        text=(
            "With `num_workers=0` the DataLoader runs `__getitem__` and `collate_fn` in the training process, "
            "between steps. With workers, that runs in separate processes, which prepare the next batches "
            "while the step computes."
        ),
        scope="CPU work in the dataset and collation; workers help while cores are left free for them",
        source=f"torch/utils/data/dataloader.py (Single- and Multi-process Data Loading); {TUNING}",
    ),
    "statistics_once": Statement(
        text=(
            "`Dataset.__getitem__` runs once for every sample of every batch: a statistic of the whole dataset "
            "computed inside it is computed again for each sample."
        ),
        scope="map-style datasets read by a DataLoader (an IterableDataset's __iter__ runs once per pass instead)",
        source="torch/utils/data/dataset.py: Dataset; torch/utils/data/_utils/fetch.py",
    ),
    "tensor_rows": Statement(
        text=(
            "`torch.tensor` on nested Python lists reads the numbers one Python object at a time, so its time "
            "grows with how many numbers there are. Rows kept in a tensor are gathered as blocks of memory "
            "(`index_select`, `torch.stack`)."
        ),
        scope="lists of Python numbers (a NumPy array or a tensor is copied as a block of memory)",
        source="torch/csrc/utils/tensor_new.cpp: internal_new_from_data",
    ),
    "float32": Statement(
        text=(
            "PyTorch's default floating dtype is float32. A float64 tensor holds half as many numbers per "
            "byte and per vector register, so its matrix products run slower on a CPU."
        ),
        scope="CPU matrix products at the drill's sizes, measured on this machine by the claims test",
        source="torch.get_default_dtype docs; the BLAS routines sgemm and dgemm",
    ),
    "augment_batch": Statement(
        text=(
            "An augmentation written per sample calls its operators once per sample. On the whole batch, one "
            "grouped `conv1d` per pass (a group, and a kernel, per sample) does the same arithmetic in one call."
        ),
        scope="augmentations that are the same operation with per-sample parameters (a random kernel, a crop "
        "offset); an augmentation that changes a sample's shape is batched by padding or cropping to one shape",
        source="torch.nn.functional.conv1d (groups); torchvision.transforms.v2 and Kornia, which augment batches",
    ),
    "batched": Statement(
        text=(
            "Every module call and operator costs a fixed overhead besides its arithmetic: Python, the "
            "dispatcher and, with grad on, autograd's recording. A Python loop over the samples pays it "
            "batch-size times over, and turns one matrix product into many matrix-vector products."
        ),
        scope="eager mode (torch.compile or torch.vmap can batch such a loop)",
        source=f"{TUNING}; torch/csrc/autograd/function.h",
    ),
    "anomaly_off": Statement(
        text=(
            "Anomaly detection records a traceback for every autograd node the forward creates, and checks "
            "every gradient the backward computes for NaN. It is a debugging mode."
        ),
        scope="torch.autograd.detect_anomaly and set_detect_anomaly(True) (check_nan=True, the default)",
        source="torch/autograd/anomaly_mode.py; torch/csrc/autograd/anomaly_mode.h",
    ),
    "no_checkpointing": Statement(
        text=(
            "`torch.utils.checkpoint` keeps a block's inputs instead of its activations and runs the block's "
            "forward again during backward: it trades compute for memory."
        ),
        scope="checkpoint(..., use_reentrant=False) and True alike; memory it saves is only worth that "
        "compute when activations do not fit",
        source="torch/utils/checkpoint.py: checkpoint",
    ),
    "ema_in_place": Statement(
        text=(
            "`copy.deepcopy(model)` rebuilds every submodule in Python and allocates and copies every parameter "
            "and buffer. An in-place update (`torch._foreach_lerp_`, or `AveragedModel` with "
            "`get_ema_multi_avg_fn`) writes into the same tensors."
        ),
        scope="modules whose parameters are ordinary tensors (a deepcopy of a module holding hooks or "
        "references copies those too)",
        source="torch/nn/parameter.py: Parameter.__deepcopy__; torch/optim/swa_utils.py",
    ),
    "vector_metrics": Statement(
        text=(
            "Indexing one sample and calling operators on it costs a dispatch per call: a Python loop over the "
            "batch makes batch-size times the calls of the same operators on the whole batch, and each "
            "`int()` or `float()` copies a number out to Python."
        ),
        scope="eager mode; on a GPU each copy to Python also waits for the GPU (see the GPU evidence lab)",
        source=f"{TUNING} (avoid unnecessary CPU-GPU synchronization)",
    ),
    "save_less": Statement(
        text=(
            "`torch.save` serialises every tensor it is given each time it is called: the model's weights and, "
            "for Adam or AdamW, two moment tensors the size of the weights."
        ),
        scope="a state_dict of ordinary tensors; Adam's state holds exp_avg and exp_avg_sq per parameter",
        source="torch/serialization.py: save; torch/optim/adamw.py",
    ),
}
SYNC = GPU_STATEMENTS["sync"]  # said once, in the GPU evidence lab: why .item() costs more on a GPU

PHASE_NAMES = {"data": "data", "forward": "forward", "backward": "backward", "optimizer": "optimizer",
               "other": "other (EMA, metrics, logging, checkpoints)"}  # fmt: skip
QUESTION_EVIDENCE = "1. Which evidence shows where the time goes?"
QUESTION_FIX = "2. Which change would you make first?"
LOOP_PARTS = (
    "Every drill is the same training loop with one part written the slow way. Each step reads a batch of "
    f"{BATCH} from a DataLoader (a map-style Dataset), runs an MLP forward and backward, steps AdamW, and then, "
    "labelled other: updates an EMA of the weights, computes accuracy, a confusion matrix and each sample's "
    "loss and confidence, logs the loss and saves a checkpoint on schedule."
)
ANSWER_FIRST = "Pick the evidence and a fix; the lab then runs your fix against the loop."
CHANGED_PICKS = "Your picks changed since your last check: check again to grade them and run that fix."
NOT_SHOWN = (
    "This run did not show a bottleneck beyond its noise margin, so the lab grades nothing on it. "
    "Measure again: a busy machine blurs a few milliseconds."
)


def breakdown(run: measure.EvidenceRun) -> str:
    """The phases of the slow loop, from the timed blocks (no profiler)."""
    e = run.evidence
    parts = ", ".join(f"{p} {ms(e.phases[p])}" for p in measure.PHASES)
    steps = run.blocks.steps
    return (
        f"Over {steps} timed steps without the profiler, a step took {ms(run.blocks.typical('slow'))} ms (the "
        f"median): {parts} ms. The operators and the timeline come from {e.steps} profiled steps."
    )


def evidence_label(run: measure.EvidenceRun, item: str) -> str:
    """An evidence choice as the learner reads it: a phase bar or an operator row, with its own numbers only."""
    kind, _, key = item.partition(":")
    if kind == "phase":
        return f"The {PHASE_NAMES[key]} bar: {ms(run.evidence.phases[key])} ms per step"
    row = next(r for r in run.evidence.ops if r.key == key)
    inputs = f" {row.inputs}" if row.inputs else ""
    calls = f"{row.calls:g} call{'s' * (row.calls != 1)}"
    return f"`{row.name}`{inputs} in {row.phase}: {ms(row.self_ms)} ms self per step, {calls}"  # code: __next__


def evidence_choices(run: measure.EvidenceRun) -> tuple[str, ...]:
    """Every phase bar, then every shown operator row, in the figures' own order (by phase, by self time)."""
    return tuple(f"phase:{p}" for p in measure.PHASES) + tuple(f"op:{r.key}" for r in run.evidence.ops)


def evidence_grade(run: measure.EvidenceRun, item: str) -> str:
    """Whether the picked evidence holds the extra time, in milliseconds the correct loop showed."""
    extra, noise = run.extra_ms()
    kind, _, key = item.partition(":")
    if kind == "phase":
        held = run.extra_ms(key)[0]
        what = f"the {key} phase"
    else:
        held = run.op_growth[key]
        what = "that operator row"
    where = " and ".join(run.answer_phases)
    verdict = "points at the bottleneck" if item in run.answers else "does not point at the bottleneck"
    change = f"{ms(held)} ms more" if held >= 0 else f"{ms(-held)} ms less"
    return (
        f"Your evidence {verdict}: against the correct loop on the same seed and data, the slow step took "
        f"{ms(extra)} ms more (±{ms(noise)} ms noise), and {what} took {change}. The extra time is in {where}."
    )


def fix_line(run: measure.FixRun) -> str:
    """What the chosen fix did, measured against the slow loop: the speedup, or that it sits in the noise."""
    saved, noise = run.saved_ms
    label = catalogue.FIXES[run.fix].label
    rounds = run.blocks.how
    if run.verdict == "inside the noise":
        change = f"{ms(abs(saved))} ms {'shorter' if saved > 0 else 'longer'}" if saved else "no shorter"
        line = (
            f"“{label}” made the step {change}, inside the ±{ms(noise)} ms noise margin ({rounds}): no measurable gain."
        )
    elif run.verdict == "faster":
        line = (
            f"“{label}” saved {ms(saved)} ms per step (the median of the paired differences, ±{ms(noise)} ms, "
            f"{rounds}); the median step went from {ms(run.blocks.typical('slow'))} to "
            f"{ms(run.blocks.typical('other'))} ms, {run.speedup:.2f}× as fast."
        )
    else:
        line = f"“{label}” cost {ms(-saved)} ms per step (±{ms(noise)} ms, {rounds}): slower than the loop as it was."
    if not run.same_training:
        line += (
            f" It also changed training: the losses differ by up to {run.loss_difference:.0%} step by step from "
            "the loop's. Speed bought with a different result is not a fix."
        )
    if run.fix == "workers":
        line += workers_line(run)
    if run.fix == "log_less" and run.verdict != "faster":
        line += (
            " On this CPU an `.item()` per step costs little; on a GPU it waits for the GPU, as the GPU evidence "
            "lab's traces show."
        )
    return line


def workers_line(run: measure.FixRun) -> str:
    """Where DataLoader workers moved the time: the data phase's saving, and what the other phases gave back."""
    fell = run.blocks.typical("slow", "data") - run.blocks.typical("other", "data")
    rose = sum(run.blocks.typical("other", p) - run.blocks.typical("slow", p) for p in measure.PHASES if p != "data")
    if fell <= 0 or rose <= 0:
        return ""
    return (
        f" With the workers, data took {ms(fell)} ms less per step and the other phases {ms(rose)} ms more: the "
        f"step ran slower beside the workers' processes on this machine's {capacity.usable_cores()} cores."
    )


def answer_line(drill: str, fix: str, evidence_right: bool) -> str:
    chosen = catalogue.DRILLS[drill]
    right = fix == chosen.fix
    parts = [
        "Evidence: right." if evidence_right else "Evidence: not the bottleneck.",
        "Fix: the one a senior engineer would make first." if right else
        f"Fix: not the first choice; that is “{catalogue.FIXES[chosen.fix].label}”.",
    ]  # fmt: skip
    return " ".join(parts)


def planted(drill: str) -> str:
    chosen = catalogue.DRILLS[drill]
    return f"The planted line: `{chosen.slow_code}`. The fix: `{catalogue.FIXES[chosen.fix].code}`."


def why(drill: str) -> str:
    fix = catalogue.FIXES[catalogue.DRILLS[drill].fix]
    return str(STATEMENTS[fix.statement or fix.key])


QUESTIONS_TITLE = "Your diagnosis"
REVEAL_TITLE = "The planted bug"
CHECK = "Check and run my fix"
AGAIN_HELP = "A new measurement of the same drill and seed: runs on a busy machine scatter."
OPS_CAPTION = (
    "Operators by self time per step, from torch.profiler with record_shapes: each row's phase, its inputs' "
    "dtypes and shapes, and each phase's own Python time outside any operator. Under the profiler every call "
    "costs more (most where the calls are many and small): compare the rows with each other, and the phases with "
    "the bars above, which are timed without it."
)
TRACE_DOWNLOAD = "Download the trace (Chrome JSON, gzipped)"
TRACE_HELP = "The profiled steps as torch.profiler exported them: open it in ui.perfetto.dev or chrome://tracing."
UNKNOWN_EVIDENCE = "The link's evidence is not among this run's phase bars and operator rows, so none is picked."
UNKNOWN_FIX = "The link's fix is not offered on this drill and seed, so none is picked."
GPU_LINK_WORDS = "GPU evidence: traces where an .item() holds the host"


def timeline_what(hidden: int) -> str:
    return (
        f"One step, torch.profiler ({hidden} operators under 0.5% of the step not drawn)"
        if hidden
        else ("One step, torch.profiler")
    )


def kept_line(right: bool) -> str:
    return f"Your first answer on this drill and seed, the one kept: {'right' if right else 'not right'}."
