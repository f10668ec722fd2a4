"""The GPU evidence lab's sentences: each built from a reading's fields, each general fact a Statement.

A sentence about a trace quotes the figure it is built from and says who computed it (HTA, or a
count of the events). What HTA's categories mean, and what the usual remedies do, are said in
Statements with their scope and source; tests/claims/test_evidence.py tries each against the
shipped traces' raw events.
"""

from __future__ import annotations

from explorers.evidence import loading, questions
from explorers.evidence.cpu import CpuReading
from explorers.evidence.questions import BOUND_CAUSES, Grade, Question
from explorers.evidence.reading import Reading
from explorers.statements import Statement

HTA_DOCS = "https://hta.readthedocs.io/en/latest/source/features"
DOCS = "https://pytorch.org/docs/stable"
STATEMENTS = {
    "idle": Statement(
        text=(
            "HTA splits a stream's idle time three ways: host wait (the stream had no queued work: the CPU had not "
            "launched the next kernel yet), kernel wait (a short gap between consecutive kernels, under HTA's "
            "threshold of 30 µs by default) and other (idle it cannot attribute)."
        ),
        scope="HolisticTraceAnalysis 0.5.0's get_idle_time_breakdown, per GPU stream, on Kineto traces",
        source=f"{HTA_DOCS}/idle_time_breakdown.html",
    ),
    "sync": Statement(
        text=(
            "`.item()`, `.cpu()`, `.tolist()`, printing a CUDA tensor and `torch.cuda.synchronize()` make the CPU "
            "wait until the GPU has done the work queued before them. In a trace the wait is a runtime call such "
            "as cudaStreamSynchronize (inside aten::_local_scalar_dense for `.item()`) or cudaDeviceSynchronize."
        ),
        scope="CUDA or ROCm tensors; a CPU tensor's .item() waits for nothing. "
        "`torch.cuda.set_sync_debug_mode('warn')` reports such calls as they happen",
        source=f"{DOCS}/notes/cuda.html#asynchronous-execution; {DOCS}/generated/torch.cuda.set_sync_debug_mode.html",
    ),
    "pageable": Statement(
        text=(
            "A host-to-device copy from pageable (ordinary) memory is staged through a pinned buffer and can make the "
            "CPU wait for it; from pinned memory with `non_blocking=True` it is queued and the CPU goes on. "
            "DataLoader(pin_memory=True) hands out pinned batches."
        ),
        scope="CUDA; the trace names the kind of copy (Memcpy HtoD (Pageable -> Device) or (Pinned -> Device))",
        source=f"{DOCS}/notes/cuda.html#use-pinned-memory-buffers",
    ),
    "overlap": Statement(
        text=(
            "DistributedDataParallel starts each gradient bucket's all-reduce while backward is still computing "
            "the next buckets, so communication can hide behind computation; exposed communication is time the "
            "GPU computes nothing while it waits for its peers."
        ),
        scope="DDP with NCCL on GPUs; the last bucket's all-reduce has no backward left to hide behind",
        source=f"{DOCS}/notes/ddp.html",
    ),
}
LAB_LINKS = {  # a cause -> (the lab that lets you try its remedy, what to try there)
    "compute": ("pages/14_Precision.py", "Precision lab: lower precision for the same kernels"),
    "data": ("pages/4_Memory.py", "Memory lab: what a batch holds, and what moves"),
    "host": ("pages/13_Compile.py", "Compile lab: fewer, fused launches"),
    "kernel_wait": ("pages/3_Profiler.py", "Profiler lab: find what the step waits on"),
    "exposed": ("pages/6_DDP.py", "DDP lab: buckets and overlap"),
}
REMEDIES = {
    "compute": "make the kernels cheaper: lower precision (bf16 autocast, TF32) or fused kernels (torch.compile).",
    "data": "move less: keep tensors on the GPU, pin host memory and copy with non_blocking=True; for exposed "
    "communication, overlap it with compute (DDP's buckets).",
    "host": (
        "see what the CPU does while the GPU waits (the CPU rows of the timeline). Launching many short kernels: fuse "
        "or capture them (torch.compile, CUDA graphs) or use a larger batch. Loading data or running Python: overlap "
        "it (DataLoader workers, pinned memory). A synchronize inside the step (.item(), .cpu()): move it out."
    ),
    "kernel_wait": "look at what orders the kernels: stream waits and events between streams.",
}
UPLOAD_PRIVACY = (
    "Your file is read in this server's memory and a worker process for this session; it is not saved, and it is "
    "gone when your session ends. Whoever runs this server (its operator) could see it while it is here."
)
NOT_SCORED = "Your own trace: the questions are graded, not scored."


