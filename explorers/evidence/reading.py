"""What an engineer reads first in a GPU trace, each figure from HolisticTraceAnalysis or counted from the events.

HolisticTraceAnalysis (HTA, the field's own tool) computes the time split, the idle split, the
activity shares, kernel launch delays, queue lengths and the communication overlap. It reads a
trace from a file and keys it by rank, so the cleaned events (explorers/evidence/loading.py) are
written to a private temporary file first, as rank 0 where the trace records none, without the
GPU-side sync markers (`cuda_sync`: "Stream Sync", "Context Sync"), which HTA would count as GPU
work. HTA has no figure for these, so they are counted here from the events:

- the top kernels by total time (HTA's kernel table folds all but the top few into "others");
- blocking calls: the runtime calls that hold the CPU while the GPU works: a synchronize
  (`SYNCHRONIZE`), or a copy call whose GPU copy (joined by correlation id) begins before the call
  returns, as a copy to or from pageable memory does. For each: where in the step it falls, the
  innermost CPU op around it on its thread (by nesting), and the GPU work it waited for with the op
  that launched it (joined through correlation ids, which the trace's flow events also carry);
- launch delays where HTA finds none (its launch statistics match CUDA's launch calls by name, not
  ROCm's hipLaunchKernel): joined by correlation id instead;
- the largest idle gap on the GPU, which tells a one-time cost from a steady one;
- one step's timeline.

`read(trace)` returns a `Reading` of plain numbers and names: the page, the questions and the
notebook all use it, and tests/claims/test_evidence.py recounts every figure from the raw JSON.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import math
import statistics
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from explorers.evidence.loading import GPU_CATEGORIES, Trace

SYNCHRONIZE = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
})  # fmt: skip
# Copy calls: blocking when their GPU copy begins before the call returns (cudaMemcpy; an Async one to or from
# pageable memory, staged piece by piece through a pinned buffer)
COPY_CALLS = frozenset({"cudaMemcpy", "cudaMemcpyAsync", "hipMemcpy", "hipMemcpyAsync", "hipMemcpyWithStream"})
CPU_OPS = frozenset({"cpu_op"})
CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
STEP_PREFIX = "ProfilerStep#"
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "hipGraphLaunch"})
LONGEST_CALLS = 3
MAX_SPANS = 1_500  # the timeline's bars: the longest are kept when a step has more
TOP_KERNELS = 5
MAX_BLOCKING_SHOWN = 8


@dataclass(frozen=True)
class Kernel:
    name: str
    kind: str  # "computation", "communication" or "memory"
    total_us: float
    count: int


@dataclass(frozen=True)
class Blocking:
    call: str  # the runtime call, e.g. cudaStreamSynchronize or cudaMemcpyAsync
    start_us: float  # from the window's start
    dur_us: float
    step: str | None  # the ProfilerStep it falls in
    step_fraction: float | None  # how far into that step it began (0 to 1)
    op: str | None  # the innermost CPU op (cpu_op) around it on its thread
    outer: str | None  # the outermost op or record_function label around it
    waited_for: str | None  # the GPU work that ended last while it held the CPU (for a copy: its own copy)
    launched_by: str | None  # the CPU op that launched that work


@dataclass(frozen=True)
class Span:
    row: str
    start_us: float  # from the timeline's start
    dur_us: float
    name: str
    kind: str  # "cpu op", "runtime", "blocking", "computation", "communication", "memory"


@dataclass(frozen=True)
class Reading:
    cards: tuple[str, ...]
    compute_major: int | None
    rank: int | None
    world_size: int | None
    events: int
    skipped: int
    steps: tuple[str, ...]
    # HTA's temporal breakdown, over its window: the first GPU kernel, copy or set's start to the last one's end
    window_us: float
    gpu_events: int  # the file's kernels, copies and sets
    gpu_events_hta: int  # of them, those HTA kept as it parsed (it drops some: the page says how many)
    fractional_times: bool  # times with fractions of a µs, which HTA counts in whole µs
    # the same split counted from every GPU event at its own resolution (shown where HTA dropped or rounded)
    raw_window_us: float
    raw_compute_us: float
    raw_idle_us: float
    compute_us: float
    non_compute_us: float
    idle_us: float
    largest_gap_us: float  # the longest stretch with no GPU work, counted from the events
    largest_gap_start_us: float  # from the window's start
    # HTA's idle-time breakdown on the stream with the most kernels, copies and sets
    idle_stream: int | None
    host_wait_us: float
    kernel_wait_us: float
    other_wait_us: float
    # HTA's kernel breakdown by type, summed over streams (rows as HTA names them, "X overlapping Y" included)
    activity: tuple[tuple[str, float], ...]
    top_kernels: tuple[Kernel, ...]
    # kernel start minus its launch call's end, in microseconds: HTA's, or counted by correlation id
    launch_source: str  # "HTA" or "correlation"
    launches: int
    launch_delay_median_us: float | None
    launch_delay_p95_us: float | None
    graph_launches: int  # cudaGraphLaunch calls: work replayed from CUDA graphs, which HTA's launch figures omit
    graph_ops: int  # the GPU kernels, copies and sets those replays ran (joined by correlation id)
    longest_calls: tuple[tuple[str, float, str | None], ...]  # the longest runtime calls: (name, µs, op around it)
    queue_length_max: float | None  # HTA's queue length summary on the idle split's stream
    queue_length_median: float | None
    blocking: tuple[Blocking, ...]  # the longest, in time order
    blocking_count: int
    blocking_us: float
    communication_us: float  # NCCL/RCCL kernel time, summed over streams
    overlap_percent: float | None  # HTA: the share of communication time that overlapped computation
    timeline: tuple[Span, ...]
    timeline_title: str
    timeline_us: float

    @property
    def card(self) -> str | None:
        return self.cards[0] if self.cards else None


def kind_of(event: dict) -> str:
    if event["cat"] in ("gpu_memcpy", "gpu_memset"):
        return "memory"
    return "communication" if is_communication(event["name"]) else "computation"


def is_communication(name: str) -> bool:
    lowered = name.lower()
    return "nccl" in lowered or "rccl" in lowered


def read(trace: Trace) -> Reading:
    """The reading of one cleaned trace (HTA on a private temporary copy, and counts from its events)."""
    events = trace.events
    gpu = [e for e in events if e["ph"] == "X" and e["cat"] in GPU_CATEGORIES]
    window_start = min(e["ts"] for e in gpu)
    hta = _hta(trace)
    steps = sorted((e for e in events if e["ph"] == "X" and e["name"].startswith(STEP_PREFIX)), key=lambda e: e["ts"])
    steps = [s for s in steps if s["cat"] in CPU_CATEGORIES] or steps  # a step's CPU mark (its GPU copy repeats it)
    blocking = _blocking(events, gpu, steps, window_start)
    longest = sorted((b for _, b in blocking), key=lambda b: -b.dur_us)[:MAX_BLOCKING_SHOWN]
    shown = sorted(longest, key=lambda b: b.start_us)
    gap, gap_start = _largest_gap(gpu)
    raw = _raw_split(gpu)
    graphs = {_correlation(e) for e in events if e["name"] in GRAPH_LAUNCHES and _correlation(e) is not None}
    timeline, title, length = _timeline(events, steps, gpu, {id(call) for call, _ in blocking})
    if not hta["launches"]:
        hta.update(_launches_by_correlation(events, gpu))
    return Reading(
        cards=trace.cards,
        compute_major=trace.compute_major,
        rank=trace.rank,
        world_size=trace.world_size,
        events=len(events),
        skipped=trace.skipped,
        steps=tuple(dict.fromkeys(e["name"] for e in steps)),
        gpu_events=len(gpu),
        fractional_times=any(e["ts"] % 1 or e["dur"] % 1 for e in gpu),
        largest_gap_us=gap,
        largest_gap_start_us=gap_start - window_start,
        top_kernels=_top_kernels(gpu),
        graph_launches=sum(e["name"] in GRAPH_LAUNCHES for e in events),
        graph_ops=sum(_correlation(e) in graphs for e in gpu) if graphs else 0,
        longest_calls=_longest_calls(events, window_start, window_start + raw["raw_window_us"]),
        **raw,
        blocking=tuple(shown),
        blocking_count=len(blocking),
        blocking_us=sum(b.dur_us for _, b in blocking),
        communication_us=sum(e["dur"] for e in gpu if e["cat"] == "kernel" and is_communication(e["name"])),
        timeline=timeline,
        timeline_title=title,
        timeline_us=length,
        **hta,
    )


def _hta(trace: Trace) -> dict:
    """HTA's figures for the trace, as rank 0 or its own rank (HTA reads a file and keys traces by rank)."""
    from hta.trace_analysis import TraceAnalysis

    rank = trace.rank or 0
    document = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, "name": name} for i, name in enumerate(trace.cards)],
        "distributedInfo": {"rank": rank},
        "traceEvents": [e for e in trace.events if e["cat"] != "cuda_sync"],
    }
    with tempfile.TemporaryDirectory(prefix="evidence-") as folder, _quiet():
        path = Path(folder) / "trace.json"
        path.write_text(json.dumps(document))
        # one rank: HTA parses it in this process (its process pool is for several)
        analysis = TraceAnalysis(trace_files={rank: str(path)}, trace_dir=folder, include_last_profiler_step=True)
        temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
        idle = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]
        kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
        # Launch statistics, queue lengths and overlap are each left out (None) where HTA cannot compute them for
        # this trace (it asserts, e.g., one runtime call per kernel when it counts queue lengths)
        launches = _optional(lambda: analysis.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False).get(rank))
        queues = _optional(lambda: analysis.get_queue_length_summary(ranks=[rank]))
        overlap = _optional(lambda: analysis.get_comm_comp_overlap(visualize=False))
        frame = analysis.t.get_trace(rank)
    stream = _main_stream(frame)
    own = idle[idle["stream"] == stream].set_index("idle_category")["idle_time"] if stream is not None else {}
    delays = sorted(launches["launch_delay"].tolist()) if launches is not None and len(launches) else []
    queue = _queue(queues, stream)
    overlap_value = math.nan
    if overlap is not None and len(overlap):
        overlap_value = float(overlap["comp_comm_overlap_pctg"].iloc[0])
    return {
        "window_us": float(temporal["kernel_time(us)"]),
        "gpu_events_hta": int((frame["stream"] >= 0).sum()),
        "compute_us": float(temporal["compute_time(us)"]),
        "non_compute_us": float(temporal["non_compute_time(us)"]),
        "idle_us": float(temporal["idle_time(us)"]),
        "idle_stream": stream,
        "host_wait_us": float(own.get("host_wait", 0.0)),
        "kernel_wait_us": float(own.get("kernel_wait", 0.0)),
        "other_wait_us": float(own.get("other", 0.0)),
        "activity": tuple((str(row.kernel_type), float(row.sum)) for row in kinds.itertuples()),
        "launch_source": "HTA",
        "launches": len(delays),
        **_percentiles(delays),
        "queue_length_max": queue[0],
        "queue_length_median": queue[1],
        "overlap_percent": None if math.isnan(overlap_value) else overlap_value,
    }


