"""What this machine gives the labs: the cores this process may use and the memory still free.

Standard library only: the run engine, the labs and their fresh interpreters all read it, and
importing it changes nothing.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or taskset narrows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else a conservative 4 GiB."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 * 2**30
