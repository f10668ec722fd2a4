"""A class server as `make serve REPLICAS=2` starts it: two replicas behind Debian's nginx (deploy/serve.py).

Each Chromium context is a different client (its own cookie jar, so its own `explorer_client`
cookie). Two cookie values known to land on different replicas (probed through the proxy, which
names the replica that answered in `X-Explorer-Replica`) pin two clients to one replica each.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.timed_set import ONE_SOLVED, solve_the_first_drill_of_a_new_set

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
CHART = "[data-testid='stPlotlyChart'] .main-svg"

if NGINX is None:
    pytest.skip("no nginx here (make test installs it as root on Debian)", allow_module_level=True)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def get(url: str, cookie: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Cookie": f"explorer_client={cookie}"} if cookie else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)
    except OSError:  # nothing listens yet
        return 0, {}


def group_alive(pgid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


@pytest.fixture(scope="module")
def class_server():
    run = Path(tempfile.mkdtemp(dir="/tmp", prefix="cls-")) / "run"  # short: sockets live under it
    proxy_port, first = free_ports(1)[0], None
    while first is None:  # the replicas take two ports in a row
        candidate = free_ports(1)[0]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", candidate + 1))
            except OSError:
                continue
        first = candidate if proxy_port not in (candidate, candidate + 1) else None
    command = [sys.executable, "deploy/serve.py", "--replicas", "2", "--port", str(proxy_port)]
    command += ["--run-dir", str(run), "--first-replica-port", str(first)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{proxy_port}"
    try:
        deadline = time.monotonic() + 150
        while get(f"{url}/proxy-health")[0] != 200:
            assert server.poll() is None and time.monotonic() < deadline, "the class server did not start"
            time.sleep(0.5)
        replicas = [f"127.0.0.1:{first}", f"127.0.0.1:{first + 1}"]
        for port in (first, first + 1):  # as a class finds it: each replica has paid its labs' first costs
            log = run / f"replica-{port}.log"
            while b"warm-up done" not in log.read_bytes():
                assert server.poll() is None and time.monotonic() < deadline + 120, "a replica did not warm up"
                time.sleep(0.5)
        cookies = {}
        for n in range(200):  # a cookie value that lands on each replica
            cookies.setdefault(get(f"{url}/_stcore/health", f"client{n}")[1].get("X-Explorer-Replica"), f"client{n}")
            if len(cookies) == 2:
                break
        yield {
            "url": url,
            "run": run,
            "server": server,
            "replicas": replicas,
            "cookies": cookies,
            "ports": [proxy_port, first, first + 1],
        }
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
        shutil.rmtree(run.parent, ignore_errors=True)


def client(browser, server, replica: str):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_cookies([{"name": "explorer_client", "value": server["cookies"][replica], "url": server["url"]}])
    return context


def test_sessions_stay_on_their_replica_and_an_upload_reaches_their_own(browser, class_server):
    assert sorted(class_server["cookies"]) == class_server["replicas"]  # the hash spreads clients over both
    for replica in class_server["replicas"]:
        context = client(browser, class_server, replica)
        page = context.new_page()
        page.set_default_timeout(90_000)
        try:
            for _ in range(2):  # the first visit, then a reload: the same replica both times
                answer = page.goto(f"{class_server['url']}/DDP")
                assert answer.headers["x-explorer-replica"] == replica
                page.locator(CHART).first.wait_for()
            # An upload is accepted only by the replica that holds the session (another answers 400 "Invalid
            # session_id"); the lab then reads the file and says what is wrong with it: the file reached it.
            # 1 MB: nginx buffers a body this large in a file under the run folder, which sits in a private
            # (0700) temp folder here, as a checkout in a home folder does (its workers once got 500 there)
            page.locator("input[type=file]").first.set_input_files(
                files=[{"name": "notes.json", "mimeType": "application/json", "buffer": b"{not json" + b" " * 2**20}]
            )
            page.get_by_text("not a JSON").first.wait_for()
            text = page.locator("[data-testid='stMain']").inner_text()
            assert "Invalid session_id" not in text and "Traceback" not in text
        finally:
            context.close()


def test_an_upload_over_the_apps_limit_gets_413_from_the_proxy_and_no_replica_grows(class_server):
    pids = [int((class_server["run"] / f"replica-{port}.pid").read_text()) for port in class_server["ports"][1:]]
    before = [rss_mb(pid) for pid in pids]
    body = (
        b"--x\r\nContent-Disposition: form-data; name=file; filename=big.bin\r\n\r\n"
        + b"\0" * (9 * 2**20)
        + b"\r\n--x--\r\n"
    )
    request = urllib.request.Request(
        f"{class_server['url']}/_stcore/upload_file/some-session/some-file",
        data=body,
        method="PUT",
        headers={"Content-Type": "multipart/form-data; boundary=x"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413 and refused.value.headers.get("Server", "").startswith("nginx")
    after = [rss_mb(pid) for pid in pids]
    assert all(a - b < 5 for a, b in zip(after, before, strict=True)), (before, after)


def test_token_less_uploads_never_take_a_replica_out_and_clients_stay_on_theirs(class_server):
    """The class-server probe: one 7.9 MiB PUT with no session or XSRF token, answered 403 with a reset, counted as
    a replica failure (max_fails=1) and was replayed on the other replica: every request got 502 for about 10 s.
    Here 20 such PUTs, 0.7 s apart, while each replica's client loads a page every second."""
    url, cookies = class_server["url"], class_server["cookies"]
    body = (
        b"--x\r\nContent-Disposition: form-data; name=file; filename=a.bin\r\n\r\n"
        + b"\0" * (7_900_000)
        + b"\r\n--x--\r\n"
    )
    pages: list[tuple[int, str, str]] = []
    uploads: list[int] = []
    stop = time.monotonic() + 20 * 0.7

    def load_pages() -> None:
        while time.monotonic() < stop + 1:
            for replica, cookie in cookies.items():
                status, headers = get(f"{url}/_stcore/health", cookie)
                pages.append((status, replica, headers.get("X-Explorer-Replica", "")))
            time.sleep(1)

    loader = threading.Thread(target=load_pages)
    loader.start()
    for n in range(20):
        request = urllib.request.Request(
            f"{url}/_stcore/upload_file/no-session-{n}/no-file",
            data=body,
            method="PUT",
            headers={"Content-Type": "multipart/form-data; boundary=x"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                uploads.append(answer.status)
        except urllib.error.HTTPError as error:
            uploads.append(error.code)
        except OSError:
            uploads.append(0)
        time.sleep(0.7)
    loader.join()
    assert len(uploads) == 20 and 200 not in uploads  # every one refused
    assert pages and not [p for p in pages if p[0] != 200], pages  # not one 502 for the pages meanwhile
    assert all(answered == replica for _, replica, answered in pages), pages  # sticky throughout


def test_a_killed_replica_gets_no_new_sessions_and_leaves_nothing_behind(browser, class_server):
    dead, alive = class_server["replicas"]
    dead_port = int(dead.rsplit(":", 1)[1])
    pid = int((class_server["run"] / f"replica-{dead_port}.pid").read_text())
    assert group_alive(pid)
    os.kill(pid, signal.SIGKILL)  # the replica's server process only: its engine must notice and end
    context = client(browser, class_server, dead)  # a client whose cookie hashes to the dead replica
    page = context.new_page()
    page.set_default_timeout(90_000)
    try:
        answer = page.goto(f"{class_server['url']}/Modes")
        assert answer.status == 200 and answer.headers["x-explorer-replica"].endswith(alive.rsplit(":", 1)[1])
        page.locator(CHART).first.wait_for()
        assert "Traceback" not in page.locator("[data-testid='stMain']").inner_text()
    finally:
        context.close()
    deadline = time.monotonic() + 20
    while group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_alive(pid), "the killed replica's engine outlived it"


def test_a_killed_replica_is_started_again_and_serves_its_clients_within_30_s(browser, class_server):
    """The class-server probe: a killed replica stayed dead, and the class ran on half its capacity."""
    run, (dead, _) = class_server["run"], class_server["replicas"]
    dead_port = int(dead.rsplit(":", 1)[1])
    pid = int((run / f"replica-{dead_port}.pid").read_text())
    if group_alive(pid):  # the test before may have killed it already; kill it here if not
        os.killpg(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    cookie = class_server["cookies"][dead]
    while time.monotonic() - killed_at < 30:
        new_pid = int((run / f"replica-{dead_port}.pid").read_text() or 0)
        if new_pid != pid and get(f"{class_server['url']}/_stcore/health", cookie)[1].get("X-Explorer-Replica") == dead:
            break
        time.sleep(0.5)
    assert new_pid != pid and group_alive(new_pid), "no new replica was started"
    assert not group_alive(pid)  # nothing of the old one is left
    context = client(browser, class_server, dead)
    page = context.new_page()
    page.set_default_timeout(90_000)
    try:
        answer = page.goto(f"{class_server['url']}/Modes")
        assert answer.headers["x-explorer-replica"] == dead  # its clients are back on it
        page.locator(CHART).first.wait_for()
    finally:
        context.close()


def test_a_drill_score_and_a_timed_set_survive_the_learners_replica_being_killed(browser, class_server):
    """Progress is in the store both replicas share, under the learner's cookie: the replica that held the session
    is killed mid-set, and the reload that nginx sends to the other replica shows the same set and score."""
    run, (_, mine) = class_server["run"], class_server["replicas"]
    context = client(browser, class_server, mine)
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        solve_the_first_drill_of_a_new_set(page, class_server["url"])
        pid = int((run / f"replica-{mine.rsplit(':', 1)[1]}.pid").read_text())
        os.killpg(pid, signal.SIGKILL)
        answer = page.reload()
        page.get_by_text(ONE_SOLVED).wait_for()
        assert (
            answer.headers["x-explorer-replica"] != mine
            or int((run / f"replica-{mine.rsplit(':', 1)[1]}.pid").read_text()) != pid
        )
    finally:
        context.close()


def test_the_stop_command_leaves_no_process_no_folder_and_no_bound_port(class_server):
    run, server = class_server["run"], class_server["server"]
    groups = [int((run / f"replica-{port}.pid").read_text()) for port in class_server["ports"][1:]]
    nginx_pid = int((run / "nginx.pid").read_text())
    stop = [sys.executable, "deploy/serve.py", "--stop", "--run-dir", str(run)]
    assert "stopped" in subprocess.run(stop, cwd=ROOT, capture_output=True, text=True, timeout=90).stdout
    server.wait(30)
    assert not any(group_alive(pgid) for pgid in groups)
    assert not Path(f"/proc/{nginx_pid}").exists()
    assert not run.exists()
    for port in class_server["ports"]:
        with socket.socket() as probe:
            # SO_REUSEADDR: a closed connection's TIME_WAIT does not count; a socket still listening does
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
