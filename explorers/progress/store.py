"""Where progress lasts: one SQLAlchemy Core code path for SQLite (the default) and PostgreSQL (`DATABASE_URL`).

SQLAlchemy Core, not an ORM and not two hand-written drivers: the same table, statements and
migrations run on both databases, and its pool serves a Streamlit server's many threads.

- **SQLite** (`make run`, or `make serve` on one machine): one file, in WAL mode so several processes
  (the replicas of a class server) read while one writes; `synchronous=FULL`, so a committed record
  survives the process being killed and the machine losing power; a writer waits up to 10 s for another's lock.
- **PostgreSQL** (a class across machines): `DATABASE_URL=postgresql://user:password@host/db`, through psycopg 3.

The schema carries a version (table `progress_schema`); `MIGRATIONS` brings an older database up to
date when a process first uses it, under a lock so two replicas starting at once migrate it once. A
database from a newer app is left untouched. Every failure (disk full, database down, read-only folder,
newer schema) is a `StoreUnavailable` with a short reason; after one, the store waits `RETRY_S` before
trying again, so a database that is down costs each process one connection timeout per wait, not one per click.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import sqlalchemy as sa

from explorers.progress.records import Invalid, Record, parse

SCHEMA_VERSION = 3
MAX_RECORDS_READ = 20_000  # a learner's newest records: five years at 10 a day
RETRY_S = 15.0
SQLITE_BUSY_S = 10
CONNECT_TIMEOUT_S = 3
DEFAULT_FILE = "progress.sqlite3"

_metadata = sa.MetaData()
RECORDS = sa.Table(
    "progress_records",
    _metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("learner", sa.String(64), nullable=False),  # learner.digest(id), never the id
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("key", sa.String(64), nullable=False),
    sa.Column("at", sa.Double(), nullable=False),  # seconds since the epoch, UTC
    sa.Column("data", sa.Text(), nullable=False),  # the record's fields as JSON
)
SCHEMA = sa.Table("progress_schema", _metadata, sa.Column("version", sa.Integer(), nullable=False))
# Learners whose record was deleted (their digest only): a tab still open under one saves nothing more.
FORGOTTEN = sa.Table("progress_forgotten", _metadata, sa.Column("learner", sa.String(64), primary_key=True))
log = logging.getLogger(__name__)


class StoreUnavailable(Exception):
    """Progress cannot be read or saved now; str() is the reason, in a few words a visitor may read (the full
    error, which can name the server's paths and hosts, goes to the server's log)."""


class Forgotten(Exception):
    """The learner's record was deleted: nothing more is saved under their id."""


def _version_1(connection: sa.Connection) -> None:
    """The records table."""
    connection.execute(sa.schema.CreateTable(RECORDS, if_not_exists=True))


def _version_2(connection: sa.Connection) -> None:
    """An index by learner: the study plan reads one learner's records out of every learner's."""
    connection.exec_driver_sql(
        "CREATE INDEX IF NOT EXISTS progress_records_by_learner ON progress_records (learner, id)"
    )


def _version_3(connection: sa.Connection) -> None:
    """Deleted learners, so that a tab left open under a deleted id does not write its record back."""
    connection.execute(sa.schema.CreateTable(FORGOTTEN, if_not_exists=True))


MIGRATIONS: tuple[Callable[[sa.Connection], None], ...] = (
    _version_1,
    _version_2,
    _version_3,
)  # MIGRATIONS[n] makes version n+1
assert len(MIGRATIONS) == SCHEMA_VERSION


