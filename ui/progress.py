"""The learner's progress in the app: who they are (a cookie), their records (read once a session, then written
through on every change) and what the page says when the store cannot be reached.

The learner id lives in a first-party cookie, `explorer_learner`, that a script on the page sets (Streamlit
sends the cookie back with each new session's connection, so a reload, a restarted server and another
replica all read it). It is never in a link. The records are in the database `explorers.progress.store`
opens: SQLite in the data folder, or `DATABASE_URL`.

When the store fails (disk full, database down, read-only folder), everything still works from this
session's memory: `add` keeps the record in an unsaved list, each page says progress is not being
saved, and the next write after the store's retry wait saves what was kept.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorers.progress import learner as ids
from explorers.progress.history import History
from explorers.progress.records import Record
from explorers.progress.store import Forgotten, Store, StoreUnavailable, default_url, open_store

COOKIE = "explorer_learner"
COOKIE_MAX_AGE_S = 400 * 24 * 3600  # the longest a browser keeps a cookie (Chrome caps it at 400 days)
LEARNER_KEY = "_learner"
RECORDS_KEY = "_progress_records"  # the learner's records as this session knows them, oldest first
LOADED_KEY = "_progress_loaded"  # the records above include the store's
UNSAVED_KEY = "_progress_unsaved"  # kept here while the store could not take them
DOWN_KEY = "_progress_down"  # why the store failed, while it fails
FORGOTTEN_KEY = "_progress_forgotten"  # this session's learner was deleted elsewhere: nothing more is saved
COOKIE_SET_KEY = "_learner_cookie_set"  # the id this session's page last wrote to the cookie
VISITS_KEY = "_progress_visits"  # (lab, date) visits written this session
HISTORY_KEY = "_progress_history"  # (which records, their History)
SLOT_KEY = "_progress_slot"  # this run's notice at the top of the page
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
_CODE_SPAN = re.compile(r"(`[^`\n]+`)")


def store() -> Store:
    return open_store(default_url())


def learner() -> str:
    """This browser's learner id: the cookie's, else a new one (the page then writes it to the cookie)."""
    if LEARNER_KEY not in st.session_state:
        from_cookie = st.context.cookies.get(COOKIE, "")
        st.session_state[LEARNER_KEY] = from_cookie if ids.is_id(from_cookie) else ids.new_id()
    return st.session_state[LEARNER_KEY]


def _sync() -> None:
    """Load the store's records once a session, and save what the store could not take before."""
    state = st.session_state
    state.setdefault(RECORDS_KEY, [])
    if state.get(FORGOTTEN_KEY) or (state.get(LOADED_KEY) and not state.get(UNSAVED_KEY)):
        return
    try:
        if not state.get(LOADED_KEY):
            if store().forgotten(ids.digest(learner())):  # deleted, from a tab or device that still had the id
                state[LEARNER_KEY] = ids.new_id()  # the page writes it to the cookie
            state[RECORDS_KEY] = store().records(ids.digest(learner())) + list(state.get(UNSAVED_KEY, []))
            state[LOADED_KEY] = True
        key = ids.digest(learner())
        if state.get(UNSAVED_KEY):
            store().add_many(key, state[UNSAVED_KEY])
            state[UNSAVED_KEY] = []
        state.pop(DOWN_KEY, None)
    except StoreUnavailable as error:
        state[DOWN_KEY] = str(error)
    except Forgotten:
        state[FORGOTTEN_KEY] = True
    _say_in_slot()  # a failure halfway down the page is said at its top


def records() -> list[Record]:
    _sync()
    return st.session_state[RECORDS_KEY]


def history() -> History:
    """The views of this session's records, made again only when the records change."""
    kept = records()
    made = st.session_state.get(HISTORY_KEY)
    if made is None or made[0] != (id(kept), len(kept)):
        made = ((id(kept), len(kept)), History(kept))
        st.session_state[HISTORY_KEY] = made
    return made[1]


def add(*kept: Record) -> None:
    """Keep records: in this session at once, and in the store in one transaction (now, or once it is back)."""
    _sync()
    st.session_state[RECORDS_KEY].extend(kept)
    st.session_state.setdefault(UNSAVED_KEY, []).extend(kept)
    _sync()


def visit(slug: str) -> None:
    """A lab opened today: one record per lab and day (per session; the views count a day once)."""
    today = dt.date.today().isoformat()
    written = st.session_state.setdefault(VISITS_KEY, set())
    if (slug, today) not in written:
        written.add((slug, today))
        add(Record.now("visit", slug, {}))


