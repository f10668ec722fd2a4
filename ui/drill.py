"""The predict-then-reveal drill's answers and the labs opened, kept as the learner's progress (ui/progress.py);
and a speaking timer.

Only the first answer to a question counts; it is kept with the question the lab asked, so the study
plan can list it. Nothing one learner does shows up for another.
"""

from __future__ import annotations

import streamlit as st

from explorers.progress.history import Prediction
from explorers.progress.records import MAX_QUESTION_CHARS, Record
from ui import progress

TIMER_CHOICES = (("30 s", 30), ("2 min", 120), ("10 min", 600))  # headline, four parts, whiteboard pass


def record(key: str, question: str, right: bool) -> None:
    """Count the first answer to a question; later changes of mind are revealed but not rescored."""
    if key not in answers():
        asked = " ".join(question.split())[:MAX_QUESTION_CHARS]  # one printable line, as records keep it
        progress.add(Record.now("prediction", key, {"question": asked, "right": right}))


def answers() -> dict[str, Prediction]:
    return progress.history().predictions()


def score() -> tuple[int, int]:
    given = answers().values()
    return sum(a.right for a in given), len(given)


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
