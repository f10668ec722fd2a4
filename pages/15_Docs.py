"""Docs: the project's docs/ pages, read in the app; every lab links to its own."""

import streamlit as st

from ui import docs
from ui.fields import ChoiceField
from ui.frame import start_page

PAGE_FIELD = ChoiceField("page", docs.INDEX, docs.PAGES, label="Page")
values = start_page("Docs", ":material/menu_book:", [PAGE_FIELD])
heading, _, body = docs.text(values["page"]).partition("\n")
st.title(f":material/menu_book: {heading.lstrip('# ')}")
st.markdown(body)
