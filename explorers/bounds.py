"""Validation shared by every lab's options: each value in its range or set, or a ValueError that names it."""

from __future__ import annotations

from collections.abc import Collection, Mapping


def check_ints(options: object, ranges: Mapping[str, tuple[int, int]]) -> None:
    for name, (low, high) in ranges.items():
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be an integer in [{low}, {high}], not {value!r}")


def check_numbers(options: object, ranges: Mapping[str, tuple[float, float]]) -> None:
    for name, (low, high) in ranges.items():
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise ValueError(f"{name} must be a number in [{low}, {high}], not {value!r}")


def check_choices(options: object, choices: Mapping[str, Collection]) -> None:
    for name, allowed in choices.items():
        value = getattr(options, name)
        if value not in allowed:
            raise ValueError(f"{name} must be one of {sorted(map(str, allowed))}, not {value!r}")
