"""Bounds on the files Streamlit keeps from its upload endpoint: per session and in all.

Streamlit's `MemoryUploadedFileManager` keeps every file PUT to
`/_stcore/upload_file/<session>/<file id>` in the server's memory until the session ends,
whether or not a widget ever asks for it: one session that posts 30 files of 8 MiB to ids
no widget uses holds 240 MiB for as long as its tab stays open (measured: the server grew
by 470 MB and stayed there). The app's uploaders take one file each and a session shows one
page at a time, so a session needs only its newest file or two. The manager here keeps a
session's newest `KEEP_PER_SESSION` files and `TOTAL_BYTES` over every session (the oldest
files of the session holding most go first), and hands freed memory back to the system.

A widget whose file was dropped reads no file on its next run, as if the user had removed it.
This reaches into Streamlit's manager (its `file_storage` and `_lock`), so `install` checks they
are there and leaves the manager alone, saying so, when a Streamlit version has changed them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import threading

KEEP_PER_SESSION = 2
TOTAL_BYTES = 64 * 2**20
_installed = threading.Lock()


def install_on_server() -> bool:
    """Bound the running server's manager (a no-op outside a server, e.g. under AppTest)."""
    from streamlit.runtime import Runtime

    if not Runtime.exists():
        return False
    bounded = install(Runtime.instance().uploaded_file_mgr)
    if not bounded:
        logging.getLogger(__name__).warning("uploads are not bounded: Streamlit's upload manager changed shape")
    return bounded


def install(manager) -> bool:
    """Bound `manager` (a `MemoryUploadedFileManager`) once; False when it is not one this module knows."""
    with _installed:
        if getattr(manager, "_explorer_bounded", False):
            return True
        if not all(hasattr(manager, name) for name in ("add_file", "remove_file", "file_storage", "_lock")):
            return False
        original = manager.add_file

        @functools.wraps(original)
        def add_file(session_id, file) -> None:
            original(session_id, file)
            evicted = evict(manager, session_id)
            if evicted:
                _return_memory()

        manager.add_file = add_file
        manager._explorer_bounded = True
        return True


def evict(manager, session_id: str) -> int:
    """Drop what is over the bounds after a file arrived for `session_id`; the number of files dropped."""
    with manager._lock:  # a consistent picture; remove_file takes the lock itself, so it is called after
        storage = manager.file_storage
        own = list(storage.get(session_id, {}))  # insertion order: oldest first
        doomed = [(session_id, file_id) for file_id in own[: max(len(own) - KEEP_PER_SESSION, 0)]]
        sizes = {
            (session, file_id): len(record.data)
            for session, files in storage.items()
            for file_id, record in files.items()
            if (session, file_id) not in doomed
        }
    total = sum(sizes.values())
    while total > TOTAL_BYTES and sizes:
        held: dict[str, int] = {}
        for (session, _), nbytes in sizes.items():
            held[session] = held.get(session, 0) + nbytes
        largest = max(held, key=held.get)
        oldest = next(key for key in sizes if key[0] == largest)
        doomed.append(oldest)
        total -= sizes.pop(oldest)
    for session, file_id in doomed:
        manager.remove_file(session, file_id)
    return len(doomed)


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


def _return_memory() -> None:
    """glibc keeps freed heap memory for reuse; malloc_trim hands it back, so the server's RSS falls again."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
