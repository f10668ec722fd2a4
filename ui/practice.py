"""Practice with the Fix-the-loop drills in one browser session: each drill's score, and a timed set of five.

Like the predict-then-reveal drill (ui/drill.py) and the mock interview (ui/mock.py), everything
is in this session's st.session_state, in the server's memory: nothing is written to disk, no
other session sees it, and the answer never goes in the link. The study plan's Day 7 reads the
weakest scores; the notes export lists them.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace

import streamlit as st

from explorers.drills import DRILLS, Check
from explorers.drills.catalogue import label

PAGE = "pages/12_Fix_the_loop.py"
SET_SIZE = 5
SET_MINUTES = 15  # three minutes a drill: an interview's "find the bug in this loop"
NO_DRILLS_YET = "Check an answer in Fix the loop and your weakest drills appear here."
SCORES_KEY = "_loop_scores"
OPENED_KEY = "_loop_opened"
SET_KEY = "_loop_set"
RESULT_KEY = "_loop_set_result"


@dataclass(frozen=True)
class Score:
    drill: str
    seed: int
    attempts: int
    lines_found: int  # of the bug's lines, on the first attempt
    lines_total: int
    extra_lines: int  # on the first attempt
    fix_right_first: bool
    solved: bool  # some attempt had the lines and the fix right
    seconds: float | None  # from opening the drill to the right answer (None: not yet)

    @property
    def points(self) -> float:
        """For ordering the weakest first: first-attempt lines and fix, fewer attempts, solved at all."""
        lines = self.lines_found / self.lines_total - 0.25 * self.extra_lines
        return lines + 2 * self.fix_right_first + self.solved - 0.1 * (self.attempts - 1)


def opened(drill: str, seed: int) -> None:
    """The drill's clock starts the first time this session shows it."""
    st.session_state.setdefault(OPENED_KEY, {}).setdefault((drill, seed), time.monotonic())


def record(check: Check, seed: int) -> Score:
    """Count an attempt: the first one sets the lines and fix scores, the first right one stops the clock."""
    scores = st.session_state.setdefault(SCORES_KEY, {})
    key = (check.drill, seed)
    started = st.session_state.get(OPENED_KEY, {}).get(key, time.monotonic())
    earlier = scores.get(key)
    if earlier is None:
        earlier = Score(
            check.drill,
            seed,
            0,
            check.lines_found,
            check.lines_needed,
            len(check.extra_lines),
            check.fix_right,
            False,
            None,
        )
    solved_now = check.right and not earlier.solved
    score = replace(
        earlier,
        attempts=earlier.attempts + (not earlier.solved),
        solved=earlier.solved or check.right,
        seconds=time.monotonic() - started if solved_now else earlier.seconds,
    )
    scores[key] = score
    return score


def score(drill: str, seed: int) -> Score | None:
    return st.session_state.get(SCORES_KEY, {}).get((drill, seed))


def scores() -> list[Score]:
    return list(st.session_state.get(SCORES_KEY, {}).values())


def weakest(count: int = 5) -> list[Score]:
    return sorted(scores(), key=lambda s: s.points)[:count]


def link(s: Score) -> dict[str, str]:
    """The query that reopens a scored drill on its seed (its opaque id: the name would give the bug away)."""
    return {"drill": DRILLS[s.drill].link_id, "seed": str(s.seed)}


def describe(s: Score) -> str:
    time_taken = f"solved in {s.seconds:.0f} s" if s.seconds is not None else "not solved yet"
    if not s.attempts:
        return f"{label(s.drill)} (seed {s.seed}): not answered in a timed set"
    attempts = f"{s.attempts} attempt{'s' * (s.attempts != 1)}"
    fix = "right fix first" if s.fix_right_first else "wrong fix first"
    lines = f"lines {s.lines_found} of {s.lines_total} first" + (f", {s.extra_lines} extra" if s.extra_lines else "")
    return f"{label(s.drill)} (seed {s.seed}): {lines}, {fix}, {attempts}, {time_taken}"


# --- The timed set ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimedSet:
    drills: tuple[str, ...]
    seed: int
    started: float  # time.monotonic()

    def remaining_s(self) -> float:
        return max(0.0, SET_MINUTES * 60 - (time.monotonic() - self.started))


@dataclass(frozen=True)
class SetResult:
    drills: tuple[str, ...]
    seed: int
    solved: tuple[bool, ...]  # per drill, in the set's order
    seconds: float  # from the start to the end of the set
    time_up: bool  # ended by the clock, not by the learner

    def words(self) -> str:
        done = sum(self.solved)
        minutes, seconds = divmod(round(self.seconds), 60)
        how = "Time is up" if self.time_up else "Set ended"
        words = f"{how}: {done} of {len(self.drills)} solved in {minutes}:{seconds:02d}."
        unsolved = [label(d) for d, ok in zip(self.drills, self.solved, strict=True) if not ok]
        if unsolved:
            words += " Not solved, and kept as such for Day 7: " + "; ".join(unsolved) + "."
        return words


