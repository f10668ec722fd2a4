"""What an engineer reads first in a GPU trace, each figure from HolisticTraceAnalysis or counted from the events.

HolisticTraceAnalysis (HTA, the field's own tool) computes the time split, the idle split, the
activity shares, kernel launch delays, queue lengths and the communication overlap. It reads a
trace from a file and keys it by rank, so the cleaned events (explorers/evidence/loading.py) are
written to a private temporary file first, as rank 0 where the trace records none. HTA has no
figure for these, so they are counted here from the events:

- the top kernels by total time (HTA's kernel table folds all but the top few into "others");
- blocking calls: the runtime calls that hold the CPU until the GPU is done (`BLOCKING`), where in
  the step each falls, the CPU op around it (found by nesting on its thread) and the GPU work it
  waited for (the GPU event that ended last while it held the CPU, and the op that launched that
  work, joined through the trace's correlation ids, which its flow events also carry);
- one step's timeline.

`read(trace)` returns a `Reading` of plain numbers and names: the page, the questions and the
notebook all use it, and tests/claims/test_evidence.py recounts every figure from the raw JSON.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import statistics
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from explorers.evidence.loading import GPU_CATEGORIES, Trace

# Calls that return only when the GPU has finished the work they wait for (CUDA's and ROCm's names). A
# cudaMemcpyAsync into pageable host memory can block too; it is not counted, as the trace cannot say which did.
BLOCKING = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream",
})  # fmt: skip
CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
STEP_PREFIX = "ProfilerStep#"
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
    call: str  # the runtime call, e.g. cudaStreamSynchronize
    start_us: float  # from the window's start
    dur_us: float
    step: str | None  # the ProfilerStep it falls in
    step_fraction: float | None  # how far into that step it began (0 to 1)
    op: str | None  # the innermost CPU op around it on its thread
    outer: str | None  # the outermost one (a module, an annotation, the step's own code)
    waited_for: str | None  # the GPU work that ended last while it held the CPU
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
    rank: int | None
    world_size: int | None
    events: int
    skipped: int
    steps: tuple[str, ...]
    # HTA's temporal breakdown, over its window: the first GPU kernel's start to the last one's end
    window_us: float
    gpu_events: int  # the file's GPU-side spans (kernels, copies, sets, sync markers on a stream)
    gpu_events_hta: int  # of them, those HTA kept as it parsed (it drops some: the page says how many)
    compute_us: float
    non_compute_us: float
    idle_us: float
    # HTA's idle-time breakdown on the stream with the most GPU time
    idle_stream: int | None
    host_wait_us: float
    kernel_wait_us: float
    other_wait_us: float
    # HTA's kernel breakdown by type, summed over streams (rows as HTA names them, "X overlapping Y" included)
    activity: tuple[tuple[str, float], ...]
    top_kernels: tuple[Kernel, ...]
    # HTA's launch statistics: kernel start minus its launch call's end, in microseconds
    launches: int
    launch_delay_median_us: float | None
    launch_delay_p95_us: float | None
    queue_length_max: float | None  # HTA's queue length summary on the busiest stream
    queue_length_median: float | None
    blocking: tuple[Blocking, ...]  # the longest, in time order
    blocking_count: int
    blocking_us: float
    communication_us: float  # NCCL/RCCL kernel time
    overlap_percent: float | None  # HTA: the share of communication time that overlapped computation
    timeline: tuple[Span, ...]
    timeline_title: str
    timeline_us: float

    @property
    def card(self) -> str | None:
        return self.cards[0] if self.cards else None

    @property
    def busy_us(self) -> float:
        return self.compute_us + self.non_compute_us


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
    blocking = _blocking(events, gpu, steps, window_start)
    shown = sorted(sorted(blocking, key=lambda b: -b.dur_us)[:MAX_BLOCKING_SHOWN], key=lambda b: b.start_us)
    timeline, title, length = _timeline(events, steps, gpu)
    return Reading(
        cards=trace.cards,
        rank=trace.rank,
        world_size=trace.world_size,
        events=len(events),
        skipped=trace.skipped,
        steps=tuple(dict.fromkeys(e["name"] for e in steps)),
        top_kernels=_top_kernels(gpu),
        blocking=tuple(shown),
        blocking_count=len(blocking),
        blocking_us=sum(b.dur_us for b in blocking),
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
        "traceEvents": list(trace.events),
    }
    with tempfile.TemporaryDirectory(prefix="evidence-") as folder, _quiet():
        path = Path(folder) / "trace.json"
        path.write_text(json.dumps(document))
        analysis = TraceAnalysis(trace_files={rank: str(path)}, trace_dir=folder, include_last_profiler_step=True)
        temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
        idle = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]
        kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
        launches = analysis.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False).get(rank)
        queues = analysis.get_queue_length_summary(ranks=[rank])
        overlap = analysis.get_comm_comp_overlap(visualize=False)
        frame = analysis.t.get_trace(rank)
    busiest = _busiest_stream(frame)
    on_streams = [e for e in trace.events if e["ph"] == "X" and "stream" in e.get("args", {})]
    gpu_events = sum(e["cat"] in GPU_CATEGORIES | {"cuda_sync"} for e in on_streams)
    own = idle[idle["stream"] == busiest].set_index("idle_category")["idle_time"] if busiest is not None else {}
    delays = sorted(launches["launch_delay"].tolist()) if launches is not None and len(launches) else []
    queue = _queue(queues, busiest)
    overlap_value = float(overlap["comp_comm_overlap_pctg"].iloc[0]) if len(overlap) else math.nan
    return {
        "window_us": float(temporal["kernel_time(us)"]),
        "gpu_events": gpu_events,
        "gpu_events_hta": int((frame["stream"] >= 0).sum()),
        "compute_us": float(temporal["compute_time(us)"]),
        "non_compute_us": float(temporal["non_compute_time(us)"]),
        "idle_us": float(temporal["idle_time(us)"]),
        "idle_stream": busiest,
        "host_wait_us": float(own.get("host_wait", 0.0)),
        "kernel_wait_us": float(own.get("kernel_wait", 0.0)),
        "other_wait_us": float(own.get("other", 0.0)),
        "activity": tuple((str(row.kernel_type), float(row.sum)) for row in kinds.itertuples()),
        "launches": len(delays),
        "launch_delay_median_us": statistics.median(delays) if delays else None,
        "launch_delay_p95_us": delays[min(len(delays) - 1, math.ceil(0.95 * len(delays)) - 1)] if delays else None,
        "queue_length_max": queue[0],
        "queue_length_median": queue[1],
        "overlap_percent": None if math.isnan(overlap_value) else overlap_value,
    }


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


def _busiest_stream(frame) -> int | None:
    gpu = frame[frame["stream"] >= 0]
    if not len(gpu):
        return None
    return int(gpu.groupby("stream")["dur"].sum().idxmax())


def _queue(queues, stream: int | None) -> tuple[float | None, float | None]:
    if queues is None or stream is None:
        return None, None
    rows = queues["queue_length"].reset_index()  # HTA's columns: ("queue_length", "max"), ...; index (rank, stream)
    rows = rows[rows["stream"] == stream]
    if not len(rows):
        return None, None
    return float(rows["max"].iloc[0]), float(rows["50%"].iloc[0])


def _top_kernels(gpu: list[dict]) -> tuple[Kernel, ...]:
    totals: dict[str, list] = {}
    for event in gpu:
        entry = totals.setdefault(event["name"], [kind_of(event), 0.0, 0])
        entry[1] += event["dur"]
        entry[2] += 1
    ranked = sorted(totals.items(), key=lambda item: (-item[1][1], item[0]))[:TOP_KERNELS]
    return tuple(Kernel(name, kind, total, count) for name, (kind, total, count) in ranked)


def _blocking(events, gpu: list[dict], steps: list[dict], window_start: float) -> list[Blocking]:
    calls = [e for e in events if e["ph"] == "X" and e["cat"] in RUNTIME_CATEGORIES and e["name"] in BLOCKING]
    if not calls:
        return []
    around = _enclosing_ops(events, calls)
    launcher = _launching_ops(events)
    by_end = sorted(gpu, key=lambda e: e["ts"] + e["dur"])
    ends = [e["ts"] + e["dur"] for e in by_end]
    step_starts = [s["ts"] for s in steps]
    found = []
    for call in calls:
        inner, outer = around.get(id(call), (None, None))
        last = bisect.bisect_right(ends, call["ts"] + call["dur"]) - 1
        waited = by_end[last] if last >= 0 and ends[last] >= call["ts"] else None
        index = bisect.bisect_right(step_starts, call["ts"]) - 1
        step = steps[index] if index >= 0 and call["ts"] < steps[index]["ts"] + steps[index]["dur"] else None
        found.append(
            Blocking(
                call=call["name"],
                start_us=call["ts"] - window_start,
                dur_us=call["dur"],
                step=step["name"] if step else None,
                step_fraction=(call["ts"] - step["ts"]) / step["dur"] if step and step["dur"] else None,
                op=inner,
                outer=outer,
                waited_for=waited["name"] if waited else None,
                launched_by=launcher.get(_correlation(waited)) if waited else None,
            )
        )
    return found


def _enclosing_ops(events, targets: list[dict]) -> dict[int, tuple[str | None, str | None]]:
    """For each target event, the innermost and outermost CPU op that contains it on its thread (a stack sweep)."""
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
                ops = [s for s in stack if not s["name"].startswith(STEP_PREFIX)]
                found[id(e)] = (ops[-1]["name"], ops[0]["name"]) if ops else (None, None)
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


def _timeline(events, steps: list[dict], gpu: list[dict]) -> tuple[tuple[Span, ...], str, float]:
    """One step (the one of median length, where the trace marks steps) or the whole GPU window."""
    if steps:
        step = sorted(steps, key=lambda s: (s["dur"], s["ts"]))[(len(steps) - 1) // 2]
        start, end, title = step["ts"], step["ts"] + step["dur"], f"{step['name']}, one step of {len(steps)}"
    else:
        start = min(e["ts"] for e in gpu)
        end = max(e["ts"] + e["dur"] for e in gpu)
        title = "the whole GPU window (the trace marks no ProfilerStep)"
    blocking_ids = {id(e) for e in events if e["cat"] in RUNTIME_CATEGORIES and e["name"] in BLOCKING}
    spans = []
    for thread, rows in _rows(events, start, end).items():
        for e in rows:
            if e["cat"] in GPU_CATEGORIES:
                kind, row = kind_of(e), f"GPU stream {e.get('args', {}).get('stream', e['tid'])}"
            elif e["cat"] in RUNTIME_CATEGORIES:
                kind, row = ("blocking" if id(e) in blocking_ids else "runtime"), f"CPU {thread} calls"
            else:
                kind, row = "cpu op", f"CPU {thread} ops"
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
