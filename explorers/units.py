"""Numbers formatted for people: binary byte units that scale, and short significant figures.

Every lab shows bytes in binary units (1 KiB = 1024 B, 1 GiB = 2**30 B), so a figure
never mixes "GB" (10**9) with MiB (2**20).
"""

from __future__ import annotations

import math

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; 2_079_318_016 * 1024 -> '1.9 TiB'; never '1,982,976.00 MiB'."""
    if not math.isfinite(n):
        return "n/a"
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit in BYTE_UNITS:
        if n < 1024 or unit == BYTE_UNITS[-1]:
            return f"{sign}{int(n):,} B" if unit == "B" else f"{sign}{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_number(x: float, digits: int = 3) -> str:
    """A float with `digits` significant figures, for tables and notes: no 16-digit floats, no 'nan'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}g}"


def byte_axis_unit(largest: float) -> tuple[str, int]:
    """The binary unit in which `largest` bytes reads as 1 to 1023 (and its size), so axis ticks match bar labels."""
    exponent = min(int(math.log(largest, 1024)) if largest >= 1 else 0, len(BYTE_UNITS) - 1)
    return BYTE_UNITS[exponent], 1024**exponent
