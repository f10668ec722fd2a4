"""The learner's own record, on the study plan: the resume code, export, import and delete."""

from __future__ import annotations

import streamlit as st

from explorers.progress import learner as ids
from explorers.progress import transfer
from explorers.progress.store import StoreUnavailable
from ui import progress

IMPORTED_KEY = "_progress_imported"  # the uploaded files already imported, by file id
TITLE = "Your record: resume code, export, import, delete"
KEPT = (
    "Kept: the labs you opened and when, your first answer to each prediction, your Fix-the-loop attempts and "
    "timed sets, and your mock interview self-scores. No name, no e-mail address, no upload, nothing you type."
)


def panel(presenting: bool) -> None:
    with st.expander(TITLE, icon=":material/badge:"):
        st.caption(f"{KEPT} Where: {progress.store().where}.")
        _resume_code(presenting)
        _continue_with_code()
        st.download_button(
            "Export my record (JSON)",
            transfer.export(progress.records()),
            file_name="pytorch-explorer-progress.json",
            mime="application/json",
            icon=":material/download:",
            key="record-export",
        )
        _import()
        _delete()


def _resume_code(presenting: bool) -> None:
    st.markdown("**Resume code.** Type it on another device to continue your record there.")
    if presenting:
        st.caption("Hidden while presenting: leave presentation mode to see it.")
        return
    st.code(ids.resume_code(progress.learner()), language=None)
    st.caption("Anyone who has it can read and change your record: keep it like a password.")


def _continue_with_code() -> None:
    typed = st.text_input(
        "Continue with a resume code from another device",
        max_chars=ids.MAX_CODE_CHARS,
        key="record-code",
        placeholder="XXXX-XXXX-XXXX-XXXX-XXXX-XXXX-XXXX-XXXX",
    )
    if not st.button("Continue with this code", key="record-continue", disabled=not typed):
        return
    new_id = ids.parse_code(typed)
    if new_id is None:
        st.error("That is not a resume code: 32 letters and digits, in groups of four.", icon=":material/error:")
    elif new_id == progress.learner():
        st.info("That is this browser's own code already.")
    else:
        moved = progress.switch_to(new_id)
        kept = len(progress.records())
        st.success(
            f"Continuing with that code: {kept} records. This browser's {moved} were added to them.",
            icon=":material/check:",
        )


def _import() -> None:
    upload = st.file_uploader(
        "Import a record (a JSON export)",
        type=["json"],
        key="record-import",
        max_upload_size=transfer.MAX_BYTES // 2**20,
    )
    if upload is None:
        return
    done = st.session_state.setdefault(IMPORTED_KEY, {})
    if upload.file_id not in done:
        done[upload.file_id] = _import_words(upload.getvalue())
    ok, words = done[upload.file_id]
    (st.success if ok else st.error)(words, icon=":material/check:" if ok else ":material/error:")


def _import_words(data: bytes) -> tuple[bool, str]:
    try:
        imported = transfer.read(data)
    except transfer.Refused as refused:
        return False, f"Not imported. {progress.plain(str(refused))}"
    fresh = transfer.new_records(progress.records(), imported)
    progress.add(*fresh)
    if progress.down():
        return False, "Read, but not saved: progress is not being saved now (see the notice at the top)."
    already = len(imported) - len(fresh)
    return True, f"Imported {len(fresh)} records" + (f" ({already} were already in your record)." if already else ".")


def _delete() -> None:
    sure = st.checkbox("I want to delete my record from this server", key="record-delete-sure")
    if st.button("Delete my record", key="record-delete", disabled=not sure, icon=":material/delete:"):
        try:
            deleted = progress.forget()
        except StoreUnavailable as error:
            st.error(f"Nothing deleted: the store is unavailable ({progress.plain(str(error))}).")
            return
        st.success(f"Deleted {deleted} records. This browser now starts a new, empty record.")
