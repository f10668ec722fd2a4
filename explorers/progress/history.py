"""What a learner's records add up to: drill scores, timed sets, predictions, mock scores, days and weakest answers.

Every view is computed from the records alone (oldest first), so a reload, another replica or
another device that reads the same records shows the same progress.
"""

from __future__ import annotations

import datetime as dt
import functools
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from explorers.drills.catalogue import DRILLS
from explorers.drills.catalogue import label as drill_label
from explorers.progress.records import Record
from explorers.slowstep.catalogue import DRILLS as SLOW_DRILLS
from explorers.slowstep.catalogue import label as slow_label
from explorers.tensors.catalogue import MAX_HINTS, PUZZLES, REASON_WORDS
from explorers.tensors.catalogue import label as puzzle_label
from explorers.wording import count

SET_SIZE = 5
SET_MINUTES = 15  # three minutes a drill: an interview's "find the bug in this loop"
PLAN_DAYS = 7
MOCK_POINTS = 5  # the mock interview's rubric items


def label(name: str) -> str:
    """A drill's or a puzzle's title, as the practice lists show it."""
    if name in SLOW_DRILLS:
        return slow_label(name)
    return puzzle_label(name) if name in PUZZLES else drill_label(name)


def practice_of(name: str) -> str:
    """Which practice a timed set's item belongs to: "drills" (Fix the loop), "puzzles" or "slowstep"."""
    if name in SLOW_DRILLS:
        return "slowstep"
    return "puzzles" if name in PUZZLES else "drills"


@dataclass(frozen=True)
class DrillScore:
    drill: str
    seed: int
    attempts: int
    lines_found: int  # of the bug's lines, on the first attempt
    lines_total: int
    extra_lines: int  # on the first attempt
    fix_right_first: bool
    solved: bool  # some attempt had the lines and the fix right
    seconds: float | None  # from opening the drill to the right answer (None: not yet)
    at: float  # the latest attempt (or the set's end, for a drill never attempted)

    @property
    def points(self) -> float:
        """For ordering the weakest first: first-attempt lines and fix, fewer attempts, solved at all (at most 4)."""
        lines = self.lines_found / self.lines_total - 0.25 * self.extra_lines
        return lines + 2 * self.fix_right_first + self.solved - 0.1 * max(self.attempts - 1, 0)

    def describe(self) -> str:
        if not self.attempts:
            return f"{label(self.drill)} (seed {self.seed}): not answered in a timed set"
        time_taken = f"solved in {self.seconds:.0f} s" if self.seconds is not None else "not solved yet"
        attempts = f"{self.attempts} attempt{'s' * (self.attempts != 1)}"
        fix = "right fix first" if self.fix_right_first else "wrong fix first"
        lines = f"lines {self.lines_found} of {self.lines_total} first"
        lines += f", {self.extra_lines} extra" if self.extra_lines else ""
        return f"{label(self.drill)} (seed {self.seed}): {lines}, {fix}, {attempts}, {time_taken}"


@dataclass(frozen=True)
class PuzzleScore:
    puzzle: str
    seed: int
    attempts: int  # checks until solved
    hints: int  # hints shown before the last counted check (0 to MAX_HINTS)
    first_reason: str  # the first check's verdict ("right", "shape", ...)
    solved: bool
    seconds: float | None  # from opening the puzzle to the right answer (None: not yet)
    at: float

    @property
    def points(self) -> float:
        """From 0 to 1: solved, less a quarter per hint and a tenth per extra check."""
        if not self.solved:
            return 0.0
        return max(0.0, 1 - 0.25 * self.hints - 0.1 * max(self.attempts - 1, 0))

    def describe(self) -> str:
        if not self.attempts:
            return f"{label(self.puzzle)} (seed {self.seed}): not answered in a timed set"
        checks = f"{self.attempts} check{'s' * (self.attempts != 1)}"
        hints = f"{self.hints} hint{'s' * (self.hints != 1)}"
        done = f"solved in {self.seconds:.0f} s" if self.seconds is not None else "not solved yet"
        first = "right first" if self.first_reason == "right" else f"first: {REASON_WORDS[self.first_reason]}"
        return f"{label(self.puzzle)} (seed {self.seed}): {first}, {checks}, {hints}, {done}"


@dataclass(frozen=True)
class TimedSet:
    id: str
    drills: tuple[str, ...]  # Fix-the-loop drills or tensor puzzles
    seed: int
    started: float  # seconds since the epoch

    @property
    def practice(self) -> str:
        return practice_of(self.drills[0])

    def remaining_s(self, now: float) -> float:
        return max(0.0, SET_MINUTES * 60 - (now - self.started))

    def start_record(self) -> Record:
        return Record.now("set", self.id, {"drills": list(self.drills), "seed": self.seed, "started": self.started})