def _optional(analysis):
    try:
        return analysis()
    except Exception:  # noqa: BLE001 - HTA's asserts and pandas errors on a trace it cannot read this way
        return None


class _quiet:
    """HTA prints progress through logging and warns on empty divisions: neither is the reader's business."""

    def __enter__(self):
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")
        self._level = logging.root.manager.disable
        logging.disable(logging.WARNING)

    def __exit__(self, *exc):
        logging.disable(self._level)
        self._warnings.__exit__(*exc)


def _main_stream(frame) -> int | None:
    """The stream with the most kernels, copies and sets (a long collective on a side stream can hold more time)."""
    gpu = frame[frame["stream"] >= 0]
    if not len(gpu):
        return None
    counts = gpu.groupby("stream").size()
    return int(counts.idxmax())


def _queue(queues, stream: int | None) -> tuple[float | None, float | None]:
    if queues is None or stream is None:
        return None, None
    rows = queues["queue_length"].reset_index()  # HTA's columns: ("queue_length", "max"), ...; index (rank, stream)
    rows = rows[rows["stream"] == stream]
    if not len(rows):
        return None, None
    return float(rows["max"].iloc[0]), float(rows["50%"].iloc[0])


def _percentiles(delays: list[float]) -> dict:
    if not delays:
        return {"launch_delay_median_us": None, "launch_delay_p95_us": None}
    return {
        "launch_delay_median_us": statistics.median(delays),
        "launch_delay_p95_us": delays[min(len(delays) - 1, math.ceil(0.95 * len(delays)) - 1)],
    }


