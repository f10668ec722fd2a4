"""What is kept of a learner's practice, and the check each record passes before it is written or imported.

A record is one thing done, at one time: a lab opened, a prediction's first answer, a mock interview
self-score, a Fix-the-loop attempt, a tensor puzzle checked, a timed set started or ended. It holds no
name, no e-mail address, no upload and no free text the learner typed (not even a puzzle's expression):
its key is a lab slug, a drill or puzzle name or a question key, and its fields are numbers, booleans,
drill and puzzle names, a verdict's reason and the question the lab asked.

`parse` is the one gate: the app's own writes and an uploaded file go through it, so a record read
back from the store has the shape the views expect, whoever wrote it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from explorers.drills.catalogue import DRILLS
from explorers.slowstep.catalogue import DRILLS as SLOW_DRILLS
from explorers.tensors.catalogue import MAX_HINTS, PUZZLES, REASONS

EARLIEST = 1_704_067_200.0  # 2024-01-01 UTC: before the app, so before any record
FUTURE_SLACK_S = 24 * 3600.0  # a clock a day fast is tolerated, further is refused
MAX_SEED = 10**6
MAX_SECONDS = 7 * 24 * 3600.0
MAX_QUESTION_CHARS = 300
_KEY = re.compile(r"[a-z0-9_.-]{1,64}")


class Invalid(ValueError):
    """A record that is not one the app writes; the message names the part that failed."""


def _int(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if type(value) is not int or not low <= value <= high:
            raise Invalid(f"an integer from {low} to {high}")
        return value

    return check


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise Invalid("true or false")
    return value


def _seconds(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        raise Invalid(f"a number of seconds from 0 to {MAX_SECONDS:.0f}")
    return float(value)


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _question(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_QUESTION_CHARS or not value.isprintable():
        raise Invalid(f"a question of 1 to {MAX_QUESTION_CHARS} printable characters")
    return value


def _drill(value: Any) -> str:
    if value not in DRILLS:
        raise Invalid("one of the Fix-the-loop drills")
    return value


def _puzzle(value: Any) -> str:
    if value not in PUZZLES:
        raise Invalid("one of the tensor puzzles")
    return value


def _reason(value: Any) -> str:
    if value not in REASONS:
        raise Invalid(f"one of: {', '.join(REASONS)}")
    return value


def _drills(value: Any) -> list[str]:
    """A timed set's items: Fix-the-loop drills, tensor puzzles or slow-step drills, never two of them."""
    if not isinstance(value, list) or not 1 <= len(value) <= 10:
        raise Invalid("a list of 1 to 10 drills or puzzles")
    if all(item in PUZZLES for item in value) or all(item in SLOW_DRILLS for item in value):
        return list(value)
    return [_drill(item) for item in value]


def _bools(value: Any) -> list[bool]:
    if not isinstance(value, list) or not 1 <= len(value) <= 10:
        raise Invalid("a list of 1 to 10 true or false")
    return [_bool(item) for item in value]


def _started(value: Any) -> float:
    if type(value) not in (int, float) or not EARLIEST <= value <= time.time() + FUTURE_SLACK_S:
        raise Invalid("a time since 2024")
    return float(value)


# kind -> (what its key is, its fields and their checks)
KINDS: Mapping[str, tuple[str, Mapping[str, Callable[[Any], Any]]]] = {
    "visit": ("a lab slug", {}),
    "prediction": ("the question's key", {"question": _question, "right": _bool}),
    "mock": ("a lab slug", {"points": _int(0, 5)}),
    "attempt": (
        "a drill name",
        {
            "seed": _int(0, MAX_SEED),
            "lines_found": _int(0, 50),
            "lines_total": _int(1, 50),
            "extra_lines": _int(0, 50),
            "fix_right": _bool,
            "right": _bool,
            "seconds": _optional(_seconds),
        },
    ),
    "puzzle": (
        "a puzzle name",
        {
            "seed": _int(0, MAX_SEED),
            "right": _bool,
            "reason": _reason,
            "hints": _int(0, MAX_HINTS),
            "seconds": _optional(_seconds),
        },
    ),
    "set": ("the set's id", {"drills": _drills, "seed": _int(0, MAX_SEED), "started": _started}),
    "set_end": ("the set's id", {"solved": _bools, "seconds": _seconds, "time_up": _bool}),
}


@dataclass(frozen=True)
class Record:
    kind: str
    key: str
    at: float  # seconds since the epoch, UTC
    data: Mapping[str, Any]

    @classmethod
    def now(cls, kind: str, key: str, data: Mapping[str, Any]) -> Record:
        return parse({"kind": kind, "key": key, "at": time.time(), "data": dict(data)})

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "at": self.at, "data": dict(self.data)}


def parse(raw: Any) -> Record:
    """A record from its JSON form, every field checked and bounded; raises Invalid naming what failed."""
    if not isinstance(raw, dict) or set(raw) != {"kind", "key", "at", "data"}:
        raise Invalid("a record has exactly: kind, key, at, data")
    kind = raw["kind"]
    if kind not in KINDS:
        raise Invalid(f"kind is one of: {', '.join(KINDS)}")
    what, fields = KINDS[kind]
    key = raw["key"]
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise Invalid(f"{kind}: key is {what} (1 to 64 of a-z, 0-9, _ . -)")
    if kind == "attempt":
        _drill(key)
    if kind == "puzzle":
        _puzzle(key)
    try:
        at = _started(raw["at"])
    except Invalid as error:
        raise Invalid(f"{kind}: at is {error}") from None
    data = raw["data"]
    if not isinstance(data, dict) or set(data) != set(fields):
        raise Invalid(f"{kind}: data has exactly: {', '.join(fields) or 'nothing'}")
    checked = {}
    for name, check in fields.items():
        try:
            checked[name] = check(data[name])
        except Invalid as error:
            raise Invalid(f"{kind}: {name} is {error}") from None
    return Record(kind, key, at, checked)