@dataclass(frozen=True)
class SetResult:
    drills: tuple[str, ...]
    seed: int
    solved: tuple[bool, ...]  # per drill, in the set's order
    seconds: float  # from the start to the end of the set
    time_up: bool  # ended by the clock, not by the learner
    at: float

    def words(self) -> str:
        minutes, seconds = divmod(round(self.seconds), 60)
        how = "Time is up" if self.time_up else "Set ended"
        words = f"{how}: {sum(self.solved)} of {len(self.drills)} solved in {minutes}:{seconds:02d}."
        unsolved = [label(d) for d, ok in zip(self.drills, self.solved, strict=True) if not ok]
        if unsolved:
            words += " Not solved, so the study plan's day 7 lists them: " + "; ".join(unsolved) + "."
        return words


def new_set(drills: Iterable[str], now: float) -> TimedSet:
    rng = secrets.SystemRandom()
    return TimedSet(secrets.token_hex(8), tuple(rng.sample(sorted(drills), SET_SIZE)), rng.randrange(100), now)


@dataclass(frozen=True)
class Prediction:
    key: str
    question: str
    right: bool
    at: float


@dataclass(frozen=True)
class MockScore:
    lab: str
    points: int
    at: float


@dataclass(frozen=True)
class Weak:
    """One answer for Day 7's review: what it was, and how well it went from 0 (worst) to 1."""

    kind: str  # "mock", "drill", "puzzle" or "prediction"
    share: float
    at: float
    item: MockScore | DrillScore | PuzzleScore | Prediction


@dataclass(frozen=True)
class ActiveDay:
    """What the learner did on one calendar day with a record (in their time zone), or on a run of such days."""

    first: dt.date
    last: dt.date
    days: int  # active days from first to last
    labs: tuple[str, ...]  # slugs, in the order first opened
    predictions: int
    right: int
    attempts: int
    solved: int
    sets: tuple[str, ...]  # each ended set's "k of n"
    mock: int
    checks: int = 0  # tensor puzzle checks
    right_checks: int = 0

    @classmethod
    def merged(cls, days: list[ActiveDay]) -> ActiveDay:
        return cls(
            days[0].first, days[-1].last, sum(d.days for d in days),
            tuple(dict.fromkeys(slug for d in days for slug in d.labs)),
            *(sum(getattr(d, name) for d in days) for name in ("predictions", "right", "attempts", "solved")),
            tuple(s for d in days for s in d.sets), sum(d.mock for d in days),
            sum(d.checks for d in days), sum(d.right_checks for d in days),
        )  # fmt: skip

    def words(self, titles: Mapping[str, str]) -> str:
        """What was done, e.g. "Sun 6 Dec: opened Autograd, Modes; 3 predictions, 2 right"."""
        done = []
        if self.labs:
            done.append("opened " + ", ".join(titles.get(slug, slug) for slug in self.labs))
        if self.predictions:
            done.append(f"{count(self.predictions, 'prediction')}, {self.right} right")
        if self.attempts:
            done.append(f"{count(self.attempts, 'drill attempt')}, {self.solved} solved")
        if self.checks:
            done.append(f"{count(self.checks, 'tensor puzzle check')}, {self.right_checks} right")
        if len(self.sets) > 3:
            done.append(f"{count(len(self.sets), 'timed set')}")
        elif self.sets:
            done.append(f"{count(len(self.sets), 'timed set')} ({', '.join(self.sets)} solved)")
        if self.mock:
            done.append(count(self.mock, "mock answer") + " scored")
        if self.days == 1:
            when = f"{self.first:%a} {self.first.day} {self.first:%b}"
        else:
            when = f"{self.days} days from {self.first.day} {self.first:%b %Y} to {self.last.day} {self.last:%b %Y}"
        return f"{when}: " + "; ".join(done)