def _launches_by_correlation(events, gpu: list[dict]) -> dict:
    """Launch delays where HTA found none: each GPU event's start minus the end of the runtime call with its
    correlation id."""
    calls = {_correlation(e): e for e in events if e["ph"] == "X" and e["cat"] in RUNTIME_CATEGORIES}
    delays = sorted(
        work["ts"] - (call["ts"] + call["dur"])
        for work in gpu
        if (call := calls.get(_correlation(work))) is not None and _correlation(work) is not None
    )
    return {"launch_source": "correlation", "launches": len(delays), **_percentiles(delays)} if delays else {}


def _merged(spans) -> list[list[float]]:
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _raw_split(gpu: list[dict]) -> dict:
    """The time split from every GPU event at the trace's own resolution, as HTA defines it: computation is NCCL-free
    kernels, the window runs from the first event's start to the last one's end."""
    busy = _merged((e["ts"], e["ts"] + e["dur"]) for e in gpu)
    compute = _merged(
        (e["ts"], e["ts"] + e["dur"]) for e in gpu if e["cat"] == "kernel" and not is_communication(e["name"])
    )
    window = busy[-1][1] - busy[0][0]
    return {
        "raw_window_us": window,
        "raw_compute_us": sum(end - start for start, end in compute),
        "raw_idle_us": window - sum(end - start for start, end in busy),
    }


