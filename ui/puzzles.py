"""The tensor drills' practice: each check kept as the learner's progress (ui/progress.py), hints counted.

A puzzle's score is computed from the records (explorers/progress/history.py): checks until right,
hints shown by then, the first verdict and the time from opening it. The expression typed is not
kept (a record holds no free text); the link holds it instead, for as long as the learner shares it.
"""

from __future__ import annotations

import time

import streamlit as st

from explorers.progress.history import PuzzleScore
from explorers.progress.records import Record
from explorers.tensors import language, lesson
from explorers.tensors.catalogue import MAX_HINTS, PUZZLES
from explorers.tensors.grading import Verdict
from ui import progress
from ui.fields import TextField

PAGE = "pages/16_Tensor_drills.py"
OPENED_KEY = "_puzzle_opened"
HINTS_KEY = "_puzzle_hints"  # (puzzle, seed) -> hints shown this session
EVERY_NAME = sorted({name for p in PUZZLES.values() for name in p.names})
# The expression in the link: checked by the language (over every puzzle's names) before the page shows it; the
# puzzle's own names are checked on Check.
ANSWER = TextField(
    "answer", "", lambda raw: language.parse(raw, EVERY_NAME), label=lesson.ANSWER_LABEL, help=lesson.ANSWER_HELP
)


def opened(name: str, seed: int) -> None:
    st.session_state.setdefault(OPENED_KEY, {}).setdefault((name, seed), time.monotonic())


def hints(name: str, seed: int) -> int:
    """Hints shown for this puzzle and seed: this session's, or more if an earlier check counted more."""
    kept = score(name, seed)
    return max(st.session_state.get(HINTS_KEY, {}).get((name, seed), 0), kept.hints if kept else 0)


def show_hint(name: str, seed: int) -> None:
    st.session_state.setdefault(HINTS_KEY, {})[(name, seed)] = min(hints(name, seed) + 1, MAX_HINTS)


def record(result: Verdict) -> PuzzleScore | None:
    """Keep a check: its verdict, the hints shown before it and, when right, the time since the puzzle opened."""
    started = st.session_state.get(OPENED_KEY, {}).get((result.puzzle, result.seed), time.monotonic())
    data = {
        "seed": result.seed,
        "right": result.right,
        "reason": result.reason,
        "hints": hints(result.puzzle, result.seed),
        "seconds": time.monotonic() - started if result.right else None,
    }
    progress.add(Record.now("puzzle", result.puzzle, data))
    return score(result.puzzle, result.seed)


def score(name: str, seed: int) -> PuzzleScore | None:
    return progress.history().puzzle_scores().get((name, seed))


def scores() -> list[PuzzleScore]:
    return list(progress.history().puzzle_scores().values())


def link(s: PuzzleScore) -> dict[str, str]:
    """The query that reopens a scored puzzle on its seed (its name is the task's, not the answer's)."""
    return {"puzzle": s.puzzle, "seed": str(s.seed)}
