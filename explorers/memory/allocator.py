"""The CPU allocator's own record of a training step, from torch.profiler's memory events.

`tracker.LiveBytes` follows every storage an operator returns. An operator can also allocate
working memory inside its kernel and free it before it returns (a slow fp16 convolution's
backward allocates its im2col columns, say): no tensor ever holds those bytes, so only the
allocator sees them. Here one more steady step runs under
`torch.profiler.profile(profile_memory=True)`, each phase inside a `record_function`; the
running sum of the allocator's events, on top of what was alive before the step, gives its
peak, the phase it fell in, and the operator the step called that was running at that moment.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function

MARK = "memory lab phase: "  # the record_function names that bracket each phase


@dataclass(frozen=True)
class AllocatorRecord:
    peak: int  # bytes alive at the allocator's highest point, what existed before the step included
    phase: str  # the phase that point fell in
    operator: str  # the outermost aten operator running at that point, the one the step called ("" when none was)
    phase_peaks: dict[str, int]  # the allocator's highest point within each phase


class PhaseMarks:
    """Opens a `record_function` for each phase as the step starts it, so events can be put in their phase."""

    def __init__(self) -> None:
        self._open: contextlib.AbstractContextManager | None = None

    def start(self, phase: str) -> None:
        self.close()
        self._open = record_function(MARK + phase)
        self._open.__enter__()

    def close(self) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None


def available(device: torch.device) -> bool:
    """CPU only (CUDA has its own counter), and never inside someone else's profiler: they do not nest."""
    return device.type == "cpu" and not torch.autograd._profiler_enabled()


@contextlib.contextmanager
def recording():
    """Profile the block's CPU allocations; yields a list that holds the profiler's events once the block ends."""
    events: list = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        yield events
    events.extend(prof.profiler.kineto_results.events())


def read(events: list, before: int) -> AllocatorRecord:
    """The allocator's peak from its events, `before` bytes alive when they start."""
    phases = [(e.start_ns(), e.end_ns(), e.name()[len(MARK) :]) for e in events if e.name().startswith(MARK)]
    operators = [(e.start_ns(), e.end_ns(), e.name()) for e in events if e.name().startswith("aten::")]
    changes = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    total = peak = before
    moment = None
    phase_peaks: dict[str, int] = {}
    for time, nbytes in changes:
        total += nbytes
        phase = _containing(phases, time)
        if phase:
            phase_peaks[phase] = max(phase_peaks.get(phase, 0), total)
        if total > peak:
            peak, moment = total, time
    return AllocatorRecord(
        peak=peak,
        phase=_containing(phases, moment) if moment is not None else "start",
        operator=_containing(operators, moment, outermost=True) if moment is not None else "",
        phase_peaks=phase_peaks,
    )


def _containing(spans: list[tuple[int, int, str]], time: int, outermost: bool = False) -> str:
    """The name of the span around `time` (phases do not overlap); of nested operators, the longest or shortest."""
    around = [(end - start, name) for start, end, name in spans if start <= time <= end]
    if not around:
        return ""
    return (max if outermost else min)(around)[1]