def ms(us: float) -> str:
    return f"{us / 1000:,.2f} ms" if us < 10_000_000 else f"{us / 1e6:,.2f} s"


def percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def card_line(reading: Reading, source: str) -> str:
    card = f"{reading.card} (the trace's deviceProperties)" if reading.card else "a GPU the trace does not name"
    rank = f", rank {reading.rank} of {reading.world_size}" if reading.rank is not None and reading.world_size else ""
    skipped = f"; {reading.skipped:,} events skipped (a field missing or negative)" if reading.skipped else ""
    return f"Card: {card}{rank} · {reading.events:,} events read · source: {source}{skipped}"


def figure_caption(what: str, reading: Reading, settings: dict) -> str:
    """A figure's label: what it is, the trace's card and the file, never this machine's torch (it ran elsewhere)."""
    shown = " · ".join(f"{key} {value}" for key, value in settings.items())
    return f"{what} · {reading.card or 'GPU not named in the trace'} · {shown}"


def split_line(reading: Reading) -> str:
    w = reading.window_us
    dropped = reading.gpu_events - reading.gpu_events_hta
    kept = (
        f" HTA kept {reading.gpu_events_hta:,} of the file's {reading.gpu_events:,} GPU events as it parsed it, "
        "so these shares leave the other "
        f"{dropped:,} out."
        if dropped > 0
        else ""
    )
    return (
        f"HTA's window runs from the first GPU event's start to the last one's end: {ms(w)}. In it the GPU computed "
        f"for {percent(reading.compute_us, w)}, copied, set memory or communicated for "
        f"{percent(reading.non_compute_us, w)} and sat idle for {percent(reading.idle_us, w)}.{kept}"
    )


def idle_line(reading: Reading) -> str:
    if reading.idle_stream is None:
        return "HTA found no GPU stream to split idle time on."
    return (
        f"On stream {reading.idle_stream}, the one with the most GPU time, HTA counts {ms(reading.host_wait_us)} "
        f"idle waiting for the host, {ms(reading.kernel_wait_us)} between kernels and {ms(reading.other_wait_us)} "
        "other."
    )


def launch_line(reading: Reading) -> str:
    if not reading.launches:
        return "HTA matched no kernel to its launch call in this trace (no correlation ids it could join)."
    queue = (
        f" Up to {reading.queue_length_max:.0f} operations were queued on stream {reading.idle_stream} (median "
        f"{reading.queue_length_median:.0f})."
        if reading.queue_length_max is not None
        else ""
    )
    return (
        f"HTA matched {reading.launches:,} launches to their GPU work: the median started "
        f"{ms(reading.launch_delay_median_us)} after its launch call returned, the 95th percentile "
        f"{ms(reading.launch_delay_p95_us)}.{queue}"
    )


def blocking_line(reading: Reading) -> str:
    if not reading.blocking_count:
        return "No blocking call (a synchronize or a synchronous copy) in this trace."
    longest = max(reading.blocking, key=lambda b: b.dur_us)
    where = f"inside {longest.op}" if longest.op else "outside every recorded CPU op"
    return (
        f"{reading.blocking_count:,} blocking calls held the CPU for {ms(reading.blocking_us)} in all; the longest, "
        f"{longest.call} {where}, held it {ms(longest.dur_us)}."
    )


def overlap_line(reading: Reading) -> str | None:
    if not reading.communication_us:
        return None
    if reading.overlap_percent is None:
        return f"Communication kernels ran {ms(reading.communication_us)}; HTA could not compute their overlap."
    return (
        f"Communication kernels ran {ms(reading.communication_us)} (summed over streams); HTA finds "
        f"{reading.overlap_percent:.1f}% of communication time overlapped computation."
    )


def blocking_rows(reading: Reading) -> list[dict]:
    return [
        {
            "#": i + 1,
            "call": b.call,
            "at (ms)": round(b.start_us / 1000, 2),
            "held (ms)": round(b.dur_us / 1000, 3),
            "step": f"{b.step} ({100 * b.step_fraction:.0f}% in)" if b.step and b.step_fraction is not None else "–",
            "inside op": b.op or "–",
            "outermost op": b.outer or "–",
            "GPU work waited for": short(b.waited_for, 32) if b.waited_for else "–",
            "launched by": b.launched_by or "–",
        }
        for i, b in enumerate(reading.blocking)
    ]