def data_folder() -> Path:
    """EXPLORER_DATA, else $XDG_DATA_HOME/pytorch-explorer, else ~/.local/share/pytorch-explorer."""
    if os.environ.get("EXPLORER_DATA"):
        return Path(os.environ["EXPLORER_DATA"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "pytorch-explorer"


def default_url() -> str:
    """DATABASE_URL when set, else the SQLite file in the data folder."""
    return os.environ.get("DATABASE_URL", "").strip() or f"sqlite:///{data_folder() / DEFAULT_FILE}"


def _sqlite_engine(url: sa.URL) -> sa.Engine:
    if url.database and url.database != ":memory:" and not url.database.startswith("file:"):  # a URI names its own
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_S})

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # transactions begin below, not in the driver
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA synchronous=FULL")

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        # A write reads first (the version, a deleted learner), then writes: it takes the write lock at BEGIN, as
        # a deferred read transaction that later writes fails at once (SQLITE_BUSY) when another wrote meanwhile.
        writes = connection.get_execution_options().get("writes")
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")

    return engine


def _engine(text: str) -> sa.Engine:
    try:
        url = sa.make_url(text)
    except sa.exc.ArgumentError:
        raise StoreUnavailable("DATABASE_URL is not a database URL") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(url)
    if backend == "postgresql":
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
        return sa.create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    raise StoreUnavailable(f"DATABASE_URL names {backend}: progress is kept in SQLite or PostgreSQL")


def _reason(error: BaseException) -> str:
    """What went wrong, in words that name no path, host or user: the disk is full, read-only, and so on."""
    original = getattr(error, "orig", None) or error
    text = str(original).lower()
    if "full" in text or "no space" in text or "disk i/o" in text or "too large" in text:
        return "the disk is full or failing"
    if "readonly" in text.replace("-", "").replace(" ", "") or "permission" in text:  # SQLite's and PostgreSQL's words
        return "the database refuses writes"
    if isinstance(error, sa.exc.OperationalError) and ("connect" in text or "timeout" in text):
        return "the database is not answering"
    if isinstance(error, OSError) or "unable to open" in text:
        return "the data folder cannot be used"
    return "the database failed"


