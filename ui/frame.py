"""The frame every page shares: page config, the lab menu, the device choice and URL state.

A lab page calls `start_lab` first and `LabPage.sync_url` once its controls are drawn::

    page = start_lab("autograd", FIELDS)
    page.widget("depth")  # drawn as its field says: label, range, step, help
    page.sync_url()
    options = page.options(AutogradOptions)

Each control's widget state is seeded from the URL the first time the page runs in
a session (or after Streamlit dropped it on a page switch); from then on the widget
owns the value, and `sync_url` writes every value back, so a copied link reopens the
same lab with the same seed.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from explorers import environment
from ui import docs, heap, mock, notes, plan, progress, upload_limits
from ui.catalogue import LABS, Lab, lab
from ui.fields import (
    MAX_RAW_LENGTH,
    BoolField,
    ChoiceField,
    Field,
    FloatField,
    IntField,
    TextField,
    encode_query,
    named,
    options_values,
    read_query,
)
from ui.runs import start_engine

CSS = (Path(__file__).resolve().parent.parent / "assets" / "style.css").read_text()
# For a projector: the sidebar and the controls fold away, every rem-sized thing (text, widgets)
# grows, and figures grow with it (ui.figures reads `presenting()`).
PRESENTING = BoolField("present", False)
PRESENTATION_CSS = """<style>
html { font-size: 20px; } .stMainBlockContainer { max-width: none; }
/* what Streamlit sizes in px, not rem: captions, inline and block code, markdown tables */
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p { font-size: 0.9rem !important; }
[data-testid="stMarkdownContainer"] code, [data-testid="stCode"] code,
[data-testid="stCaptionContainer"] code { font-size: 0.9rem !important; }
[data-testid="stMarkdownContainer"] table, [data-testid="stTable"] table { font-size: 1rem !important; }
[data-testid="stCode"] .linenumber { font-size: 0.9rem !important; }  /* a code block's line numbers */
/* the folded settings are a third of the window: a pair of columns there stacks rather than cut its labels */
[data-testid="stExpander"] [data-testid="stHorizontalBlock"] { flex-wrap: wrap; }
[data-testid="stExpander"] [data-testid="stColumn"] { min-width: min(11rem, 100%); }
</style>"""
# Session-wide, in a plain session key: Streamlit drops a widget's state on a page switch,
# so the toggle's own key would forget the mode between labs.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "")
PRESENTING_KEY = "presenting"
PRESENTING_TOGGLE_KEY = "presenting-toggle"


def presenting() -> bool:
    return bool(st.session_state.get(PRESENTING_KEY, False))


def _start_presenting_state() -> list[str]:
    """The session's presentation mode, from the link on a session's first page; the link's problems."""
    if PRESENTING_KEY in st.session_state:
        return []
    values, notices = read_query([PRESENTING], {k: v for k, v in st.query_params.to_dict().items() if k == "present"})
    st.session_state[PRESENTING_KEY] = values.get(PRESENTING.name, PRESENTING.default)
    return notices


def _presenting_changed() -> None:
    st.session_state[PRESENTING_KEY] = st.session_state[PRESENTING_TOGGLE_KEY]


def setup_page(title: str, icon: str) -> list[str]:
    """Page config, style, the lab menu and the presentation toggle; returns the link's problems, if any."""
    heap.freeze_new_imports()  # before the run makes anything: see ui/heap.py
    notices = _start_presenting_state()
    notes.begin()
    st.set_page_config(
        page_title=f"{title} · PyTorch Explorer",
        page_icon=icon,
        layout="wide",
        # "auto": open on a laptop, closed on a phone, where an open menu would cover the lab
        initial_sidebar_state="collapsed" if presenting() else "auto",
    )
    st.html(f"<style>{CSS}</style>")
    if presenting():
        st.html(PRESENTATION_CSS)
    start_engine()  # workers warm up while the user reads: the first lab run finds them ready
    upload_limits.install_on_server()  # once per server: uploads no widget holds are bounded
    progress.records()  # read once a session: the sidebar and the notice below say whether the store answered
    with st.sidebar:
        st.page_link("app.py", label="PyTorch Explorer", icon=":material/local_fire_department:")
        st.caption("Labs")
        for entry in LABS:
            if entry.page:
                st.page_link(entry.page, label=entry.title, icon=entry.icon)
            else:
                st.markdown(
                    f"{entry.icon} <span class='soon'>{entry.title} · coming soon</span>", unsafe_allow_html=True
                )
        st.page_link(plan.PAGE, label="Study plan", icon=":material/event_note:")
        st.page_link(mock.PAGE, label="Mock interview", icon=":material/record_voice_over:")
        st.page_link(docs.PAGE, label="Docs", icon=":material/menu_book:")
        st.divider()
        st.session_state[PRESENTING_TOGGLE_KEY] = presenting()
        st.toggle(
            "Presentation mode",
            key=PRESENTING_TOGGLE_KEY,
            on_change=_presenting_changed,
            help="For a projector: larger text and figures, settings folded away. It stays on across labs, "
            "and a shared link keeps it.",
        )
        st.caption(progress.where_line())
        progress.remember_in_browser()
    progress.notice()
    return notices


