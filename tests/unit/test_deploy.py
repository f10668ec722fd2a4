"""The class server's recipe: one nginx config for `make serve` and compose.yaml, and it is valid nginx."""

from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from deploy import serve  # noqa: E402

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


def test_make_serve_and_compose_use_the_same_nginx_config():
    compose = (ROOT / "compose.yaml").read_text()
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf" in compose
    assert serve.CONFIG == ROOT / "deploy" / "nginx.conf"
    assert "explorer-upstream.conf" in compose and "explorer-server.conf" in compose
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "python:3.11-slim" in dockerfile and "USER explorer" in dockerfile and "/_stcore/health" in dockerfile


@pytest.mark.skipif(NGINX is None, reason="no nginx here")
@pytest.mark.parametrize("auth", [False, True])
def test_the_config_is_valid_nginx_with_the_files_make_serve_writes(tmp_path, auth):
    shutil.copyfile(serve.CONFIG, tmp_path / "nginx.conf")
    (tmp_path / "explorer-upstream.conf").write_text(serve.upstream_conf([8511, 8512], {8512}))
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text("teacher:$apr1$abc$0123456789abcdefghijkl\n")
    (tmp_path / "explorer-server.conf").write_text(serve.server_conf(8599, htpasswd if auth else None))
    checked = subprocess.run(
        [NGINX, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    assert "hash $explorer_client consistent" in (tmp_path / "explorer-upstream.conf").read_text()


def test_each_replica_gets_a_fair_share_of_the_cores():
    assert serve.workers_per_replica(1) >= 2 and serve.workers_per_replica(64) == 2  # a lane for short runs


class RefusingReplica:
    """A stand-in for a replica at the socket level: it answers a PUT with 403 and a reset before reading its body,
    as Streamlit does for an upload it did not ask for, and a GET with 200."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.puts = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                if head.startswith(b"PUT"):
                    self.puts += 1
                    connection.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
                else:
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


@contextlib.contextmanager
def proxy_before(replicas: list[RefusingReplica]):
    """nginx on the shared config in front of `replicas`, from a run folder in a private (0700) folder, as a
    checkout in a home folder would have it; yields its URL."""
    private = Path(tempfile.mkdtemp(dir="/tmp", prefix="private-"))  # 0700, as a home folder or mktemp -d is
    folder = private / "run"
    folder.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    shutil.copyfile(serve.CONFIG, folder / "nginx.conf")
    (folder / "explorer-upstream.conf").write_text(serve.upstream_conf([r.port for r in replicas], set()))
    (folder / "explorer-server.conf").write_text(serve.server_conf(port, None))
    command = [NGINX, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-g", serve.nginx_globals(folder)]
    proxy = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while _status(f"{url}/proxy-health") != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        yield url
    finally:
        proxy.terminate()
        proxy.wait(10)
        for replica in replicas:
            replica.listener.close()
        shutil.rmtree(private, ignore_errors=True)


def _put(url: str, size: int, cookie: str | None = None) -> urllib.request.Request:
    body = b"--x\r\nContent-Disposition: form-data; name=file; filename=a.bin\r\n\r\n" + b"\0" * size
    put = urllib.request.Request(f"{url}/_stcore/upload_file/s/f", data=body + b"\r\n--x--\r\n", method="PUT")
    put.add_header("Content-Type", "multipart/form-data; boundary=x")
    if cookie:
        put.add_header("Cookie", f"explorer_client={cookie}")
    return put


@pytest.mark.skipif(NGINX is None, reason="no nginx here")
def test_a_refused_upload_takes_no_replica_out_and_is_not_replayed_on_another():
    """The class-server probe: a token-less 7.9 MiB PUT, refused with a reset, counted as a failure (max_fails=1)
    and was replayed on the next replica, which failed too: every request then got 502 for 10 s. The run folder
    sits in a private (0700) folder, where nginx's workers once could not buffer the body (500)."""
    replicas = [RefusingReplica(), RefusingReplica()]
    with proxy_before(replicas) as url:
        assert _status(_put(url, 7_900_000)) != 200
        assert sum(r.puts for r in replicas) == 1  # sent to one replica, never replayed on the other
        assert [_status(f"{url}/_stcore/health") for _ in range(6)] == [200] * 6  # no replica was taken out


@pytest.mark.skipif(NGINX is None, reason="no nginx here")
def test_uploads_are_limited_per_client_cookie_so_a_class_behind_one_address_is_not():
    """The class-server probe: 57 uploads of 7.9 MiB from one session, one every 1.8 s, were all accepted (the limit
    was 2 a second, by address, which a class behind one NAT would also share)."""
    replicas = [RefusingReplica(), RefusingReplica()]
    with proxy_before(replicas) as url:
        # a PUT that reaches a stand-in gets its 403, or a 502 when the reset comes while nginx still sends
        one_client = [_status(_put(url, 100_000, "student-1")) != 429 for _ in range(8)]
        assert one_client == [True] * 3 + [False] * 5  # 3 at once, then 6 a minute
        others = [_status(_put(url, 100_000, f"student-{n}")) != 429 for n in range(2, 8)]  # the same address
        assert others == [True] * 6  # each classmate's first upload reaches its replica
        assert sum(r.puts for r in replicas) == 9


def _status(request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0