class Store:
    """One database, opened lazily: building a Store never fails, a use that cannot reach it raises StoreUnavailable."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: sa.Engine | None = None
        self._ready = False
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._down_reason = ""

    @property
    def where(self) -> str:
        """The database in words a visitor may read: no path, host or password (docs/progress.md has the path)."""
        try:
            url = sa.make_url(self.url)
        except sa.exc.ArgumentError:
            return "an unreadable DATABASE_URL"
        if url.get_backend_name() == "sqlite":
            return f"the SQLite file {Path(url.database or '').name} in this server's data folder"
        return f"the {self.kind} database this server is given"

    @property
    def kind(self) -> str:
        """'SQLite' or 'PostgreSQL' (or the backend a URL names), for a one-line label."""
        try:
            backend = sa.make_url(self.url).get_backend_name()
        except sa.exc.ArgumentError:
            return "an unreadable DATABASE_URL"
        return {"sqlite": "SQLite", "postgresql": "PostgreSQL"}.get(backend, backend)

    # --- reading and writing ------------------------------------------------------------------------

    def add(self, learner: str, record: Record) -> None:
        self.add_many(learner, [record])

    def add_many(self, learner: str, records: Iterable[Record]) -> int:
        """Save records in one transaction; raises Forgotten, saving nothing, for a deleted learner."""
        rows = [
            {"learner": learner, "kind": r.kind, "key": r.key, "at": r.at, "data": json.dumps(dict(r.data))}
            for r in records
        ]

        def insert(connection: sa.Connection) -> None:
            if _forgotten(connection, learner):
                raise Forgotten
            connection.execute(sa.insert(RECORDS), rows)

        if rows:
            self._run(insert, writes=True)
        return len(rows)

    def forgotten(self, learner: str) -> bool:
        return self._run(lambda connection: _forgotten(connection, learner))

    def records(self, learner: str) -> list[Record]:
        """A learner's records, oldest first (the newest MAX_RECORDS_READ); an unknown learner has none."""
        query = (
            sa.select(RECORDS.c.kind, RECORDS.c.key, RECORDS.c.at, RECORDS.c.data)
            .where(RECORDS.c.learner == learner)
            .order_by(RECORDS.c.id.desc())
            .limit(MAX_RECORDS_READ)
        )
        rows = self._run(lambda connection: connection.execute(query).all())
        kept = []
        for kind, key, at, data in reversed(rows):
            try:  # a row another version wrote, in a shape this one does not know, is left out
                kept.append(parse({"kind": kind, "key": key, "at": at, "data": json.loads(data)}))
            except (Invalid, ValueError):
                continue
        return kept

    def delete(self, learner: str) -> int:
        """Delete a learner's records, and refuse any later write under their id; returns how many were deleted."""

        def forget(connection: sa.Connection) -> int:
            if not _forgotten(connection, learner):
                connection.execute(sa.insert(FORGOTTEN).values(learner=learner))
            return connection.execute(sa.delete(RECORDS).where(RECORDS.c.learner == learner)).rowcount

        return self._run(forget, writes=True)

    def count(self) -> int:
        """Every learner's records together (for tests and benchmarks, never shown per learner)."""
        return self._run(
            lambda connection: connection.execute(sa.select(sa.func.count()).select_from(RECORDS)).one()[0]
        )

    def version(self) -> int:
        return self._run(self._read_version)

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    # --- underneath -------------------------------------------------------------------------------------

    def _run(self, work, writes: bool = False):
        """`work(connection)` in one transaction; any failure marks the store down for RETRY_S."""
        if time.monotonic() < self._down_until:
            raise StoreUnavailable(self._down_reason)
        try:
            with self._open().connect() as connection:
                connection = connection.execution_options(writes=writes)
                with connection.begin():
                    return work(connection)
        except StoreUnavailable as error:
            self._mark_down(str(error))
            raise
        except (sa.exc.SQLAlchemyError, OSError, UnicodeError) as error:
            log.warning("progress store %s unavailable: %s", self.kind, error)
            self._mark_down(_reason(error))
            raise StoreUnavailable(self._down_reason) from None

    def _mark_down(self, reason: str) -> None:
        self._down_reason = reason
        self._down_until = time.monotonic() + RETRY_S
        self._ready = False  # the next try migrates again, in case the database was replaced

    def _open(self) -> sa.Engine:
        with self._lock:
            if self._engine is None:
                self._engine = _engine(self.url)
            if not self._ready:
                migrate(self._engine)
                self._ready = True
            return self._engine

    @staticmethod
    def _read_version(connection: sa.Connection) -> int:
        if not sa.inspect(connection).has_table(SCHEMA.name):
            return 0
        return connection.execute(sa.select(SCHEMA.c.version)).scalar() or 0


def migrate(engine: sa.Engine, to: int = SCHEMA_VERSION) -> int:
    """Bring the database to version `to` (creating it if empty), once, whoever else is starting; returns the
    version found. A database newer than this app is refused, untouched."""
    with engine.connect() as connection:
        connection = connection.execution_options(writes=True)
        with connection.begin():
            if connection.dialect.name == "postgresql":  # held to the end of this transaction
                connection.execute(sa.text("SELECT pg_advisory_xact_lock(4646)"))
            found = Store._read_version(connection)
            if found > SCHEMA_VERSION:
                raise StoreUnavailable(
                    f"the database has progress schema {found}, newer than this app's {SCHEMA_VERSION}: left untouched"
                )
            if found == 0:
                connection.execute(sa.schema.CreateTable(SCHEMA, if_not_exists=True))
                connection.execute(sa.insert(SCHEMA).values(version=0))
            for step in MIGRATIONS[found:to]:
                step(connection)
            if to > found:
                connection.execute(sa.update(SCHEMA).values(version=to))
            return found


def _forgotten(connection: sa.Connection, learner: str) -> bool:
    return connection.execute(sa.select(FORGOTTEN.c.learner).where(FORGOTTEN.c.learner == learner)).first() is not None


@functools.cache
def open_store(url: str) -> Store:
    """The process's one Store for a URL, shared by every session and thread."""
    return Store(url)
