"""Practice with the Fix-the-loop drills: each attempt and timed set kept as the learner's progress (ui/progress.py).

A drill's score and a timed set are computed from the records (explorers/progress/history.py), so they
survive a reload, a restarted server and another replica; the answer never goes in the link. The study
plan's Day 7 reads the weakest scores; the notes export lists them. The timed set works the same for the
tensor drills' puzzles (`practice="puzzles"`; ui/puzzles.py keeps their checks).
"""

from __future__ import annotations

import time

import streamlit as st

from explorers.drills import DRILLS, Check
from explorers.progress.history import DrillScore, SetResult, TimedSet, new_set, practice_of
from explorers.progress.records import Record
from explorers.slowstep.catalogue import DRILLS as SLOW_DRILLS
from explorers.tensors.catalogue import PUZZLES
from ui import progress

# What a timed set of each practice is drawn from.
ITEMS = {"drills": DRILLS, "puzzles": PUZZLES, "slowstep": SLOW_DRILLS}
PAGE = "pages/12_Fix_the_loop.py"
OPENED_KEY = "_loop_opened"


def opened(drill: str, seed: int) -> None:
    """The drill's clock starts the first time this session shows it."""
    st.session_state.setdefault(OPENED_KEY, {}).setdefault((drill, seed), time.monotonic())


def record(check: Check, seed: int) -> DrillScore:
    """Keep an attempt: the first one sets the lines and fix scores, the first right one stops the clock."""
    started = st.session_state.get(OPENED_KEY, {}).get((check.drill, seed), time.monotonic())
    data = {
        "seed": seed,
        "lines_found": check.lines_found,
        "lines_total": check.lines_needed,
        "extra_lines": len(check.extra_lines),
        "fix_right": check.fix_right,
        "right": check.right,
        "seconds": time.monotonic() - started if check.right else None,
    }
    progress.add(Record.now("attempt", check.drill, data))
    return score(check.drill, seed)


def score(drill: str, seed: int) -> DrillScore | None:
    return progress.history().drill_scores().get((drill, seed))


def scores() -> list[DrillScore]:
    return list(progress.history().drill_scores().values())


def link(s: DrillScore) -> dict[str, str]:
    """The query that reopens a scored drill on its seed (its opaque id: the name would give the bug away)."""
    return {"drill": DRILLS[s.drill].link_id, "seed": str(s.seed)}


# --- The timed set ---------------------------------------------------------------------------------


def start_set(practice: str = "drills") -> TimedSet:
    timed = new_set(ITEMS[practice], time.time())
    progress.add(timed.start_record())
    return timed


def current_set(practice: str = "drills") -> TimedSet | None:
    """The running set; a set whose clock ran out while nobody looked (a closed tab, a reload) is ended first."""
    history = progress.history()
    now = time.time()
    for expired in [s for s in history.open_sets(practice) if s.remaining_s(now) <= 0]:
        progress.add(history.end_record(expired, now, time_up=True))
    return history.running_set(now, practice)


def solved_in_set(timed: TimedSet, name: str) -> bool:
    return progress.history().solved(name, timed.seed)


def end_set(time_up: bool = False, practice: str = "drills") -> SetResult | None:
    """End the running set: its result is kept, and each drill not solved counts as unsolved (with no attempt,
    if none was made), so Day 7 and the notes list it."""
    timed = current_set(practice)
    if timed is None:
        return None
    progress.add(progress.history().end_record(timed, time.time(), time_up))
    return last_result(practice)


def last_result(practice: str = "drills") -> SetResult | None:
    results = [r for r in progress.history().set_results() if practice_of(r.drills[0]) == practice]
    return results[-1] if results else None


def set_done(timed: TimedSet) -> int:
    return sum(solved_in_set(timed, d) for d in timed.drills)


def end_when_time_is_up(timed: TimedSet) -> None:
    """The server learns the clock ran out: a fragment reruns once the set's time is over and ends it."""

    def check() -> None:
        if timed.remaining_s(time.time()) <= 0:
            current_set(timed.practice)  # ends it, as out of time
            st.rerun()

    st.fragment(check, run_every=max(1.0, timed.remaining_s(time.time()) + 0.5))()


def set_start(start_set, practice: str = "drills") -> TimedSet | None:
    """In the settings: the running set, if any; else the last set's result and a button to start one."""
    timed = current_set(practice)
    if timed is None:
        if last_result(practice):
            st.info(last_result(practice).words(), icon=":material/flag:")
        st.button("Start a timed set of 5", icon=":material/timer:", key="set-start", on_click=start_set)
    return timed


def set_running(timed: TimedSet, drill: str, seed: int, open_drill, presenting: bool) -> None:
    """Above the drill's figure, so it stays on screen on a phone and while presenting: the set's clock, a button
    per drill (the open one marked, the solved ones ticked) and its end."""
    countdown(timed.remaining_s(time.time()), presenting)
    end_when_time_is_up(timed)
    st.caption(f"Timed set: {set_done(timed)} of {len(timed.drills)} solved. Open each by its number.")
    for number, (name, column) in enumerate(zip(timed.drills, st.columns(len(timed.drills)), strict=True), 1):
        is_open = name == drill and seed == timed.seed
        column.button(
            str(number),
            key=f"set-{number}",
            on_click=open_drill,
            args=(name, timed.seed),
            type="primary" if is_open else "secondary",
            icon=":material/check:" if solved_in_set(timed, name) else None,
            help=f"Number {number} of the set" + (": open" if is_open else ""),
        )
    st.button("End the set", key="set-end", on_click=end_set, kwargs={"practice": timed.practice})


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
