"""The GPU evidence lab's figures and answer keys, recounted from each shipped trace's raw JSON a second way.

HTA (HolisticTraceAnalysis 0.5.0) computes the time split, the overlap and the launch delays; here they are
recounted by merging the raw events' intervals. HTA counts whole microseconds and drops some events as it
parses (the page says how many), so the two agree within 2 µs per GPU event plus the dropped events' time.
The rest (top kernels, blocking calls, the answer keys) is recounted exactly, by other code than the lab's.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter
from functools import cache

import pytest

from explorers import evidence
from explorers.evidence import lesson, questions
from explorers.evidence.reading import COPY_CALLS, SYNCHRONIZE
from explorers.evidence.shipped import SHIPPED
from tests.claims.falsify import falsifies

STATEMENTS = lesson.STATEMENTS

GPU = {"kernel", "gpu_memcpy", "gpu_memset"}


@cache
def raw(key: str) -> list[dict]:
    return json.load(gzip.open(SHIPPED[key].path))["traceEvents"]


def held_cpu(events: list[dict]) -> list[dict]:
    """Synchronize calls, and copy calls whose copy (same correlation id) started before the call returned."""
    copies = {
        e["args"]["correlation"]: e for e in events if e.get("cat") == "gpu_memcpy" and "correlation" in e["args"]
    }
    found = []
    for call in events:
        if call.get("cat") != "cuda_runtime":
            continue
        copy = copies.get(call["args"].get("correlation")) if call["name"] in COPY_CALLS else None
        if call["name"] in SYNCHRONIZE or (copy is not None and copy["ts"] < call["ts"] + call["dur"]):
            found.append(call)
    return found


@cache
def reading(key: str):
    return evidence.read(key)


def sweep(spans: list[tuple[float, float, str]]) -> Counter:
    """A sweep over every start and end (not the lab's interval merging): how long at least one span of each label
    ran, any label ran ("any"), and computation and communication ran at once ("compute+comm")."""
    edges = sorted([(start, 1, label) for start, _, label in spans] + [(end, -1, label) for _, end, label in spans])
    running, totals, last = Counter(), Counter(), None
    for time, step, label in edges:
        if last is not None and time > last:
            on = {name for name, count in running.items() if count > 0}
            for name in on | ({"any"} if on else set()) | ({"compute+comm"} if {"compute", "comm"} <= on else set()):
                totals[name] += time - last
        running[label] += step
        last = time
    return totals


def recount(key: str) -> dict:
    events = [e for e in raw(key) if e.get("ph") == "X" and isinstance(e.get("args"), dict)]
    on_gpu = [e for e in events if e.get("cat") in GPU]
    totals = sweep([(e["ts"], e["ts"] + e["dur"], kind(e)) for e in on_gpu])
    window = max(e["ts"] + e["dur"] for e in on_gpu) - min(e["ts"] for e in on_gpu)
    communication = sum(e["dur"] for e in on_gpu if kind(e) == "comm")
    return {
        "events": len(on_gpu),
        "window_us": window,
        "compute_us": totals["compute"],
        "non_compute_us": totals["any"] - totals["compute"],
        "idle_us": window - totals["any"],
        "overlap_percent": 100 * totals["compute+comm"] / totals["comm"] if totals["comm"] else None,
        "communication_us": communication,
    }


def kind(event: dict) -> str:
    """HTA's kernel types: a kernel named for NCCL or RCCL communicates, another computes; copies and sets."""
    if event["cat"] != "kernel":
        return "memory"
    return "comm" if questions_comm(event["name"]) else "compute"


def questions_comm(name: str) -> bool:
    return "nccl" in name.lower() or "rccl" in name.lower()


def tolerance_us(key: str) -> float:
    """2 µs per GPU event (HTA counts whole µs), and where HTA dropped events, their longest possible time."""
    r = reading(key)
    dropped = r.gpu_events - r.gpu_events_hta
    longest = sorted((e["dur"] for e in raw(key) if e.get("ph") == "X" and e.get("cat") in GPU), reverse=True)
    return 2 * r.gpu_events + sum(longest[:dropped])


@pytest.mark.parametrize("key", SHIPPED)
def test_the_time_split_agrees_with_a_recount_of_the_raw_events(key):
    r, counted = reading(key), recount(key)
    assert r.gpu_events == counted["events"]
    for field in ("window_us", "compute_us", "non_compute_us", "idle_us"):
        assert getattr(r, field) == pytest.approx(counted[field], abs=tolerance_us(key)), field
    assert r.compute_us + r.non_compute_us + r.idle_us == pytest.approx(r.window_us, abs=1)


@pytest.mark.parametrize("key", SHIPPED)
def test_where_hta_kept_every_event_the_shown_shares_agree_to_the_shown_rounding(key):
    r, counted = reading(key), recount(key)
    if r.gpu_events != r.gpu_events_hta:
        assert f"HTA kept {r.gpu_events_hta:,} of the file's {r.gpu_events:,}" in lesson.split_line(r)
        return
    for field in ("compute_us", "non_compute_us", "idle_us"):
        shown = 100 * getattr(r, field) / r.window_us
        assert shown == pytest.approx(100 * counted[field] / counted["window_us"], abs=1.0), field
    if counted["overlap_percent"] is not None:
        assert r.overlap_percent == pytest.approx(counted["overlap_percent"], abs=0.05)


@pytest.mark.parametrize("key", SHIPPED)
def test_top_kernels_and_communication_are_recounted_exactly(key):
    r = reading(key)
    totals: dict[str, float] = {}
    for e in raw(key):
        if e.get("ph") == "X" and e.get("cat") in GPU:
            totals[e["name"]] = totals.get(e["name"], 0) + e["dur"]
    top = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:5]
    assert [k.name for k in r.top_kernels] == [name for name, _ in top]
    assert [k.total_us for k in r.top_kernels] == pytest.approx([total for _, total in top])
    assert r.communication_us == pytest.approx(recount(key)["communication_us"])