def _longest_calls(events, start: float, end: float) -> tuple[tuple[str, float, str | None], ...]:
    """The longest runtime calls during the GPU window (a cudaFree or a first launch can hold the CPU for seconds),
    each with the innermost CPU op around it."""
    during = (
        e
        for e in events
        if e["ph"] == "X" and e["cat"] in RUNTIME_CATEGORIES and e["ts"] < end and e["ts"] + e["dur"] > start
    )
    calls = sorted(during, key=lambda e: -e["dur"])[:LONGEST_CALLS]
    around = _enclosing_ops(events, calls)
    return tuple((c["name"], c["dur"], around.get(id(c), (None, None))[0]) for c in calls)


def _largest_gap(gpu: list[dict]) -> tuple[float, float]:
    """The longest stretch between the first and the last GPU work with nothing running, and where it starts."""
    best, start, reach = 0.0, gpu[0]["ts"], -math.inf
    for e in sorted(gpu, key=lambda e: e["ts"]):
        if reach > -math.inf and e["ts"] - reach > best:
            best, start = e["ts"] - reach, reach
        reach = max(reach, e["ts"] + e["dur"])
    return best, start


def _top_kernels(gpu: list[dict]) -> tuple[Kernel, ...]:
    totals: dict[str, list] = {}
    for event in gpu:
        entry = totals.setdefault(event["name"], [kind_of(event), 0.0, 0])
        entry[1] += event["dur"]
        entry[2] += 1
    ranked = sorted(totals.items(), key=lambda item: (-item[1][1], item[0]))[:TOP_KERNELS]
    return tuple(Kernel(name, kind, total, count) for name, (kind, total, count) in ranked)