class History:
    """The views of one snapshot of a learner's records; each view is computed once, on first use."""

    def __init__(self, records: Iterable[Record]) -> None:
        self.records = list(records)
        self._plans: dict[dt.tzinfo, dict[int, ActiveDay]] = {}

    def drill_scores(self) -> dict[tuple[str, int], DrillScore]:
        return self._drill_scores

    def set_results(self) -> list[SetResult]:
        return self._set_results

    def predictions(self) -> dict[str, Prediction]:
        """The first answer to each question (a later change of mind is not rescored)."""
        return self._predictions

    @functools.cached_property
    def _drill_scores(self) -> dict[tuple[str, int], DrillScore]:
        """Per drill and seed: the first attempt sets the lines and fix scores; attempts count until solved; a
        drill of an ended set never attempted counts as unsolved with none."""
        scores: dict[tuple[str, int], DrillScore] = {}
        for record in self.records:
            if record.kind == "attempt":
                d = record.data
                key = (record.key, d["seed"])
                earlier = scores.get(key) or DrillScore(
                    record.key, d["seed"], 0, d["lines_found"], d["lines_total"], d["extra_lines"],
                    d["fix_right"], False, None, record.at,
                )  # fmt: skip
                if earlier.solved:
                    continue
                scores[key] = DrillScore(
                    earlier.drill, earlier.seed, earlier.attempts + 1, earlier.lines_found, earlier.lines_total,
                    earlier.extra_lines, earlier.fix_right_first, d["right"],
                    d["seconds"] if d["right"] else None, record.at,
                )  # fmt: skip
        for result in self.set_results():
            for drill in result.drills:
                key = (drill, result.seed)
                if key not in scores and drill in DRILLS:
                    scores[key] = DrillScore(drill, result.seed, 0, 0, 1, 0, False, False, None, result.at)
        return scores

    def puzzle_scores(self) -> dict[tuple[str, int], PuzzleScore]:
        return self._puzzle_scores

    @functools.cached_property
    def _puzzle_scores(self) -> dict[tuple[str, int], PuzzleScore]:
        """Per puzzle and seed: checks count until solved, the hints are the most shown by then, the first check's
        verdict is kept; a puzzle of an ended set never checked counts as unsolved with none."""
        scores: dict[tuple[str, int], PuzzleScore] = {}
        for record in self.records:
            if record.kind == "puzzle":
                d = record.data
                key = (record.key, d["seed"])
                earlier = scores.get(key) or PuzzleScore(
                    record.key, d["seed"], 0, 0, d["reason"], False, None, record.at
                )
                if earlier.solved:
                    continue
                scores[key] = PuzzleScore(
                    earlier.puzzle, earlier.seed, earlier.attempts + 1, min(max(earlier.hints, d["hints"]), MAX_HINTS),
                    earlier.first_reason, d["right"], d["seconds"] if d["right"] else None, record.at,
                )  # fmt: skip
        for result in self.set_results():
            for puzzle in result.drills:
                if (puzzle, result.seed) not in scores and puzzle in PUZZLES:
                    scores[(puzzle, result.seed)] = PuzzleScore(puzzle, result.seed, 0, 0, "", False, None, result.at)
        return scores

    def sets(self) -> dict[str, TimedSet]:
        return {
            r.key: TimedSet(r.key, tuple(r.data["drills"]), r.data["seed"], r.data["started"])
            for r in self.records
            if r.kind == "set"
        }

    def open_sets(self, practice: str = "drills") -> list[TimedSet]:
        """Sets of a practice ("drills" or "puzzles") started and not ended, oldest first (the clock may have run
        out on some)."""
        ended = {r.key for r in self.records if r.kind == "set_end"}
        return [s for s in self.sets().values() if s.id not in ended and s.practice == practice]

    def running_set(self, now: float, practice: str = "drills") -> TimedSet | None:
        running = [s for s in self.open_sets(practice) if s.remaining_s(now) > 0]
        return running[-1] if running else None

    @functools.cached_property
    def _set_results(self) -> list[SetResult]:
        sets = self.sets()
        return [
            SetResult(
                sets[r.key].drills,
                sets[r.key].seed,
                tuple(r.data["solved"]),
                r.data["seconds"],
                r.data["time_up"],
                r.at,
            )  # fmt: skip
            for r in self.records
            if r.kind == "set_end" and r.key in sets and len(r.data["solved"]) == len(sets[r.key].drills)
        ]

    def solved(self, name: str, seed: int) -> bool:
        """Whether a drill or a puzzle was solved on a seed (a slow-step drill: its first answer was right)."""
        if name in SLOW_DRILLS:
            first = self.predictions().get(SLOW_DRILLS[name].record_key(seed))
            return first is not None and first.right
        scores = self.puzzle_scores() if name in PUZZLES else self.drill_scores()
        score = scores.get((name, seed))
        return score is not None and score.solved

    def end_record(self, timed: TimedSet, now: float, time_up: bool) -> Record:
        """The record that ends a set: which drills were solved, and its time (at most the set's limit)."""
        solved = [self.solved(d, timed.seed) for d in timed.drills]
        seconds = min(max(now - timed.started, 0.0), SET_MINUTES * 60)
        return Record.now("set_end", timed.id, {"solved": solved, "seconds": seconds, "time_up": time_up})

    @functools.cached_property
    def _predictions(self) -> dict[str, Prediction]:
        first: dict[str, Prediction] = {}
        for r in self.records:
            if r.kind == "prediction" and r.key not in first:
                first[r.key] = Prediction(r.key, r.data["question"], r.data["right"], r.at)
        return first

    def mock_scores(self) -> dict[str, MockScore]:
        """The latest self-score per lab's question (a redone answer replaces the earlier one)."""
        return {r.key: MockScore(r.key, r.data["points"], r.at) for r in self.records if r.kind == "mock"}

    def visited(self) -> set[str]:
        return {r.key for r in self.records if r.kind == "visit"}

    def weakest(self, count: int = 5) -> list[Weak]:
        """Day 7's review: the answers short of full marks, from the mock interview, the drills, the tensor puzzles and
        the predictions,
        the weakest first (the older first among equals)."""
        answers = [Weak("mock", m.points / MOCK_POINTS, m.at, m) for m in self.mock_scores().values()]
        answers += [Weak("drill", min(max(s.points / 4, 0.0), 1.0), s.at, s) for s in self.drill_scores().values()]
        answers += [Weak("puzzle", s.points, s.at, s) for s in self.puzzle_scores().values()]
        answers += [Weak("prediction", float(p.right), p.at, p) for p in self.predictions().values()]
        answers += [Weak("prediction", 0.0, p.at, p) for p in self._unanswered_slow_steps()]
        short = [a for a in answers if a.share < 1]
        return sorted(short, key=lambda a: (a.share, a.at))[:count]

    def _unanswered_slow_steps(self) -> list[Prediction]:
        """The slow-step drills of ended sets never answered: each counts as a wrong first answer."""
        missing = {}
        for result in self.set_results():
            for name in result.drills:
                key = SLOW_DRILLS[name].record_key(result.seed) if name in SLOW_DRILLS else None
                if key and key not in self.predictions() and key not in missing:
                    words = f"{slow_label(name)}, seed {result.seed}: not answered in a timed set"
                    missing[key] = Prediction(key, words, False, result.at)
        return list(missing.values())

    def days(self, zone: dt.tzinfo = dt.UTC) -> list[ActiveDay]:
        """Each calendar day with a record, oldest first: the study plan's day k is the k-th of them."""

        def date(at: float) -> dt.date:
            return dt.datetime.fromtimestamp(at, zone).date()

        by_date: dict[dt.date, list[Record]] = {}
        for r in self.records:
            by_date.setdefault(date(r.at), []).append(r)
        sets_by_date: dict[dt.date, list[str]] = {}
        for result in self.set_results():
            sets_by_date.setdefault(date(result.at), []).append(f"{sum(result.solved)} of {len(result.solved)}")
        firsts = self.predictions()
        days = []
        for day, done in sorted(by_date.items()):
            predictions = [r for r in done if r.kind == "prediction" and firsts[r.key].at == r.at]
            attempts = [r for r in done if r.kind == "attempt"]
            checks = [r for r in done if r.kind == "puzzle"]
            days.append(
                ActiveDay(
                    day,
                    day,
                    1,
                    tuple(dict.fromkeys(r.key for r in done if r.kind == "visit")),
                    len(predictions),
                    sum(r.data["right"] for r in predictions),
                    len(attempts),
                    sum(r.data["right"] for r in attempts),
                    tuple(sets_by_date.get(day, ())),
                    sum(r.kind == "mock" for r in done),
                    len(checks),
                    sum(r.data["right"] for r in checks),
                )  # fmt: skip
            )
        return days

    def plan_days(self, zone: dt.tzinfo = dt.UTC) -> dict[int, ActiveDay]:
        """The study plan's days 1 to 7, each what was done on it: the k-th active day is day k, and every day after
        the seventh is more of day 7, the review, said together."""
        if zone not in self._plans:
            days = self.days(zone)
            plan = {number: day for number, day in enumerate(days[: PLAN_DAYS - 1], 1)}
            if len(days) >= PLAN_DAYS:
                plan[PLAN_DAYS] = ActiveDay.merged(days[PLAN_DAYS - 1 :])
            self._plans[zone] = plan
        return self._plans[zone]
