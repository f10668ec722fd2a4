"""Study plan: seven days, each linked to its labs, with this session's progress."""

import streamlit as st

from ui import drill
from ui.catalogue import lab
from ui.frame import setup_page
from ui.plan import DAYS

setup_page("Study plan", ":material/event_note:")
st.title(":material/event_note: Study plan")
st.markdown(
    "<p class='question'>Seven days to answer the eight questions out loud, with evidence.</p>",
    unsafe_allow_html=True,
)

right, asked = drill.score()
visited = drill.visited()
progress = st.columns(2)
progress[0].metric("Labs visited this session", len(visited))
progress[1].metric("Predictions answered", f"{right} of {asked} right" if asked else "none yet")
st.caption(
    "Progress lives in this browser session's state on the server, in memory: it is not written to disk, "
    "and it is gone when the session ends or the server restarts."
)

for day in DAYS:
    with st.container(border=True):
        st.markdown(f"**Day {day.number}. {day.task}**")
        st.write(day.how)
        ready = [lab(slug) for slug in day.labs]
        if ready:
            columns = st.columns(len(ready))
            for column, entry in zip(columns, ready, strict=True):
                done = " ✓" if entry.slug in visited else ""
                if entry.page:
                    column.page_link(entry.page, label=f"{entry.title}{done}", icon=entry.icon)
                else:
                    column.markdown(f"{entry.title} · coming soon")
                column.caption(entry.question)

st.subheader("Your answers so far")
if not drill.answers():
    st.write("Answer a lab's predict-then-reveal question and it appears here; wrong first answers come first.")
else:
    ordered = sorted(drill.answers().values(), key=lambda a: a.right)
    st.markdown("\n".join(f"- {'✓' if a.right else '✗'} {a.question}" for a in ordered))