def blocking_calls(events, gpu: list[dict]) -> list[dict]:
    """The runtime calls that held the CPU while GPU work ran: synchronizes, and copy calls whose GPU copy began
    before the call returned (a pageable copy returns only once its last piece is staged)."""
    copies = {_correlation(e): e for e in gpu if e["cat"] == "gpu_memcpy" and _correlation(e) is not None}
    found = []
    for e in events:
        if e["ph"] != "X" or e["cat"] not in RUNTIME_CATEGORIES:
            continue
        if e["name"] in SYNCHRONIZE:
            found.append(e)
        elif e["name"] in COPY_CALLS and (copy := copies.get(_correlation(e))) is not None:
            held = copy["ts"] < e["ts"] + e["dur"]  # the GPU was copying while the call still held the CPU
            found += [e] if held else []
    return found


def _blocking(events, gpu: list[dict], steps: list[dict], window_start: float) -> list[tuple[dict, Blocking]]:
    calls = blocking_calls(events, gpu)
    if not calls:
        return []
    around = _enclosing_ops(events, calls)
    launcher = _launching_ops(events)
    copies = {_correlation(e): e for e in gpu if e["cat"] == "gpu_memcpy" and _correlation(e) is not None}
    by_end = sorted(gpu, key=lambda e: e["ts"] + e["dur"])
    ends = [e["ts"] + e["dur"] for e in by_end]
    step_starts = [s["ts"] for s in steps]
    found = []
    for call in calls:
        inner, outer = around.get(id(call), (None, None))
        waited = copies.get(_correlation(call)) if call["name"] in COPY_CALLS else None
        if waited is None:
            last = bisect.bisect_right(ends, call["ts"] + call["dur"]) - 1
            waited = by_end[last] if last >= 0 and ends[last] >= call["ts"] else None
        index = bisect.bisect_right(step_starts, call["ts"]) - 1
        step = steps[index] if index >= 0 and call["ts"] < steps[index]["ts"] + steps[index]["dur"] else None
        found.append((call, Blocking(
            call=call["name"],
            start_us=call["ts"] - window_start,
            dur_us=call["dur"],
            step=step["name"] if step else None,
            step_fraction=(call["ts"] - step["ts"]) / step["dur"] if step and step["dur"] else None,
            op=inner,
            outer=outer,
            waited_for=waited["name"] if waited else None,
            launched_by=launcher.get(_correlation(waited)) if waited else None,
        )))  # fmt: skip
    return found


def _enclosing_ops(events, targets: list[dict]) -> dict[int, tuple[str | None, str | None]]:
    """For each target event, the innermost CPU op (cpu_op) and the outermost op or label around it on its thread."""
    wanted = {id(t) for t in targets}
    by_thread: dict[tuple, list[dict]] = {}
    for e in events:
        if e["ph"] == "X" and (e["cat"] in CPU_CATEGORIES or id(e) in wanted):
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    found = {}
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"], id(e) in wanted))
        stack: list[dict] = []
        for e in thread:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if id(e) in wanted:
                around = [s for s in stack if not s["name"].startswith(STEP_PREFIX)]
                ops = [s for s in around if s["cat"] in CPU_OPS]
                found[id(e)] = (ops[-1]["name"] if ops else None, around[0]["name"] if around else None)
            else:
                stack.append(e)
    return found


def _correlation(event: dict | None):
    return (event or {}).get("args", {}).get("correlation")


