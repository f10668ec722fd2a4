"""The learner's own record, on the study plan: the resume code, export, import and delete.

Each action runs in its widget's callback, before the page draws, so the plan above it already shows the
record as the action left it; what the action did is said once, in the panel.
"""

from __future__ import annotations

import functools

import streamlit as st

from explorers.progress import learner as ids
from explorers.progress import transfer
from explorers.progress.store import StoreUnavailable
from explorers.wording import count
from ui import progress

SAID_KEY = "_record_said"  # (ok, words) of the last action, shown once
TITLE = "Your record: resume code, export, import, delete"
KEPT = (
    "Kept: the labs you opened and when, your first answer to each prediction, your Fix-the-loop attempts, your "
    "tensor puzzle checks (not the expression), timed sets, and your mock interview self-scores. It holds no "
    "name, no e-mail address, no file a lab reads and no text you type."
)


def panel(presenting: bool) -> None:
    with st.expander(TITLE, icon=":material/badge:", expanded=SAID_KEY in st.session_state):
        st.caption(f"{KEPT} Where: {progress.store().where}.")
        _resume_code(presenting)
        st.text_input(
            "Continue with a resume code from another device",
            max_chars=ids.MAX_CODE_CHARS,
            key="record-code",
            placeholder="XXXX-XXXX-XXXX-XXXX-XXXX-XXXX-XXXX-XXXX",
        )
        st.caption("What this browser has done so far joins the record the code names.")
        st.button("Continue with this code", key="record-continue", on_click=_continue)
        st.download_button(
            "Export my record (JSON)",
            functools.partial(transfer.export, list(progress.records())),  # made on the click, not every rerun
            file_name="pytorch-explorer-progress.json",
            mime="application/json",
            icon=":material/download:",
            key="record-export",
        )
        st.file_uploader(
            "Import a record (a JSON export)",
            type=["json"],
            key="record-import",
            max_upload_size=transfer.MAX_BYTES // 2**20,
            on_change=_import,
        )
        sure = st.checkbox("I want to delete my record from this server", key="record-delete-sure")
        st.button(
            "Delete my record", key="record-delete", disabled=not sure, icon=":material/delete:", on_click=_delete
        )
        if SAID_KEY in st.session_state:
            ok, words = st.session_state.pop(SAID_KEY)
            (st.success if ok else st.error)(words, icon=":material/check:" if ok else ":material/error:")


def _resume_code(presenting: bool) -> None:
    st.markdown("**Resume code.** Type it on another device to continue your record there.")
    if presenting:
        st.caption("Hidden while presenting: leave presentation mode to see it.")
        return
    st.code(ids.resume_code(progress.learner()), language=None)
    st.caption("Anyone who has it can read and change your record: keep it like a password.")


def _say(ok: bool, words: str) -> None:
    st.session_state[SAID_KEY] = (ok, words)


def _continue() -> None:
    new_id = ids.parse_code(st.session_state.get("record-code") or "")
    if new_id is None:
        _say(False, "That is not a resume code: 32 letters and digits, in groups of four.")
    elif new_id == progress.learner():
        _say(True, "That is this browser's own code already.")
    elif _deleted(new_id):
        _say(False, "That code's record was deleted, or the store cannot say now: nothing changed.")
    else:
        moved = progress.switch_to(new_id)
        kept = count(len(progress.records()), "record")
        _say(True, f"Continuing with that code's record: {kept} now, {moved} of them from this browser.")
    st.session_state["record-code"] = ""


def _deleted(learner_id: str) -> bool:
    try:
        return progress.store().forgotten(ids.digest(learner_id))
    except StoreUnavailable:
        return True


def _import() -> None:
    upload = st.session_state.get("record-import")
    if upload is None:
        return
    try:
        imported = transfer.read(upload.getvalue())
    except transfer.Refused as refused:
        _say(False, f"Not imported. {progress.plain(str(refused))}")
        return
    fresh = transfer.new_records(progress.records(), imported)
    progress.add(*fresh)
    if progress.down():
        _say(False, "Read, but not saved yet: progress is not being saved now (see the notice at the top).")
        return
    already = len(imported) - len(fresh)
    _say(
        True, f"Imported {count(len(fresh), 'record')}" + (f" ({already} already in your record)." if already else ".")
    )


def _delete() -> None:
    try:
        deleted = progress.forget()
    except StoreUnavailable as error:
        _say(False, f"Nothing deleted: the store is unavailable ({progress.plain(str(error))}).")
        return
    st.session_state["record-delete-sure"] = False
    _say(True, f"Deleted {count(deleted, 'record')}. This browser now starts a new, empty record.")