def down() -> str | None:
    """Why progress is not being saved now, or None while it is."""
    return st.session_state.get(DOWN_KEY)


def zone() -> dt.tzinfo:
    """The browser's time zone (its days are the learner's days), else UTC."""
    name = st.context.timezone
    try:
        return zoneinfo.ZoneInfo(name) if isinstance(name, str) and len(name) < 64 else dt.UTC
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return dt.UTC


def plain(text: str) -> str:
    """Text from a record, for markdown: every punctuation mark outside `code spans` escaped, so it is shown as
    typed and never becomes a link, an image, HTML, LaTeX or a Streamlit directive (inside a code span,
    markdown shows everything as typed already)."""
    parts = _CODE_SPAN.split(text)
    return "".join(part if n % 2 else _MARKDOWN_PUNCTUATION.sub(r"\\\1", part) for n, part in enumerate(parts))


def where_line() -> str:
    """The sidebar's one line: what is kept and where, or that it is not being saved."""
    if st.session_state.get(FORGOTTEN_KEY):
        return "Progress is not being saved: this record was deleted."
    if down():
        return "Progress is not being saved now. This tab keeps what you do until it can be, or until you reload."
    return f"Your scores and answers are saved in {store().kind} under an anonymous id this browser keeps."


def notice() -> None:
    """At the top of every page: a slot that says, whenever in the run it happens, that progress is not being saved
    (the store fails) or that this tab's record was deleted elsewhere."""
    st.session_state[SLOT_KEY] = (_this_run(), st.empty())
    _say_in_slot()


def _this_run() -> int | None:
    """Which script run this is: each run starts with a fresh cursor map (widget callbacks run in the new run)."""
    ctx = get_script_run_ctx()
    return id(ctx.cursors) if ctx else None


def _say_in_slot() -> None:
    run, slot = st.session_state.get(SLOT_KEY, (None, None))
    if slot is None or run != _this_run():  # a callback before this run's slot exists: the slot will say it
        return
    if st.session_state.get(FORGOTTEN_KEY):
        slot.warning(
            "Your record was deleted, in another tab or on another device: nothing more is saved in this tab. "
            "Reload the page to continue with a new, empty record.",
            icon=":material/delete:",
        )
    elif down():
        slot.warning(
            f"Progress is not being saved: {plain(down())}. The labs work as before; this tab keeps what you do "
            "and saves it once the store is back (a reload before then loses it).",
            icon=":material/cloud_off:",
        )
    else:
        slot.empty()


def remember_in_browser() -> None:
    """Write the learner id to this browser's cookie when the browser does not hold it yet."""
    wanted = learner()
    if st.context.cookies.get(COOKIE) == wanted or st.session_state.get(COOKIE_SET_KEY) == wanted:
        return
    st.session_state[COOKIE_SET_KEY] = wanted
    # Our own constant script with the id, 32 base32 characters checked by ids.is_id: no user text in it.
    secure = '+ (location.protocol === "https:" ? "; Secure" : "")'
    st.html(
        f'<script>document.cookie = "{COOKIE}={wanted}; Max-Age={COOKIE_MAX_AGE_S}; Path=/; SameSite=Strict" '
        f"{secure};</script>",
        unsafe_allow_javascript=True,
    )


def switch_to(new_id: str) -> int:
    """Continue as another learner (a resume code typed here): this device's records join theirs, and this browser
    keeps the new id. Returns how many records moved over."""
    old = learner()
    mine = records()
    st.session_state[LEARNER_KEY] = new_id
    for key in (RECORDS_KEY, LOADED_KEY, VISITS_KEY, FORGOTTEN_KEY):
        st.session_state.pop(key, None)
    st.session_state[UNSAVED_KEY] = list(mine)  # saved under the new id by the next sync, in one transaction
    _sync()
    if not down():
        try:
            store().delete(ids.digest(old))
        except StoreUnavailable as error:
            st.session_state[DOWN_KEY] = str(error)
    return len(mine)


def forget() -> int:
    """Delete this learner's record from the store and start a new, empty one; returns how many were deleted."""
    deleted = store().delete(ids.digest(learner()))  # raises StoreUnavailable: nothing is forgotten then
    for key in (LEARNER_KEY, RECORDS_KEY, LOADED_KEY, UNSAVED_KEY, VISITS_KEY, DOWN_KEY, FORGOTTEN_KEY):
        st.session_state.pop(key, None)
    st.session_state[LEARNER_KEY] = ids.new_id()  # not the cookie's: the page writes the new one over it
    return deleted