@pytest.mark.parametrize("key", SHIPPED)
def test_blocking_calls_are_recounted_by_brute_force_containment(key):
    r = reading(key)
    events = [e for e in raw(key) if e.get("ph") == "X"]
    calls = held_cpu(events)
    assert r.blocking_count == len(calls)
    assert r.blocking_us == pytest.approx(sum(c["dur"] for c in calls))
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    for shown in r.blocking:
        call = next(c for c in calls if c["dur"] == shown.dur_us and c["name"] == shown.call)
        around = [
            o for o in ops
            if o["tid"] == call["tid"] and o["pid"] == call["pid"] and o["ts"] <= call["ts"]
            and call["ts"] + call["dur"] <= o["ts"] + o["dur"]
        ]  # fmt: skip
        shortest = min((o["dur"] for o in around), default=None)  # an op and its one child can share a span
        assert shown.op in ({o["name"] for o in around if o["dur"] == shortest} if around else {None})


@pytest.mark.parametrize("key", SHIPPED)
def test_launch_delays_follow_the_flow_events_from_launch_to_kernel(key):
    """HTA joins each kernel to its launch call by correlation id; the trace's flow arrows (ac2g, s to f) join them
    too. The median delay from the call's end to the kernel's start is the same both ways, to HTA's 1 µs."""
    r = reading(key)
    events = raw(key)
    starts = {e["id"]: e for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {e["id"]: e for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    if not starts or r.launch_delay_median_us is None:
        pytest.skip("this trace has no flow events or no launch HTA could join")
    by_place = {(e["pid"], e["tid"], e["ts"]): e for e in events if e.get("ph") == "X"}
    delays = []
    for flow, start in starts.items():
        call, work = by_place.get((start["pid"], start["tid"], start["ts"])), None
        if flow in ends:
            end = ends[flow]
            work = by_place.get((end["pid"], end["tid"], end["ts"]))
        if call and work and work.get("cat") in GPU and call.get("cat") == "cuda_runtime":
            delays.append(work["ts"] - (call["ts"] + call["dur"]))
    assert delays
    assert statistics.median(delays) == pytest.approx(
        r.launch_delay_median_us, abs=1 + 0.01 * abs(r.launch_delay_median_us)
    )


@pytest.mark.parametrize("key", SHIPPED)
def test_each_answer_key_follows_from_the_recounted_figures(key):
    r, counted = reading(key), recount(key)
    asked = {q.key: q for q in questions.questions(r)}
    split = {"compute": counted["compute_us"], "non_compute": counted["non_compute_us"], "idle": counted["idle_us"]}
    largest = max(split, key=split.get)
    assert asked["bound"].right_evidence == questions.SPLIT[largest]
    if largest == "idle":
        waits = "host" if r.host_wait_us + r.kernel_wait_us >= r.other_wait_us else "deps"
        assert asked["bound"].right_cause == questions.BOUND_CAUSES[waits]
    inside = sorted((b for b in r.blocking if b.op), key=lambda b: -b.dur_us)
    clear = len(inside) >= 3 and inside[0].dur_us >= 1.25 * inside[1].dur_us
    assert ("sync" in asked) == clear
    if clear:
        assert asked["sync"].right_cause == inside[0].op
        assert len(asked["sync"].evidence) >= 3
    if "hidden" in asked:
        overlap = counted["overlap_percent"]
        key = "hidden" if overlap > 60 else "exposed" if overlap < 40 else "partly"
        assert asked["hidden"].right_cause == questions.HIDDEN_CAUSES[key]
    assert all(len(set(q.causes)) >= 2 for q in asked.values())


@pytest.mark.parametrize("key", SHIPPED)
def test_every_number_is_labelled_with_the_traces_own_card(key):
    r = reading(key)
    with gzip.open(SHIPPED[key].path) as file:
        document = json.load(file)
    names = [p["name"] for p in document.get("deviceProperties", [])]
    assert r.card == (names[0] if names else None)
    assert (names[0] if names else "a GPU the trace does not name") in lesson.card_line(r, SHIPPED[key].source)


@falsifies(STATEMENTS["sync"])
def test_the_item_sync_statement_holds_on_every_shipped_trace():
    """STATEMENTS['sync']: `.item()` holds the CPU inside aten::_local_scalar_dense, in a device-to-host copy into
    pageable memory. Every _local_scalar_dense on a GPU trace makes such a copy, and it held the CPU while it ran."""
    seen = 0
    for key in SHIPPED:
        events = [e for e in raw(key) if e.get("ph") == "X"]
        held = {id(c) for c in held_cpu(events)}
        copies = {e["args"].get("correlation"): e for e in events if e.get("cat") == "gpu_memcpy"}
        for op in (e for e in events if e["name"] == "aten::_local_scalar_dense"):
            runtime = [
                c for c in events
                if c.get("cat") == "cuda_runtime" and c["tid"] == op["tid"]
                and op["ts"] <= c["ts"] < op["ts"] + op["dur"]
            ]  # fmt: skip
            if not runtime:
                continue  # a CPU tensor's .item(): outside the statement's scope
            calls = [c for c in runtime if c["name"] in COPY_CALLS]
            assert calls, key
            for call in calls:
                seen += 1
                assert "Device -> Pageable" in copies[call["args"]["correlation"]]["name"], key
                assert id(call) in held, (key, call["ts"])
    assert seen >= 3


@falsifies(STATEMENTS["pageable"])
def test_the_pageable_copy_statement_holds_where_a_trace_has_both_kinds():
    """STATEMENTS['pageable']: a pageable host-to-device copy can make the CPU wait; a pinned one is queued. In the
    shipped traces some copy_ ops that launched a pageable copy waited in a synchronize; none that launched a pinned
    one did. (It once said every pageable copy's op waits: 16 of the 32 here do not, in a synchronize.)"""
    waited = {"Pageable": [], "Pinned": []}
    for key in SHIPPED:
        events = [e for e in raw(key) if e.get("ph") == "X"]
        by_correlation = {e["args"].get("correlation"): e for e in events if e.get("cat") == "cuda_runtime"
                          and isinstance(e.get("args"), dict)}  # fmt: skip
        copies = [e for e in events if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]]
        for copy in copies:
            kind = "Pageable" if "Pageable" in copy["name"] else "Pinned" if "Pinned" in copy["name"] else None
            call = by_correlation.get(copy.get("args", {}).get("correlation"))
            if kind is None or call is None:
                continue
            op = min(
                (o for o in events if o.get("cat") == "cpu_op" and o["name"] == "aten::copy_"
                 and o["tid"] == call["tid"] and o["ts"] <= call["ts"] < o["ts"] + o["dur"]),
                key=lambda o: o["dur"], default=None,
            )  # fmt: skip
            if op is None:
                continue
            syncs = [e for e in events if e.get("cat") == "cuda_runtime" and e["name"] in SYNCHRONIZE
                     and e["tid"] == op["tid"] and op["ts"] <= e["ts"] < op["ts"] + op["dur"]]  # fmt: skip
            waited[kind].append(bool(syncs))
    assert waited["Pageable"] and any(waited["Pageable"])  # 16 of 32 in the shipped traces
    assert waited["Pinned"] and not any(waited["Pinned"])  # 0 of 308


@falsifies(STATEMENTS["idle"])
def test_htas_three_idle_kinds_add_up_to_the_busiest_streams_gaps():
    """STATEMENTS['idle']: host wait, kernel wait and other split a stream's idle time. Recounted: the gaps between
    the busiest stream's GPU events, from its first to its last, add up to HTA's three (within HTA's 1 µs per event)."""
    for key in SHIPPED:
        r = reading(key)
        on_stream = [
            e for e in raw(key)
            if e.get("ph") == "X" and e.get("cat") in GPU
            and isinstance(e.get("args"), dict) and e["args"].get("stream") == r.idle_stream
        ]  # fmt: skip
        ran = sweep([(e["ts"], e["ts"] + e["dur"], "work") for e in on_stream])["any"]
        gaps = max(e["ts"] + e["dur"] for e in on_stream) - min(e["ts"] for e in on_stream) - ran
        split = r.host_wait_us + r.kernel_wait_us + r.other_wait_us
        assert split == pytest.approx(gaps, abs=2 * len(on_stream) + tolerance_us(key)), key


@falsifies(STATEMENTS["overlap"])
def test_in_every_nccl_trace_some_communication_runs_while_the_gpu_computes():
    """STATEMENTS['overlap']: communication can hide behind computation. Every shipped trace with NCCL kernels shows
    some of them overlapping computation kernels, and none is wholly hidden (exposed time exists)."""
    nccl = [key for key in SHIPPED if recount(key)["overlap_percent"] is not None]
    assert len(nccl) >= 2
    for key in nccl:
        assert 0 < recount(key)["overlap_percent"] < 100, key