def start_set() -> TimedSet:
    rng = random.SystemRandom()
    drills = tuple(rng.sample(sorted(DRILLS), SET_SIZE))
    timed = TimedSet(drills, rng.randrange(100), time.monotonic())
    st.session_state[SET_KEY] = timed
    st.session_state.pop(RESULT_KEY, None)
    return timed


def current_set() -> TimedSet | None:
    return st.session_state.get(SET_KEY)


def solved_in_set(timed: TimedSet, drill: str) -> bool:
    return (s := score(drill, timed.seed)) is not None and s.solved


def end_set(time_up: bool = False) -> SetResult | None:
    """End the set: its result is kept for the page to show, and each drill not solved is recorded as unsolved
    (with no attempt, if none was made), so Day 7 and the notes list it."""
    timed = st.session_state.pop(SET_KEY, None)
    if timed is None:
        return None
    scores = st.session_state.setdefault(SCORES_KEY, {})
    for drill in timed.drills:
        scores.setdefault((drill, timed.seed), Score(drill, timed.seed, 0, 0, 1, 0, False, False, None))
    solved = tuple(solved_in_set(timed, d) for d in timed.drills)
    elapsed = min(time.monotonic() - timed.started, SET_MINUTES * 60)
    result = SetResult(timed.drills, timed.seed, solved, elapsed, time_up)
    st.session_state[RESULT_KEY] = result
    return result


def last_result() -> SetResult | None:
    return st.session_state.get(RESULT_KEY)


def set_done(timed: TimedSet) -> int:
    return sum(solved_in_set(timed, d) for d in timed.drills)


def end_when_time_is_up(timed: TimedSet) -> None:
    """The server learns the clock ran out: a fragment reruns once the set's time is over and ends it."""

    def check() -> None:
        if current_set() is timed and timed.remaining_s() <= 0:
            end_set(time_up=True)
            st.rerun()

    st.fragment(check, run_every=max(1.0, timed.remaining_s() + 0.5))()


def set_start(start_set) -> TimedSet | None:
    """In the settings: the running set, if any; else the last set's result and a button to start one."""
    timed = current_set()
    if timed is not None and timed.remaining_s() <= 0:  # the clock ran out between two reruns
        end_set(time_up=True)
        timed = None
    if timed is None:
        if last_result():
            st.info(last_result().words(), icon=":material/flag:")
        st.button("Start a timed set of 5", icon=":material/timer:", key="set-start", on_click=start_set)
    return timed


def set_running(timed: TimedSet, drill: str, seed: int, open_drill, presenting: bool) -> None:
    """Above the drill's figure, so it stays on screen on a phone and while presenting: the set's clock, a button
    per drill (the open one marked, the solved ones ticked) and its end."""
    countdown(timed.remaining_s(), presenting)
    end_when_time_is_up(timed)
    st.caption(f"Timed set: {set_done(timed)} of {len(timed.drills)} solved. Open a drill by its number.")
    for number, (name, column) in enumerate(zip(timed.drills, st.columns(len(timed.drills)), strict=True), 1):
        is_open = name == drill and seed == timed.seed
        column.button(
            str(number),
            key=f"set-{number}",
            on_click=open_drill,
            args=(name, timed.seed),
            type="primary" if is_open else "secondary",
            icon=":material/check:" if solved_in_set(timed, name) else None,
            help=f"Drill {number} of the set" + (": open" if is_open else ""),
        )
    st.button("End the set", key="set-end", on_click=end_set)


def countdown(seconds_left: float, presenting: bool) -> None:
    """The set's clock, ticking in the browser (a server clock would rerun the page every second)."""
    st.iframe(  # our own constant HTML with one number in it: safe to run
        f"""
<style>
  html {{ font-size: {20 if presenting else 16}px; }}
  body {{ font-family: "Source Sans Pro", system-ui, sans-serif; margin: 0; color: #31333f; }}
  #left {{ font-variant-numeric: tabular-nums; font-weight: 600; }}
</style>
<span>Time left in this set: </span><span id="left" role="timer" aria-live="off"></span>
<script>
  const end = Date.now() + {int(seconds_left * 1000)}, left = document.getElementById("left");
  const tick = () => {{
    const s = Math.max(0, Math.round((end - Date.now()) / 1000));
    left.textContent = s ? Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0") : "time is up";
  }};
  tick(); setInterval(tick, 500);
</script>""",
        height=36 if presenting else 30,
    )
