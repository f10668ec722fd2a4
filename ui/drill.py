"""Interview drill for one browser session: predict-then-reveal scores, labs visited, a speaking timer.

Everything lives in the session's state: nothing is stored on the server beyond the session,
and nothing one user does shows up for another.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

ANSWERS_KEY = "_drill_answers"
VISITED_KEY = "_labs_visited"
TIMER_CHOICES = (("30 s", 30), ("2 min", 120), ("10 min", 600))  # headline, four parts, whiteboard pass


@dataclass(frozen=True)
class Answer:
    question: str
    right: bool


def record(key: str, question: str, right: bool) -> None:
    """Count the first answer to a question; later changes of mind are revealed but not rescored."""
    st.session_state.setdefault(ANSWERS_KEY, {}).setdefault(key, Answer(question, right))


def answers() -> dict[str, Answer]:
    return st.session_state.get(ANSWERS_KEY, {})


def score() -> tuple[int, int]:
    given = answers().values()
    return sum(a.right for a in given), len(given)


def visit(slug: str) -> None:
    st.session_state.setdefault(VISITED_KEY, set()).add(slug)


def visited() -> set[str]:
    return st.session_state.get(VISITED_KEY, set())


def timer(presenting: bool = False) -> None:
    """A countdown for a spoken answer, run in the browser (a server-side clock would rerun the page every second).
    Its frame is a page of its own: presenting, its text grows here, as the page's does."""
    buttons = "".join(f"<button onclick='start({seconds})'>{label}</button>" for label, seconds in TIMER_CHOICES)
    st.iframe(  # our own constant HTML (no user text in it), so an iframe that runs its script is safe
        f"""
<style>
  html {{ font-size: {20 if presenting else 16}px; }}
  body {{ font-family: "Source Sans Pro", system-ui, sans-serif; margin: 0; color: #31333f; }}
  button {{ font-size: 1rem; margin-right: 0.4rem; padding: 0.3rem 0.8rem; border-radius: 0.5rem;
           border: 1px solid #ccc; background: white; cursor: pointer; }}
  #left {{ font-variant-numeric: tabular-nums; }}  /* the countdown takes the label's place, on one line */
</style>
<span id="left" aria-live="polite">Say it aloud:</span> {buttons}
<script>
  let clock = null;
  function start(seconds) {{
    clearInterval(clock);
    const end = Date.now() + seconds * 1000, left = document.getElementById("left");
    const tick = () => {{
      const s = Math.max(0, Math.round((end - Date.now()) / 1000));
      left.textContent = s ? Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0") : "Time.";
      if (!s) clearInterval(clock);
    }};
    tick(); clock = setInterval(tick, 250);
  }}
</script>""",
        height=60 if presenting else 48,
    )
