"""Study plan: seven days, each linked to its labs, with this session's progress."""

import streamlit as st

from ui import drill, mock, plan, practice
from ui.catalogue import lab
from ui.frame import start_page

start_page("Study plan", ":material/event_note:")
st.title(":material/event_note: Study plan")
st.markdown(f"<p class='question'>{plan.QUESTION}</p>", unsafe_allow_html=True)

right, asked = drill.score()
visited = drill.visited()
progress = st.columns(2)
progress[0].metric("Labs visited this session", len(visited))
progress[1].metric("Predictions answered", f"{right} of {asked} right" if asked else "none yet")
st.caption(plan.WHERE_PROGRESS_LIVES)

for day in plan.DAYS:
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
        if day.number == 6:
            st.page_link(mock.PAGE, label="Mock interview", icon=":material/record_voice_over:")
        if day.number == 7:
            weakest = mock.weakest()
            if weakest:
                st.markdown("**Your weakest mock answers**")
                st.markdown("\n".join(f"- {s.points} of {len(mock.RUBRIC)}: {s.question}" for s in weakest))
            else:
                st.caption(mock.NO_SCORES_YET)
            weakest_drills = practice.weakest()
            if weakest_drills:
                st.markdown("**Your weakest Fix-the-loop drills**")
                for score in weakest_drills:  # each a link back to its drill and seed, to redo it
                    st.page_link(practice.PAGE, label=practice.describe(score), query_params=practice.link(score))
            else:
                st.caption(practice.NO_DRILLS_YET)

st.subheader("Your answers so far")
if not drill.answers():
    st.write(plan.NO_ANSWERS_YET)
else:
    ordered = sorted(drill.answers().values(), key=lambda a: a.right)
    st.markdown("\n".join(f"- {'✓' if a.right else '✗'} {a.question}" for a in ordered))
