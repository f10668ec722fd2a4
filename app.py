"""PyTorch Explorer home: the lab map and the facts of the machine the labs run on.

Run with `make run` (or `streamlit run app.py`); each lab lives in pages/.
"""

import streamlit as st

from explorers import environment
from ui import mock, plan
from ui.catalogue import LABS
from ui.frame import start_page

start_page("Home", ":material/local_fire_department:")
st.title(":material/local_fire_department: PyTorch Explorer")
st.markdown(
    "<p class='question'>Labs that show how PyTorch behaves inside a real training system. "
    "Every number on screen comes from a run on this machine, just now.</p>",
    unsafe_allow_html=True,
)

first = next(lab for lab in LABS if lab.page)
st.info(
    f"New here? Start with **{first.title}**: it shows the graph every other lab builds on. "
    "Preparing for interviews? The study plan lays out seven days.",
    icon=":material/flag:",
)
with st.container(horizontal=True):  # links as wide as their labels: none is cut at any width
    st.page_link(first.page, label=f"Start with {first.title}", icon=first.icon)
    st.page_link(plan.PAGE, label="Open the study plan", icon=":material/event_note:")
    st.page_link(mock.PAGE, label="Try a mock interview", icon=":material/record_voice_over:")

st.subheader("The labs")
ready = [lab for lab in LABS if lab.page]
for row_start in range(0, len(ready), 4):
    for column, lab in zip(st.columns(4), ready[row_start : row_start + 4], strict=False):
        with column.container(border=True, height="stretch"):
            st.page_link(lab.page, label=f"**{lab.title}**", icon=lab.icon)
            st.write(lab.question)
coming = [lab for lab in LABS if not lab.page]
if coming:
    st.caption("Coming soon")
    st.markdown("".join(f"<p class='soon'>{lab.title}: {lab.question}</p>" for lab in coming), unsafe_allow_html=True)

st.subheader("This machine")
st.table({"fact": list(environment.facts()), "value": list(environment.facts().values())})
st.caption(
    "Each lab's figures say which device and torch version produced them. Share a lab's URL to reopen it "
    "with the same settings and seed."
)
