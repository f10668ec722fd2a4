"""The GPU evidence lab's runs, as the engine's workers run them: a shipped trace read, or an upload's bytes."""

from __future__ import annotations

from dataclasses import dataclass

import explorers.evidence.cpu as cpu
import explorers.evidence.loading as loading
import explorers.evidence.reading as reading
from explorers import bounds
from explorers.evidence.cpu import CpuReading
from explorers.evidence.reading import Reading
from explorers.evidence.shipped import SHIPPED


@dataclass(frozen=True)
class ShippedOptions:
    trace: str

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"trace": SHIPPED})


@dataclass(frozen=True)
class UploadOptions:
    data: bytes  # the file as uploaded; parsed only in the worker, never executed
    digest: str  # its sha256, so the engine's cache key stays short

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes) or len(self.data) > loading.MAX_FILE_BYTES:
            raise ValueError(f"an upload is bytes, at most {loading.MAX_FILE_BYTES} of them")

    def __hash__(self) -> int:
        return hash(self.digest)


def read_bytes(data: bytes, report=None) -> Reading | CpuReading:
    """Read and analyse one trace's bytes (a trace with no GPU work: its CPU side); `loading.Refused` says what is
    wrong with a file this lab cannot read."""
    if report:
        report(0, 2)
    trace = loading.read(data)
    if report:
        report(1, 2)
    return reading.read(trace) if loading.has_gpu_work(trace) else cpu.read(trace)


def read_shipped(options: ShippedOptions, report=None) -> Reading | CpuReading:
    return read_bytes(SHIPPED[options.trace].path.read_bytes(), report)


def read_upload(options: UploadOptions, report=None) -> Reading | CpuReading | str:
    """A reading, or the message saying why the file cannot be read (a refusal is an answer, not a failed run)."""
    try:
        return read_bytes(options.data, report)
    except loading.Refused as refused:
        return str(refused)
    except Exception as error:  # noqa: BLE001 - HTA meeting events it cannot join: a message, not a traceback
        return f"HolisticTraceAnalysis could not analyse its events ({type(error).__name__}: {str(error)[:120]})"
