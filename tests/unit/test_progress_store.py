"""The progress store on both databases it supports: SQLite (a file) and PostgreSQL (a throwaway cluster).

Every test runs on each: isolation between learners, the schema migration, 50 learners writing at
once through two processes, a writer killed with SIGKILL mid-write, and a store that is unavailable.
"""

from __future__ import annotations

import json
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from explorers.progress import learner, store
from explorers.progress.records import Record
from tests.progress_writers import learner_id

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'progress.sqlite3'}"
    server = request.getfixturevalue("postgres_url")
    name = f"t_{secrets.token_hex(6)}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return server.rsplit("/", 1)[0] + f"/{name}"


INDEX = "progress_records_by_learner"


def indexes(connection: sa.Connection) -> set[str]:
    return {index["name"] for index in sa.inspect(connection).get_indexes(store.RECORDS.name)}


def visit(slug: str = "autograd") -> Record:
    return Record.now("visit", slug, {})


def test_a_learner_reads_only_their_own_records_and_an_unknown_id_reads_none(url):
    kept = store.Store(url)
    me, other = learner.digest(learner.new_id()), learner.digest(learner.new_id())
    kept.add(me, visit("autograd"))
    kept.add(other, visit("modes"))
    kept.add(me, Record.now("mock", "ddp", {"points": 3}))
    assert [(r.kind, r.key) for r in kept.records(me)] == [("visit", "autograd"), ("mock", "ddp")]
    assert [r.key for r in kept.records(other)] == ["modes"]
    assert kept.records(learner.digest(learner.new_id())) == []  # no error, nothing of anyone's
    assert kept.delete(me) == 2 and kept.records(me) == [] and [r.key for r in kept.records(other)] == ["modes"]


def test_a_deleted_learner_stays_deleted_when_a_tab_left_open_writes_again(url):
    kept = store.Store(url)
    me = learner.digest(learner.new_id())
    kept.add(me, visit())
    assert kept.delete(me) == 1 and kept.forgotten(me)
    with pytest.raises(store.Forgotten):
        kept.add(me, visit("modes"))
    assert kept.records(me) == [] and kept.delete(me) == 0  # deleting again is harmless


def test_a_visitor_reads_no_path_host_or_password_in_where_or_in_a_failure(url, caplog):
    assert "/" not in store.Store(url).where and "explorer@" not in store.Store(url).where
    broken = store.Store("sqlite:////dev/null/secret-folder/progress.sqlite3")
    with pytest.raises(store.StoreUnavailable) as failed:
        broken.add(learner.digest(learner.new_id()), visit())
    assert str(failed.value) == "the data folder cannot be used"
    assert "secret-folder" in caplog.text  # the server's log has the full error


def test_the_store_files_rows_under_a_digest_and_never_the_id(url):
    kept = store.Store(url)
    me = learner.new_id()
    kept.add(learner.digest(me), visit())
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(sa.select(store.RECORDS)).mappings().all()
    engine.dispose()
    assert len(rows) == 1 and rows[0]["learner"] == learner.digest(me) and me not in json.dumps(dict(rows[0]))


def test_an_older_database_is_migrated_on_open_and_a_newer_one_is_left_alone(url):
    engine = sa.create_engine(url)
    assert store.migrate(engine, to=1) == 0  # the schema as version 1 made it: the table, no index
    key = learner.digest(learner.new_id())
    with engine.begin() as connection:
        connection.execute(
            sa.insert(store.RECORDS).values(learner=key, kind="visit", key="autograd", at=time.time(), data="{}")
        )
        assert "progress_records_by_learner" not in {
            i["name"] for i in sa.inspect(connection).get_indexes(store.RECORDS.name)
        }
    kept = store.Store(url)
    assert [r.key for r in kept.records(key)] == ["autograd"] and kept.version() == store.SCHEMA_VERSION
    with engine.connect() as connection:
        assert "progress_records_by_learner" in {
            i["name"] for i in sa.inspect(connection).get_indexes(store.RECORDS.name)
        }
    with engine.begin() as connection:
        connection.execute(sa.update(store.SCHEMA).values(version=store.SCHEMA_VERSION + 1))
    engine.dispose()
    newer = store.Store(url)
    with pytest.raises(store.StoreUnavailable, match="newer than this app"):
        newer.add(key, visit())
    engine = sa.create_engine(url)
    with engine.connect() as connection:  # untouched: the one row, the newer version
        assert connection.execute(sa.select(sa.func.count()).select_from(store.RECORDS)).scalar() == 1
        assert connection.execute(sa.select(store.SCHEMA.c.version)).scalar() == store.SCHEMA_VERSION + 1
    engine.dispose()


