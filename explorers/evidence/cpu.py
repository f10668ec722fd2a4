"""A trace with no GPU work read on the CPU side: its steps and the time of each `record_function` label per step.

This is what the Profiler lab's downloadable trace holds on a machine without a GPU (its phases are
labels such as `phase/forward`), so reading it here gives back the phases that lab showed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from explorers.evidence.loading import Trace
from explorers.evidence.reading import STEP_PREFIX

LABEL_CATEGORIES = frozenset({"user_annotation"})


@dataclass(frozen=True)
class CpuReading:
    events: int
    skipped: int
    counts: dict[str, int]
    steps: tuple[str, ...]
    step_ms: float | None  # the mean ProfilerStep, where the trace marks steps
    labels: tuple[tuple[str, float], ...]  # record_function label -> ms per step (the whole trace's, with no steps)


def read(trace: Trace) -> CpuReading:
    spans = [e for e in trace.events if e["ph"] == "X"]
    steps = sorted((e for e in spans if e["name"].startswith(STEP_PREFIX)), key=lambda e: e["ts"])
    steps = list({e["name"]: e for e in steps}.values())  # a step's CPU mark, once (the GPU copy repeats it)
    inside = (lambda e: any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)) if steps else (lambda e: True)
    totals: dict[str, float] = {}
    for e in spans:
        if e["cat"] in LABEL_CATEGORIES and not e["name"].startswith(STEP_PREFIX) and inside(e):
            totals[e["name"]] = totals.get(e["name"], 0.0) + e["dur"]
    per = max(len(steps), 1)
    return CpuReading(
        events=len(trace.events),
        skipped=trace.skipped,
        counts=dict(trace.counts),
        steps=tuple(e["name"] for e in steps),
        step_ms=statistics.fmean(e["dur"] for e in steps) / 1000 if steps else None,
        labels=tuple(sorted(((name, us / per / 1000) for name, us in totals.items()), key=lambda x: -x[1])),
    )
