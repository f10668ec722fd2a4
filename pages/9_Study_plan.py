"""Study plan: seven days, each linked to its labs, with what the learner did on each and Day 7's weakest answers."""

import streamlit as st

from ui import drill, mock, plan, progress, your_record
from ui.catalogue import LABS, lab
from ui.frame import presenting, start_page

start_page("Study plan", ":material/event_note:")
st.title(":material/event_note: Study plan")
st.markdown(f"<p class='question'>{plan.QUESTION}</p>", unsafe_allow_html=True)

history = progress.history()
visited = history.visited()
right, asked = drill.score()
summary = st.columns(2)
summary[0].metric("Labs opened", len(visited))
summary[1].metric("Predictions answered", f"{right} of {asked} right" if asked else "none yet")
st.caption(progress.where_line())

titles = {entry.slug: entry.title for entry in LABS}
done_on = history.plan_days(progress.zone())
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
            weakest = history.weakest()
            if weakest:
                st.markdown("**Your five weakest answers**")
                for weak in weakest:
                    plan.weak_link(weak)
            else:
                st.caption(plan.NO_WEAK_YET)
        if day.number in done_on:
            st.caption(f":material/check_circle: Your day {day.number}, {done_on[day.number].words(titles)}")

your_record.panel(presenting())

st.subheader("Your answers so far")
answers = sorted(drill.answers().values(), key=lambda a: (a.right, -a.at))  # wrong first, then the latest
if not answers:
    st.write(plan.NO_ANSWERS_YET)
else:
    shown = answers[: plan.ANSWERS_SHOWN]
    st.markdown("\n".join(f"- {'✓' if a.right else '✗'} {progress.plain(a.question)}" for a in shown))
    if len(answers) > len(shown):
        st.caption(plan.more_answers(len(answers) - len(shown)))