def kernel_rows(reading: Reading) -> list[dict]:
    total = sum(k.total_us for k in reading.top_kernels) or 1.0
    return [
        {"kernel": short(k.name, 32), "kind": k.kind, "total (ms)": round(k.total_us / 1000, 3), "count": k.count,
         "share of top 5": f"{100 * k.total_us / total:.0f}%"}
        for k in reading.top_kernels
    ]  # fmt: skip


def activity_rows(reading: Reading) -> list[dict]:
    total = sum(us for _, us in reading.activity) or 1.0
    return [
        {"GPU time (HTA's kernel types)": kind.lower(), "ms": round(us / 1000, 2), "share": f"{100 * us / total:.1f}%"}
        for kind, us in reading.activity
    ]


def short(name: str, limit: int = 60) -> str:
    """A kernel's name without its return type, template arguments and parameters, cut to `limit` characters; a
    copy's or a set's name ("Memcpy HtoD (Pinned -> Device)") as it is."""
    if name.startswith(("Memcpy", "Memset")):
        return name if len(name) <= limit else name[: limit - 1] + "…"
    name = name.removeprefix("void ")
    depth, kept = 0, []
    for char in name:
        if char == "<":
            depth += 1
            if depth == 1:
                kept.append("<…>")
        elif char == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(char)
    text = "".join(kept).split("(")[0] or name
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verdict(reading: Reading) -> tuple[str, str, tuple[str, str]]:
    """What bounds the trace, the remedy to try first, and the lab to try it in: from the time and idle split."""
    bar, cause = questions.bound_key(reading)
    figure = questions.split_values(reading)[bar]
    said = f"{questions.SPLIT[bar]} is the largest part of HTA's window ({percent(figure, reading.window_us)})"
    if bar == "idle":
        idle = reading.host_wait_us + reading.kernel_wait_us + reading.other_wait_us
        waited = reading.host_wait_us if cause == "host" else idle - reading.host_wait_us
        kind = "waiting for the host" if cause == "host" else "between kernels or unattributed"
        said += f", and {percent(waited, idle)} of stream {reading.idle_stream}'s idle time is {kind}"
    return f"{said}. What bounds it: {BOUND_CAUSES[cause]}.", f"First, {REMEDIES[cause]}", LAB_LINKS[cause]


def graded_line(question: Question, grade: Grade) -> str:
    evidence = "right" if grade.evidence_right else f"not it: the evidence is “{question.right_evidence}”"
    cause = "right" if grade.cause_right else f"not it: the answer is “{question.right_cause}”"
    return f"Evidence: {evidence}. Answer: {cause}."


UPLOAD_HELP = (
    "A torch.profiler trace with CUDA or ROCm activity, as export_chrome_trace or tensorboard_trace_handler writes "
    f"it. It is parsed as JSON, not run, up to {loading.MAX_JSON_BYTES // 2**20} MiB once inflated and "
    f"{loading.MAX_EVENTS:,} events."
)
QUESTIONS_TITLE = "Questions an interviewer asks about this trace"
READING_TITLE = "The reading"
VERDICT_TITLE = "What bounds it, and what to try first"


def not_read(name: str, reason: str) -> str:
    return f"{name} was not read: {reason}."


def reading_lines(reading: Reading) -> list[str]:
    lines = [split_line(reading), idle_line(reading), launch_line(reading), blocking_line(reading)]
    overlap = overlap_line(reading)
    return lines + ([overlap] if overlap else [])


def cpu_lines(reading: CpuReading) -> list[str]:
    kinds = ", ".join(f"{n:,} {c or 'uncategorised'}" for c, n in sorted(reading.counts.items())) or "no events"
    lines = [
        f"No GPU kernel, copy or set event in this trace ({kinds}): it was recorded without CUDA activity "
        "(ProfilerActivity.CPU alone, or a job on a CPU), so there is no GPU time to split. Its CPU side is read "
        "instead."
    ]
    if reading.steps:
        lines.append(f"{len(reading.steps)} ProfilerSteps, {reading.step_ms:,.2f} ms each on average.")
    if reading.labels:
        per = "per step" if reading.steps else "in all"
        lines.append(
            f"The record_function labels, in ms {per}: "
            + ", ".join(f"{name[:40]} {value:,.3f}" for name, value in reading.labels[:8])
            + "."
        )
    return lines


def notes_trace(reading: Reading | CpuReading | None, source: str, refusal: str | None) -> str:
    if isinstance(reading, Reading):
        return card_line(reading, source)
    return f"{source}: " + ("no GPU events" if reading is not None else f"not read ({refusal})")


def notes_lines(reading: Reading | CpuReading | None) -> list[str]:
    if isinstance(reading, Reading):
        return reading_lines(reading)
    return cpu_lines(reading) if reading is not None else []
