"""The GPU evidence lab's sentences: each built from a reading's fields, each general fact a Statement.

A sentence about a trace quotes the figure it is built from and says who computed it (HTA, or a
count of the events). What HTA's categories mean, and what the usual remedies do, are said in
Statements with their scope and source; tests/claims/test_evidence.py tries each against the
shipped traces' raw events.
"""

from __future__ import annotations

import explorers.evidence.loading as loading
import explorers.evidence.questions as questions
from explorers import units
from explorers.evidence.cpu import CpuReading
from explorers.evidence.questions import BOUND_CAUSES, Grade, Question
from explorers.evidence.reading import Reading
from explorers.statements import Statement

HTA_DOCS = "https://hta.readthedocs.io/en/latest/source/features"
DOCS = "https://pytorch.org/docs/stable"
STATEMENTS = {
    "idle": Statement(
        text=(
            "HTA splits a stream's idle time three ways: host wait (the next kernel's launch call began after the "
            "previous kernel ended: the queue ran dry), kernel wait (a short gap, under 30 µs by default, between "
            "back-to-back kernels: launch overhead, which fusion or CUDA graphs reduce) and other (idle it cannot "
            "put on the host, such as a kernel held back by an event from another stream)."
        ),
        scope="HolisticTraceAnalysis 0.5.0's get_idle_time_breakdown, per GPU stream, on Kineto traces",
        source=f"{HTA_DOCS}/idle_time_breakdown.html",
    ),
    "sync": Statement(
        text=(
            "`.item()`, `bool(t)` (as in `if t:`), `.cpu()`, `.tolist()`, printing a CUDA tensor and "
            "`torch.cuda.synchronize()` make the CPU "
            "wait until the GPU has done the work queued before them. In a trace the wait is a runtime call that "
            "holds the CPU while the GPU works: a synchronize (cudaStreamSynchronize, cudaDeviceSynchronize), or "
            "the device-to-host copy into pageable memory that `.item()` makes inside aten::_local_scalar_dense."
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
    "deps": ("pages/3_Profiler.py", "Profiler lab: find what the step waits on"),
    "one-time": ("pages/3_Profiler.py", "Profiler lab: warm-up steps, then the profiled ones"),
    "exposed": ("pages/6_DDP.py", "DDP lab: buckets and overlap"),
}
REMEDIES = {
    "compute": "make the largest kernels cheaper, starting from the top of the kernel table: lower precision (bf16 "
    "autocast, TF32 for matmuls), which also halves the bytes a memory-bound kernel moves, and fused kernels "
    "(torch.compile), which remove the round trips between elementwise ones.",
    "compute-pre-ampere": "make the largest kernels cheaper, starting from the top of the kernel table: fp16 autocast "
    "with a GradScaler (this card, compute capability {major}, has no TF32 and no fast bf16), which also halves the "
    "bytes a memory-bound kernel moves, and fused kernels (torch.compile), which remove the round trips between "
    "elementwise ones.",
    "data": "move less: keep tensors on the GPU, pin host memory and copy with non_blocking=True; for exposed "
    "communication, overlap it with compute (DDP's gradient buckets, a pipelined all-to-all) and check for a slow "
    "peer: a collective's kernel time includes waiting for the other ranks.",
    "host": (
        "see what the CPU does while the GPU waits (the CPU rows of the timeline). Launching many short kernels: fuse "
        "or capture them (torch.compile, CUDA graphs) or use a larger batch. Loading data or running Python: overlap "
        "it (DataLoader workers, pinned memory). A synchronize inside the step (.item(), .cpu()): move it out."
    ),
    "deps": "look at what holds queued work back: events and waits between streams, and the peers of a collective "
    "(a slow rank makes every other one wait).",
    "one-time": "read a steady-state step: one gap of {gap} holds {share} of the idle time, a one-time cost (start-up, "
    "a first call's setup) that a later step does not pay. Profile with torch.profiler.schedule(wait=1, warmup=1, "
    "active=3) and read the active steps.",
}
ONE_TIME_SHARE = 0.5  # one gap holding at least this share of the GPU's idle time is read as a one-time cost
UPLOAD_PRIVACY = (
    "Your file is read in this server's memory and a worker process for this session; it is not saved, and it is "
    "gone when your session ends. Whoever runs this server (its operator) could see it while it is here."
)
NOT_SCORED = "Your own trace: the questions are graded, not scored."


def many(n: int, one: str, more: str) -> str:
    return f"{n:,} {one if n == 1 else more}"


def ms(us: float) -> str:
    """A duration in the unit that shows it: µs under a millisecond, ms, then s."""
    if us < 1000:
        return f"{us:,.1f} µs" if us < 10 else f"{us:,.0f} µs"
    return f"{us / 1000:,.2f} ms" if us < 1_000_000 else f"{us / 1e6:,.2f} s"


def percent(part: float, whole: float) -> str:
    return units.percent(part / whole) if whole else "n/a"


def card_line(reading: Reading, source: str) -> str:
    card = f"{reading.card} (the trace's deviceProperties)" if reading.card else "a GPU the trace does not name"
    rank = f", rank {reading.rank} of {reading.world_size}" if reading.rank is not None and reading.world_size else ""
    skipped = f"; {reading.skipped:,} events skipped (a field missing or negative)" if reading.skipped else ""
    return f"Card: {card}{rank} · {reading.events:,} events read · source: {source}{skipped}"


def figure_caption(what: str, reading: Reading, settings: dict) -> str:
    """A figure's label: what it is, the trace's card and the file, never this machine's torch (it ran elsewhere)."""
    shown = " · ".join(f"{key} {value}" for key, value in settings.items())
    return f"{what} · {reading.card or 'GPU not named in the trace'} · {shown}"


def timeline_what(reading: Reading) -> str:
    marks = "" if reading.steps else "; the trace marks no ProfilerStep, so the whole GPU window"
    return f"Timeline (counted from the events{marks})"


def split_line(reading: Reading) -> str:
    w = reading.window_us
    dropped = reading.gpu_events - reading.gpu_events_hta
    notes = []
    if dropped > 0:
        notes.append(
            f"HTA kept {reading.gpu_events_hta:,} of the file's {reading.gpu_events:,} GPU kernels, copies and sets "
            f"as it parsed it: these shares leave the other {dropped:,} out"
        )
    if reading.fractional_times:
        notes.append("this trace times events to fractions of a µs, and HTA counts whole µs")
    if notes:
        raw_w = reading.raw_window_us
        notes.append(
            f"counted from every event at its own resolution, the GPU computed for "
            f"{percent(reading.raw_compute_us, raw_w)} and sat idle for {percent(reading.raw_idle_us, raw_w)} of "
            f"{ms(raw_w)}"
        )
    return (
        f"HTA's window runs from the first GPU kernel, copy or set's start to the last one's end: {ms(w)}. In it the "
        f"GPU computed for {percent(reading.compute_us, w)}, copied, set memory or communicated for "
        f"{percent(reading.non_compute_us, w)} and sat idle for {percent(reading.idle_us, w)}."
        + "".join(f" Note: {note}." for note in notes)
    )


def gap_line(reading: Reading) -> str:
    return (
        f"The longest stretch with no GPU work is {ms(reading.largest_gap_us)}, from "
        f"{ms(reading.largest_gap_start_us)} into the window: {percent(reading.largest_gap_us, reading.raw_idle_us)} "
        "of the idle time (both counted from the events)."
    )


def calls_line(reading: Reading) -> str:
    calls = "; ".join(f"{name} {ms(us)}" + (f" inside {op}" if op else "") for name, us, op in reading.longest_calls)
    return f"The longest runtime calls during the window: {calls}."


def idle_line(reading: Reading) -> str:
    if reading.idle_stream is None:
        return "HTA found no GPU stream to split idle time on."
    return (
        f"On stream {reading.idle_stream}, the one with the most kernels, copies and sets, HTA counts "
        f"{ms(reading.host_wait_us)} of host wait, {ms(reading.kernel_wait_us)} of kernel wait and "
        f"{ms(reading.other_wait_us)} of other idle time (each stream has its own idle time, so this is not the "
        "whole GPU's)."
    )


def launch_line(reading: Reading) -> str:
    if not reading.launches:
        return "No kernel could be joined to its launch call in this trace (no correlation ids to join them by)."
    who = (
        f"HTA matched {many(reading.launches, 'launch', 'launches')} to their GPU work"
        if reading.launch_source == "HTA"
        else f"Joined by correlation id, {many(reading.launches, 'launch', 'launches')} reach their GPU work "
        "(HTA's launch statistics match CUDA's launch calls by name, not this trace's)"
    )
    graphs = (
        f" The trace replays CUDA graphs: {many(reading.graph_launches, 'cudaGraphLaunch', 'cudaGraphLaunches')}"
        f" ran {many(reading.graph_ops, 'GPU event', 'GPU events')}, which HTA's launch figures leave out."
        if reading.graph_launches
        else ""
    )
    queue = (
        f" Up to {many(round(reading.queue_length_max), 'operation was', 'operations were')} queued on stream "
        f"{reading.idle_stream} (median {reading.queue_length_median:.0f})."
        if reading.queue_length_max is not None
        else ""
    )
    return (
        f"{who}: the median started {ms(reading.launch_delay_median_us)} after its launch call returned, the 95th "
        f"percentile {ms(reading.launch_delay_p95_us)}.{graphs}{queue}"
    )


def blocking_line(reading: Reading) -> str:
    if not reading.blocking_count:
        return "No blocking call (a synchronize, or a copy that held the CPU while the GPU copied) in this trace."
    return (
        f"{many(reading.blocking_count, 'blocking call', 'blocking calls')} held the CPU for "
        f"{ms(reading.blocking_us)} in all."
    )


def longest_blocking_line(reading: Reading) -> str:
    longest = max(reading.blocking, key=lambda b: b.dur_us)
    where = f"inside {longest.op}" if longest.op else "outside every recorded CPU op"
    return f"The longest blocking call, {longest.call} {where}, held the CPU for {ms(longest.dur_us)}."


def overlap_line(reading: Reading) -> str | None:
    if not reading.communication_us:
        return None
    total = f"Communication kernels ran {ms(reading.communication_us)} (summed over streams; a collective's kernel"
    total += " time includes waiting for the other ranks)"
    if reading.overlap_percent is None:
        return f"{total}; HTA could not compute their overlap."
    kept = " of the communication time it kept" if reading.gpu_events_hta < reading.gpu_events else ""
    return f"{total}; HTA finds {reading.overlap_percent:.1f}%{kept} overlapped computation."


def blocking_caption(reading: Reading) -> str:
    shown = len(reading.blocking)
    if shown == reading.blocking_count:
        return f"Every blocking call, in time order ({shown})."
    return f"The longest {shown} of the {reading.blocking_count:,} blocking calls, in time order."


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
    """A kernel's name without its return type, parameters and most of its template arguments (the first few
    characters stay, so two instances tell apart), cut to `limit` characters; a copy's or a set's name ("Memcpy
    HtoD (Pinned -> Device)") as it is."""
    if name.startswith(("Memcpy", "Memset")):
        return name if len(name) <= limit else name[: limit - 1] + "…"
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    depth, kept, template = 0, [], []
    for char in name:
        if char == "(" and depth == 0:
            break  # the parameter list
        if char == "<":
            depth += 1
            if depth == 1:
                template = []
                continue
        elif char == ">":
            depth = max(depth - 1, 0)
            if depth == 0:
                first = "".join(template)
                kept.append(f"<{first[:TEMPLATE_CHARS]}…>" if len(first) > TEMPLATE_CHARS else f"<{first}>")
                continue
        (template if depth else kept).append(char)
    text = "".join(kept) or name
    return text if len(text) <= limit else text[: limit - 1] + "…"


TEMPLATE_CHARS = 12


def verdict(reading: Reading) -> tuple[str, str, tuple[str, str]]:
    """What bounds the trace, the remedy to try first, and the lab to try it in: from the time and idle split."""
    bar, cause = questions.bound_key(reading)
    figure = questions.split_values(reading)[bar]
    said = f"{questions.SPLIT[bar]} is the largest part of HTA's window ({percent(figure, reading.window_us)})"
    if bar == "idle":
        idle = reading.host_wait_us + reading.kernel_wait_us + reading.other_wait_us
        host = reading.host_wait_us + reading.kernel_wait_us
        waited, kind = (host, "host or kernel wait") if cause == "host" else (reading.other_wait_us, "other")
        said += f", and HTA puts {percent(waited, idle)} of stream {reading.idle_stream}'s idle time down to {kind}"
    said = f"{said}. What bounds it: {BOUND_CAUSES[cause]}."
    if bar == "idle" and reading.largest_gap_us >= ONE_TIME_SHARE * reading.raw_idle_us:
        share = percent(reading.largest_gap_us, reading.raw_idle_us)
        remedy = REMEDIES["one-time"].format(gap=ms(reading.largest_gap_us), share=share)
        return f"{said} {calls_line(reading)}", f"First, {remedy}", LAB_LINKS["one-time"]
    if cause == "compute" and reading.top_kernels:
        top = reading.top_kernels[0]
        said += f" The largest kernel by total time is {short(top.name)} ({top.kind}, {ms(top.total_us)})."
    if cause == "compute" and reading.compute_major is not None and reading.compute_major < 8:
        return said, f"First, {REMEDIES['compute-pre-ampere'].format(major=reading.compute_major)}", LAB_LINKS[cause]
    return said, f"First, {REMEDIES[cause]}", LAB_LINKS[cause]


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


TRACE_HELD = "Your file is read in place of a trace: remove it (× beside its name) to choose one again."


def not_read(name: str, reason: str, shown: str) -> str:
    return f"{name} was not read: {reason}. Below: {shown}."


def reading_lines(reading: Reading) -> list[str]:
    lines = [split_line(reading), gap_line(reading), idle_line(reading), launch_line(reading), blocking_line(reading)]
    lines += [calls_line(reading)] if reading.longest_calls else []
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


def notes_trace(reading: Reading | CpuReading, source: str) -> str:
    return card_line(reading, source) if isinstance(reading, Reading) else f"{source}: no GPU events"


def notes_lines(reading: Reading | CpuReading) -> list[str]:
    return reading_lines(reading) if isinstance(reading, Reading) else cpu_lines(reading)
