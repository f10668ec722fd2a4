"""Real GPU profiler traces read as an engineer reads them: HolisticTraceAnalysis's figures and counts of the events.

From a notebook:

    from explorers import evidence
    evidence.catalogue()                      # the shipped traces: key -> title, card source
    r = evidence.read("alexnet")              # a shipped trace, a path, or a file's bytes
    r.card, r.compute_us, r.idle_us, r.host_wait_us, r.blocking[:3], r.overlap_percent
"""

from __future__ import annotations

from pathlib import Path


def catalogue() -> dict[str, str]:
    """The shipped traces: key -> title and source."""
    from explorers.evidence.shipped import SHIPPED

    return {key: f"{s.title} ({s.source})" for key, s in SHIPPED.items()}


def read(trace: str | Path | bytes):
    """A shipped trace's key, a path to a `.json`/`.json.gz` trace, or its bytes, read and analysed: a `Reading`
    (explorers/evidence/reading.py), or a `CpuReading` for a trace with no GPU work."""
    from explorers.evidence.experiment import read_bytes
    from explorers.evidence.shipped import SHIPPED

    if isinstance(trace, bytes):
        return read_bytes(trace)
    if isinstance(trace, str) and trace in SHIPPED:
        return read_bytes(SHIPPED[trace].path.read_bytes())
    return read_bytes(Path(trace).read_bytes())
