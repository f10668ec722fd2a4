"""Checking an answer: which lines hold the bug, and which fix removes it. Pure: nothing runs here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from explorers.drills.catalogue import DRILLS


@dataclass(frozen=True)
class Check:
    drill: str
    chosen_lines: tuple[int, ...]
    bug_lines: tuple[int, ...]
    extra_lines: tuple[int, ...]  # chosen, neither the bug's nor next to it
    fix: str
    right_fix: str
    lines_needed: int  # of the bug lines: every one, or one of a missing line's span
    missing: bool = False  # the bug is a line that is not there; bug_lines is the span where it belongs

    @property
    def found_lines(self) -> tuple[int, ...]:
        return tuple(n for n in self.bug_lines if n in self.chosen_lines)

    @property
    def lines_found(self) -> int:
        return min(len(self.found_lines), self.lines_needed)

    @property
    def lines_right(self) -> bool:
        return self.lines_found == self.lines_needed and not self.extra_lines

    @property
    def fix_right(self) -> bool:
        return self.fix == self.right_fix

    @property
    def right(self) -> bool:
        return self.lines_right and self.fix_right


def check(name: str, lines: Iterable[int], fix: str) -> Check:
    """Score an answer; a ValueError names what is not a possible answer (an unknown drill, line or fix)."""
    if name not in DRILLS:
        raise ValueError(f"drill must be one of {sorted(DRILLS)}, not {name!r}")
    drill = DRILLS[name]
    chosen = tuple(sorted(set(lines)))
    outside = [n for n in chosen if not 1 <= n <= len(drill.lines)]
    if outside:
        raise ValueError(f"{name}'s loop has lines 1 to {len(drill.lines)}, not {outside}")
    if fix not in drill.options:
        raise ValueError(f"fix must be one of {list(drill.options)} for {name}, not {fix!r}")
    near = set(drill.bug_lines) | set(drill.accepted_lines)
    extra = tuple(n for n in chosen if n not in near)
    return Check(
        name, chosen, drill.bug_lines, extra, fix, drill.fix, drill.lines_needed, drill.missing_between is not None
    )
