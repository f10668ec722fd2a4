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


def sci(x: float | None) -> str:
    """2 significant figures in scientific notation: 3.1e-09; 'n/a' when there is no number; inf as inf."""
    if x is None:
        return "n/a"
    return f"{x:.1e}" if math.isfinite(x) else str(x)


def seconds(x: float) -> str:
    """2 decimals under 10 s, 1 above: 0.43 s, 12.5 s."""
    return f"{x:.2f} s" if x < 10 else f"{x:.1f} s"


def ms(value: float) -> str:
    """Milliseconds to three significant figures, never in exponent form: 0.0312, 2.01, 139, 2,350."""
    if not math.isfinite(value):
        return "∞"
    if value == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def percent(share: float) -> str:
    """A share (0.873) as a percentage with one decimal: 87.3%."""
    return f"{100 * share:.1f}%"


def byte_axis_unit(largest: float) -> tuple[str, int]:
    """The binary unit in which `largest` bytes reads as 1 to 1023 (and its size), so axis ticks match bar labels."""
    exponent = min(int(math.log(largest, 1024)) if largest >= 1 else 0, len(BYTE_UNITS) - 1)
    return BYTE_UNITS[exponent], 1024**exponent