def start_page(title: str, icon: str, fields: Sequence[Field] = ()) -> dict[str, Any]:
    """A page with no controls of its own (home, study plan, mock interview, docs): the frame, and the link's
    problems said as every lab says them; the address bar then holds the presentation mode and the page's own
    `fields` (the docs page's `page`), whose values it returns (a bad one gets its default and a notice)."""
    notices = setup_page(title, icon)
    query = {k: v for k, v in st.query_params.to_dict().items() if k != PRESENTING.name}
    values, problems = read_query(fields, query)
    _say(notices + problems)
    values = {field.name: values.get(field.name, field.default) for field in fields}
    # the address bar holds the mode, as a lab's does: a reload keeps presenting (and the resume code hidden)
    kept = {f.name: f.encode(values[f.name]) for f in fields if values[f.name] != f.default}
    st.query_params.from_dict({**kept, **({PRESENTING.name: "1"} if presenting() else {})})
    return values


def _say(notices: list[str]) -> None:
    for notice in notices:
        st.warning(notice, icon=":material/warning:")


# The widget each kind of field draws unless its field names another.
USUAL_WIDGET = {
    IntField: "slider", FloatField: "slider", ChoiceField: "selectbox", BoolField: "toggle", TextField: "text_input",
}  # fmt: skip


def _draw(where, kind: str, field: Field, low: Any, high: Any, choices: Any, **kwargs: Any) -> None:
    """One widget for one field; `kwargs` carries its key and what the page set for this drawing."""
    label = field.label
    if kind == "slider":
        where.slider(label, low, high, step=field.step, **kwargs)
    elif kind == "number":
        where.number_input(label, low, high, step=field.step or 1, **kwargs)
    elif kind in ("selectbox", "select_slider", "radio", "segmented_control"):
        if field.format is not None:
            kwargs["format_func"] = field.format
        getattr(where, kind)(label, choices, **kwargs)
    elif kind in ("toggle", "checkbox"):
        getattr(where, kind)(label, **kwargs)
    elif kind == "text_input":
        where.text_input(label, max_chars=MAX_RAW_LENGTH, **kwargs)
    else:
        raise ValueError(f"no widget {kind!r} for the field {field.name!r}")


