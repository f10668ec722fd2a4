"""PyTorch Explorer home: the lab map and the facts of the machine the labs run on.

Run with `make run` (or `streamlit run app.py`); each lab lives in pages/.
"""

import streamlit as st

from explorers import environment
from ui.catalogue import LABS
from ui.frame import setup_page

setup_page("Home", ":material/local_fire_department:")
st.title(":material/local_fire_department: PyTorch Explorer")
st.markdown(
    "<p class='question'>Labs that show how PyTorch behaves inside a real training system. "
    "Every number on screen comes from a run on this machine, just now.</p>",
    unsafe_allow_html=True,
)

st.subheader("The labs")
for row_start in range(0, len(LABS), 4):
    for column, lab in zip(st.columns(4), LABS[row_start : row_start + 4], strict=False):
        with column.container(border=True, height="stretch"):
            if lab.page:
                st.page_link(lab.page, label=f"**{lab.title}**", icon=lab.icon)
            else:
                st.markdown(
                    f"{lab.icon} **{lab.title}** · <span class='soon'>coming soon</span>", unsafe_allow_html=True
                )
            st.write(lab.question)

st.subheader("This machine")
st.table({"fact": list(environment.facts()), "value": list(environment.facts().values())})
st.caption(
    "Each lab's figures say which device and torch version produced them. Share a lab's URL to reopen it "
    "with the same settings and seed."
)
