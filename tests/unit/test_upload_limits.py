"""Streamlit's own upload manager, bounded: what a session posts to ids no widget uses does not pile up."""

from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
from streamlit.runtime.uploaded_file_manager import UploadedFileRec

from ui import upload_limits

MIB = 2**20


def record(file_id: str, nbytes: int) -> UploadedFileRec:
    return UploadedFileRec(file_id=file_id, name=f"{file_id}.json", type="application/json", data=b"x" * nbytes)


def held(manager, session: str) -> list[str]:
    return list(manager.file_storage.get(session, {}))


def test_a_session_keeps_only_its_newest_files_and_a_widgets_current_file_stays():
    manager = MemoryUploadedFileManager("/_stcore/upload_file")
    assert upload_limits.install(manager) and upload_limits.install(manager)  # once, however often it is called
    for i in range(30):  # the probe: 30 files to ids no widget uses
        manager.add_file("probe", record(f"f{i}", MIB))
    assert held(manager, "probe") == ["f28", "f29"]
    assert manager._total_bytes == 2 * MIB  # Streamlit's own count agrees: the bytes were let go
    assert [r.file_id for r in manager.get_files("probe", ["f29"])] == ["f29"]


def test_the_total_is_bounded_and_the_session_holding_most_loses_its_oldest_first():
    manager = MemoryUploadedFileManager("/_stcore/upload_file")
    upload_limits.install(manager)
    manager.add_file("student", record("results", 8 * MIB))
    size = upload_limits.TOTAL_BYTES // (2 * 8) + 1  # many sessions, each within its own bound
    for n in range(2 * 8):
        manager.add_file(f"probe-{n}", record("a", size * 4))
        manager.add_file(f"probe-{n}", record("b", size * 4))
    total = sum(len(r.data) for files in manager.file_storage.values() for r in files.values())
    assert total <= upload_limits.TOTAL_BYTES
    assert held(manager, "student") == ["results"]  # the one honest upload is not the one dropped


def test_a_manager_of_another_shape_is_left_alone():
    class Other:
        def add_file(self, session_id, file):
            pass

    assert not upload_limits.install(Other())