@dataclass(frozen=True)
class LabPage:
    lab: Lab
    fields: tuple[Field, ...]

    def key(self, name: str) -> str:
        return f"{self.lab.slug}.{name}"

    def value(self, name: str) -> Any:
        return st.session_state[self.key(name)]

    def values(self) -> dict[str, Any]:
        return {f.name: self.value(f.name) for f in self.fields}

    def set(self, name: str, value: Any) -> None:
        st.session_state[self.key(name)] = value

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    def widget(self, name: str, where: Any = None, *, high: Any = None, choices: Any = None, **kwargs: Any) -> None:
        """Draw the field's widget in `where` (the page by default).

        `high` and `choices` narrow the field's range to what this run allows (a model's block count,
        the steps a run took); `kwargs` (disabled, help, on_change) are this drawing's own.
        """
        field = self.field(name)
        kind = field.widget or USUAL_WIDGET[type(field)]
        kwargs.setdefault("help", field.help)
        low = getattr(field, "low", None)
        high = getattr(field, "high", None) if high is None else high
        choices = getattr(field, "choices", None) if choices is None else choices
        _draw(where or st, kind, field, low, high, choices, key=self.key(name), **kwargs)

    def options(self, cls: type, **given: Any) -> Any:
        """An options object of `cls` from every field that sets one of its attributes, plus `given`."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in given]
        return cls(**options_values(self.fields, self.values(), names), **given)

    def set_option(self, attribute: str, value: Any) -> None:
        """Move the control that sets an options attribute (a preset, an experiment the lab suggests)."""
        self.set(named(self.fields, attribute).name, value)

    @property
    def device(self) -> str:
        return self.value("device")

    @property
    def presenting(self) -> bool:
        return presenting()

    def controls(self):
        """Where a lab draws its knobs: a bordered box, folded into an expander when presenting."""
        return st.expander("Settings", icon=":material/tune:") if self.presenting else st.container(border=True)

    def workbench(self, beside: bool = True):
        """(controls, stage): the main figure sits beside the knobs, so it is on screen at first sight.

        A figure too wide to share the row (`beside=False`) goes under a compact settings box instead. Presenting,
        the figure takes the whole width and the settings fold into one line under it: a column beside it would
        stand empty under the folded settings.
        """
        if self.presenting:
            with st.container(key="workbench-presenting"):
                stage, controls = st.container(), st.container()
                return controls, stage
        if not beside:
            with st.container(key="workbench-stacked"):
                return st.container(), st.container()
        with st.container(key="workbench"):  # on a phone the columns stack: assets/style.css puts the stage first
            return st.columns([2, 3], gap="large")

    def sync_url(self) -> None:
        """Write every value into the URL, and show that link ready to copy in the sidebar."""
        fields = (*self.fields, PRESENTING)
        query = encode_query(fields, {**self.values(), PRESENTING.name: self.presenting})
        st.query_params.from_dict(query)
        defaults = encode_query(fields, {f.name: f.default for f in fields})
        with st.sidebar:  # the shared link names only what differs from the defaults: short, and it reads
            share_link({name: value for name, value in query.items() if value != defaults[name]})


def share_link(query: dict[str, str]) -> None:
    """The link that reopens this lab as it is now; st.code draws it with a copy button."""
    base = (st.context.url or "").split("?")[0]
    st.caption("Share this lab as it is now (same settings, same seed):")
    st.code(f"{base}?{urllib.parse.urlencode(query)}" if query else base, language=None, wrap_lines=True)
    host = urllib.parse.urlsplit(base).hostname or ""
    if host in LOOPBACK_HOSTS:
        st.caption(
            "This server answers this computer only. To share with a group on your network, "
            "start it with `make run HOST=0.0.0.0` (see docs/serving.md)."
        )


def start_lab(slug: str, fields: Sequence[Field]) -> LabPage:
    """Page config, menu, header, URL state and the device choice for one lab."""
    entry = lab(slug)
    notices = setup_page(entry.title, entry.icon)
    progress.visit(slug)
    devices = tuple(environment.available_devices())
    device = ChoiceField("device", "cpu", devices, label="Device", help="CUDA and MPS appear only when present.")
    page = LabPage(entry, (*fields, device))
    notices += _seed_state_from_url(page)
    st.title(f"{entry.icon} {entry.title}")
    st.markdown(f"<p class='question'>{entry.question}</p>", unsafe_allow_html=True)
    if entry.follows:
        st.caption(entry.follows)
    _say(notices)
    with st.sidebar:
        page.widget("device")
        st.caption(environment.provenance(page.device))
        st.page_link(
            docs.PAGE,
            label=f"The {entry.title} docs: controls, notebook API, sources",
            icon=":material/menu_book:",
            query_params={"page": docs.lab_page(slug)},
        )
    return page


def _seed_state_from_url(page: LabPage) -> list[str]:
    """Give every control without state its value from the URL (or its default); return the URL's problems."""
    missing = [f for f in page.fields if page.key(f.name) not in st.session_state]
    if not missing:
        return []
    query = {k: v for k, v in st.query_params.to_dict().items() if k != PRESENTING.name}  # setup_page reads it
    values, notices = read_query(page.fields, query)
    for field in missing:
        page.set(field.name, values.get(field.name, field.default))
    return notices
