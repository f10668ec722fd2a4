"""A throwaway PostgreSQL cluster for the tests: Debian's server binaries (make test installs them), a fresh data
folder, TCP on a free loopback port, trust authentication; stopped and removed afterwards.

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user the package makes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def binaries() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """A running cluster; yields its SQLAlchemy URL."""
    bin_dir = binaries()
    assert bin_dir is not None, "no PostgreSQL server here"
    folder = Path(tempfile.mkdtemp(prefix="explorer-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", _free_port()

    def run(*command: str) -> None:
        subprocess.run([*as_user, *command], check=True, capture_output=True, timeout=120)

    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", "explorer", "-A", "trust", "-E", "UTF8")
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {folder} -c max_connections=200"
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-o", options, "-w", "start")
        yield f"postgresql+psycopg://explorer@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(folder, ignore_errors=True)