def _launching_ops(events) -> dict:
    """correlation id -> the innermost CPU op around the runtime call that launched it."""
    launches = [e for e in events if e["ph"] == "X" and e["cat"] in RUNTIME_CATEGORIES and _correlation(e) is not None]
    around = _enclosing_ops(events, launches)
    return {_correlation(e): around.get(id(e), (None, None))[0] for e in launches}


def _timeline(events, steps: list[dict], gpu: list[dict], blocking: set[int]) -> tuple[tuple[Span, ...], str, float]:
    """One step (of the steps with GPU work in them, the one of median length) or the whole GPU window."""
    by_start = sorted(gpu, key=lambda e: e["ts"])
    starts = [e["ts"] for e in by_start]
    reach = list(itertools.accumulate((e["ts"] + e["dur"] for e in by_start), max))  # the latest end so far

    def has_gpu_work(s: dict) -> bool:  # some GPU event starts before the step ends and ends after it starts
        before_end = bisect.bisect_left(starts, s["ts"] + s["dur"])
        return before_end > 0 and reach[before_end - 1] > s["ts"]

    busy = [s for s in steps if has_gpu_work(s)]
    if busy:
        step = sorted(busy, key=lambda s: (s["dur"], s["ts"]))[(len(busy) - 1) // 2]
        start, end, title = step["ts"], step["ts"] + step["dur"], f"{step['name']} ({len(steps)} steps)"
    else:
        start = min(e["ts"] for e in gpu)
        end = max(e["ts"] + e["dur"] for e in gpu)
        title = "the whole GPU window"
    spans = []
    by_thread = _rows(events, start, end)
    # CPU threads numbered by how much they hold (the trace's thread ids are long numbers that say nothing)
    cpu = [t for t, rows in by_thread.items() if any(e["cat"] not in GPU_CATEGORIES for e in rows)]
    number = {t: n for n, t in enumerate(sorted(cpu, key=lambda t: -len(by_thread[t])), 1)}
    for thread, rows in by_thread.items():
        for e in rows:
            if e["cat"] in GPU_CATEGORIES:
                kind, row = kind_of(e), f"GPU stream {e.get('args', {}).get('stream', e['tid'])}"
            elif e["cat"] in RUNTIME_CATEGORIES:
                kind, row = ("blocking" if id(e) in blocking else "runtime"), f"Thread {number[thread]} calls"
            else:
                kind, row = "cpu op", f"Thread {number[thread]} ops"
            first, last = max(e["ts"], start), min(e["ts"] + e["dur"], end)
            spans.append(Span(row, first - start, max(last - first, 0.0), e["name"], kind))
    if len(spans) > MAX_SPANS:
        spans = sorted(spans, key=lambda s: -s.dur_us)[:MAX_SPANS]
    return tuple(sorted(spans, key=lambda s: (s.row, s.start_us))), title, end - start


def _rows(events, start: float, end: float) -> dict[str, list[dict]]:
    """The events inside [start, end] by thread: CPU ops at their top level, runtime calls, GPU work."""
    by_thread: dict[str, list[dict]] = {}
    for e in events:
        if e["ph"] != "X" or e["ts"] >= end or e["ts"] + e["dur"] <= start or e["name"].startswith(STEP_PREFIX):
            continue
        if e["cat"] in CPU_CATEGORIES | RUNTIME_CATEGORIES | GPU_CATEGORIES:
            by_thread.setdefault(str(e["tid"]), []).append(e)
    for thread, rows in by_thread.items():
        rows.sort(key=lambda e: (e["ts"], -e["dur"]))
        kept, reach = [], -math.inf
        for e in rows:  # a CPU op inside another shown one is left to the trace viewer
            if e["cat"] in CPU_CATEGORIES:
                if e["ts"] < reach:
                    continue
                reach = e["ts"] + e["dur"]
            kept.append(e)
        by_thread[thread] = kept
    return by_thread