def test_fifty_learners_writing_at_once_through_two_processes_lose_no_record(url):
    threads, records = 25, 20  # per process: 2 x 25 learners, 1,000 records in all
    store.Store(url).count()  # not needed for correctness: both processes would migrate it once, under a lock
    command = [sys.executable, "-m", "tests.progress_writers", "learners", url]
    replicas = [
        subprocess.Popen([*command, prefix, str(threads), str(records)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for prefix in ("A", "B")
    ]
    outputs = [replica.communicate(timeout=300)[0] for replica in replicas]
    assert [replica.returncode for replica in replicas] == [0, 0]
    assert all(out.startswith("failures 0 ") for out in outputs), outputs
    kept = store.Store(url)
    assert kept.count() == 2 * threads * records
    for prefix in ("A", "B"):
        for n in range(threads):
            mine = kept.records(learner.digest(learner_id(prefix, n)))
            assert sorted(r.key for r in mine) == sorted(f"lab-{i}" for i in range(records))


def test_a_writer_killed_mid_write_leaves_a_database_that_opens_with_every_committed_record(url):
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.progress_writers", "until_killed", url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    committed = []
    deadline = time.monotonic() + 120
    while len(committed) < 300 and time.monotonic() < deadline:
        committed.append(writer.stdout.readline().strip())
    writer.send_signal(signal.SIGKILL)  # in the middle of the next write
    writer.wait(30)
    assert len(committed) == 300
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    kept = {r.key for r in store.Store(url).records(learner.digest(learner_id("K", 0)))}
    assert set(committed) <= kept and len(kept) - len(committed) <= 1  # at most the one the kill interrupted


def test_a_store_it_cannot_reach_raises_only_store_unavailable_and_waits_before_trying_again(url):
    if url.startswith("sqlite"):
        broken = store.Store("sqlite:////dev/null/no-folder/progress.sqlite3")  # a folder that cannot exist
    else:
        closed = url.replace(url.split("@")[1].split("/")[0], "127.0.0.1:9")  # nothing listens on port 9
        broken = store.Store(closed)
    started = time.monotonic()
    with pytest.raises(store.StoreUnavailable) as first:
        broken.add(learner.digest(learner.new_id()), visit())
    assert str(first.value) and time.monotonic() - started < store.CONNECT_TIMEOUT_S + 2
    started = time.monotonic()
    with pytest.raises(store.StoreUnavailable):
        broken.records(learner.digest(learner.new_id()))
    assert time.monotonic() - started < 0.05  # the retry wait: no second connection attempt


def test_a_read_only_sqlite_file_and_a_full_disk_are_unavailable_not_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a URI's "file:" once became a folder in the working directory
    path = tmp_path / "progress.sqlite3"
    key = learner.digest(learner.new_id())
    store.Store(f"sqlite:///{path}").add(key, visit())
    read_only = store.Store(f"sqlite:///file:{path}?mode=ro&uri=true")
    with pytest.raises(store.StoreUnavailable, match="^the database refuses writes$"):
        read_only.add(key, visit("modes"))
    assert not (tmp_path / "file:").exists()
    # A full disk: the writer may not grow the file past its size (SIGXFSZ ignored, so writes fail with EFBIG).
    script = f"""
import resource, signal, sys
from explorers.progress import learner, store
from explorers.progress.records import Record
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({path.stat().st_size + 8192}, resource.RLIM_INFINITY))
kept = store.Store("sqlite:///{path}")
for n in range(5000):
    try:
        kept.add("{key}", Record.now("prediction", f"autograd.q{{n}}", {{"question": "x" * 300, "right": True}}))
    except store.StoreUnavailable as error:
        print("unavailable:", error)
        sys.exit(0)
print("never full")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("unavailable:"), done.stdout + done.stderr[-2000:]
    assert done.stdout.strip() == "unavailable: the disk is full or failing", done.stdout
    assert store.Store(f"sqlite:///{path}").records(key)[0].key == "autograd"  # still opens, first record kept
