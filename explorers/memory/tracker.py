"""Live bytes through a training step, storage by storage, on any device and on fake tensors.

`LiveBytes` is a dispatch mode: it sees every operator's outputs, records each new storage
with its size until the storage is freed (a weakref callback), and keeps the running total,
its highest point, and the records alive at that point. Storages that exist before the step
(parameters, buffers, the batch, optimizer state) are registered with their kind.

What a storage *is* (a gradient, optimizer state, saved for backward) is often known only
after it was created: Adam's state appears in the same step as its temporaries, a gradient
is produced by a backward op like any other. So the peak keeps its records, and the step
labels them as it learns what they are; the breakdown at the peak is read at the end. The
only label decided at creation is a weight copy: a cast of a parameter (autocast's copies).

Why not `torch.distributed._tools.mem_tracker.MemTracker`: it labels by phase (everything
created in the optimizer step counts as optimizer state, every forward tensor as an
activation), its gradient hooks fail on frozen parameters, and it hooks every module in
the process.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from explorers.saved import storage_key

TEMPORARIES = "temporaries"
WEIGHT_COPIES = "weight copies"
PARAMETERS = "parameters"


@dataclass(eq=False)
class Stored:
    """One live storage: its size, what it is, and the phase of the step that created it."""

    nbytes: int
    kind: str
    phase: str
    ref: weakref.ref | None = None  # its callback forgets the record when the storage is freed


class LiveBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, Stored] = {}  # storage key -> record, for storages alive now
        self.total = 0
        self.phase = "start"
        self.peak = 0
        self.peak_phase = "start"
        self.phase_peaks: dict[str, int] = {}  # the highest total seen in each phase
        self._at_peak: list[tuple[Stored, int]] = []
        self._at_phase_peak: dict[str, dict[int, Stored]] = {}  # a copy of `live` at each phase's peak
        # Places within a phase (explorers.memory.regions sets them; none by default), each with its own peak
        self.regions: tuple[str, ...] = ()
        self.region_peaks: dict[str, int] = {}  # "phase|place" -> the highest total seen there
        self._at_region_peak: dict[str, dict[int, Stored]] = {}

    def add(self, tensors: Iterable[object], kind: str) -> None:
        """Register storages that exist already (parameters, the batch, optimizer state)."""
        for tensor in _tensors(tensors):
            self._track(tensor, kind)
        self._update_peak()

    def label(self, tensors: Iterable[object], kind: str) -> None:
        """Say what some live storages are, now that it is known (gradients after backward, ...)."""
        self.label_keys((storage_key(t) for t in _tensors(tensors)), kind)

    def label_keys(self, keys: Iterable[int], kind: str) -> None:
        for key in keys:
            if key in self.live and self.live[key].kind != WEIGHT_COPIES:
                self.live[key].kind = kind

    def kind_of(self, key: int) -> str | None:
        record = self.live.get(key)
        return record.kind if record else None

    def start(self, phase: str) -> None:
        """A new phase of the step; peaks are attributed to the phase they happen in."""
        self.phase = phase
        self._update_peak()

    def at_peak(self) -> dict[str, int]:
        """What was alive at the peak, by kind (temporaries by the phase that made them); sums to the peak."""
        return _by_kind(self._at_peak)

    def at_phase_peaks(self) -> dict[str, dict[str, int]]:
        """What was alive at each phase's own peak, by kind: what a sharded rank keeps is computed from these."""
        return {phase: _by_kind((r, r.nbytes) for r in live.values()) for phase, live in self._at_phase_peak.items()}

    def at_region_peaks(self) -> dict[str, dict[str, int]]:
        """What was alive at each place's own peak ("phase|place"), by kind."""
        return {place: _by_kind((r, r.nbytes) for r in live.values()) for place, live in self._at_region_peak.items()}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        casts_a_parameter = func is torch.ops.aten._to_copy.default and self.kind_of(storage_key(args[0])) == PARAMETERS
        for tensor in _tensors([out]):
            self._track(tensor, WEIGHT_COPIES if casts_a_parameter else TEMPORARIES)
        self._update_peak()
        return out

    def _track(self, tensor: torch.Tensor, kind: str) -> None:
        storage = tensor.untyped_storage()
        key, nbytes = storage_key(tensor), storage.nbytes()
        record = self.live.get(key)
        if record is None and nbytes:
            record = self.live[key] = Stored(nbytes, kind, self.phase)
            self.total += nbytes
            record.ref = weakref.ref(storage, lambda _, key=key, record=record: self._freed(key, record))
        elif record is not None and record.nbytes != nbytes:  # an op resized the storage in place
            self.total += nbytes - record.nbytes
            record.nbytes = nbytes

    def _freed(self, key: int, record: Stored) -> None:
        if self.live.get(key) is record:
            del self.live[key]
            self.total -= record.nbytes

    def _update_peak(self) -> None:
        if self.total > self.phase_peaks.get(self.phase, -1) or self.phase not in self._at_phase_peak:
            self.phase_peaks[self.phase] = self.total
            self._at_phase_peak[self.phase] = self.live.copy()  # a C-level copy: this runs on most forward ops
        for region in self.regions:
            place = f"{self.phase}|{region}"
            if self.total > self.region_peaks.get(place, -1):
                self.region_peaks[place] = self.total
                self._at_region_peak[place] = self.live.copy()
        if self.total > self.peak:
            self.peak, self.peak_phase = self.total, self.phase
            self._at_peak = [(record, record.nbytes) for record in self.live.values()]


def _by_kind(records: Iterable[tuple[Stored, int]]) -> dict[str, int]:
    """Bytes by kind, temporaries by the phase that made them."""
    parts: dict[str, int] = {}
    for record, nbytes in records:
        kind = f"{record.phase} {TEMPORARIES}" if record.kind == TEMPORARIES else record.kind
        parts[kind] = parts.get(kind, 0) + nbytes
    return parts


def _tensors(values: Iterable[object]) -> list[torch.Tensor]:
    """The dense tensors in a nest of lists, tuples and dicts (sparse ones have no storage to count)."""
    leaves = pytree.tree_leaves(list(values))
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.layout == torch.strided]
