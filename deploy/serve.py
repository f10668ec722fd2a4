"""Serve a class: N app replicas on local ports behind nginx, with sticky sessions and limits at the edge.

    python deploy/serve.py --replicas 2 [--port 8500] [--auth path/to/htpasswd]   (make serve REPLICAS=2)
    python deploy/serve.py --stop                                                  (make serve-stop)

Each replica is a `streamlit run app.py` of its own, in a process group of its own (its run
engine, forkserver and workers with it), with `EXPLORER_WORKERS` set to its fair share of the
cores (cores / N, at least 1) plus one worker that stays free for short runs. nginx runs
deploy/nginx.conf unchanged, from a run folder that also holds the two files it includes: the
replicas (explorer-upstream.conf) and this server's port and optional basic auth
(explorer-server.conf). compose.yaml mounts the same nginx.conf.

While it runs, this process checks every replica's /_stcore/health each HEALTH_EVERY_S: a replica
that stops answering is marked `down` in the upstream list and nginx reloads, so no new session is
sent to it (nginx's own `max_fails` also takes it out after a failed request). A replica that ends
(killed, crashed) has its process group ended and its temp folder removed, and is started again
after a backoff (1 s, doubling to 30 s); nginx takes it back once its health answers. Ctrl-C, SIGTERM or
`--stop` end nginx and every replica's whole process group, then remove the run folder: no process,
no temporary folder and no bound port are left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import grp
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "deploy" / "nginx.conf"
RUN = ROOT / ".serve"  # the run folder: generated config, pid files, logs, nginx's and each replica's temp folders
FIRST_REPLICA_PORT = 8511
HEALTH_EVERY_S = 2.0
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 10.0
RESTART_FIRST_S, RESTART_MAX_S = 1.0, 30.0  # a dead replica restarts after 1 s, then 2, 4, ... up to 30 s
STEADY_S = 60.0  # a replica up this long has its backoff reset


def upstream_conf(ports: list[int], down: set[int]) -> str:
    """Two groups of the same replicas, hashed the same way: `explorer` for pages and sessions, where a failed
    request takes a replica out for a while (max_fails=1), and `explorer_uploads`, where it never does
    (max_fails=0): a replica refusing an upload it did not ask for, and resetting the connection, is not a failed
    replica (deploy/nginx.conf)."""

    def group(name: str, failures: str) -> str:
        servers = "".join(f"    server 127.0.0.1:{p} {failures}{' down' * (p in down)};\n" for p in ports)
        return f"upstream {name} {{\n    hash $explorer_client consistent;\n{servers}}}\n"

    return group("explorer", "max_fails=1 fail_timeout=10s") + group("explorer_uploads", "max_fails=0")


def server_conf(port: int, auth: Path | None) -> str:
    lines = [f"listen 127.0.0.1:{port};", f"listen [::1]:{port};" if _has_ipv6() else ""]
    if auth:
        lines += ['auth_basic "PyTorch Explorer";', f"auth_basic_user_file {auth.resolve()};"]
    return "\n".join(line for line in lines if line) + "\n"


def _has_ipv6() -> bool:
    return Path("/proc/net/if_inet6").exists() and bool(Path("/proc/net/if_inet6").read_text().strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return pid > 0


def nginx_globals(run: Path) -> str:
    """nginx's global settings beside the shared config. Started as root, nginx would run its workers as `nobody`,
    who cannot reach a run folder inside a private (0700) home or temp folder to buffer an upload's body there
    (every large upload got 500): so its workers run as the user who owns the run folder."""
    settings = "daemon off;"
    if os.geteuid() == 0:
        owner = run.stat()
        settings += f" user {pwd.getpwuid(owner.st_uid).pw_name} {grp.getgrgid(owner.st_gid).gr_name};"
    return settings


def workers_per_replica(replicas: int) -> int:
    """A replica's share of the cores for long runs, plus the worker that stays free for short ones (the rule the
    engine follows on a server of its own: one worker per core, plus one)."""
    return max(1, (os.cpu_count() or 1) // replicas) + 1


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def start_replica(run: Path, port: int, workers: int) -> subprocess.Popen:
    """One replica, leading its own process group, with a temp folder of its own (removed when it ends)."""
    command = [sys.executable, "-m", "ui.launch", "app.py", "--server.port", str(port)]  # with the warm-up
    command += ["--server.address", "127.0.0.1", "--server.headless", "true"]
    temp = run / f"tmp-{port}"
    temp.mkdir()
    env = {**os.environ, "EXPLORER_WORKERS": str(workers), "TMPDIR": str(temp)}
    log = open(run / f"replica-{port}.log", "wb")  # noqa: SIM115 (kept open while the replica runs)
    replica = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (run / f"replica-{port}.pid").write_text(str(replica.pid))
    return replica


def end_group(process: subprocess.Popen) -> None:
    """SIGTERM the process's whole group (its engine's workers too), then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STOP_GRACE_S)
    deadline = time.monotonic() + STOP_GRACE_S  # a killed worker takes a moment to go: return once all have
    while _group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group, from /proc; where there is none, a signal-0 probe."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            members.append(int(stat.parent.name))
    return members


class Stop(Exception):
    pass


def serve(replicas: int, port: int, auth: Path | None, run: Path = RUN, first_port: int = FIRST_REPLICA_PORT) -> None:
    pid_file = run / "serve.pid"
    if pid_file.exists():
        if _alive(int(pid_file.read_text() or 0)):
            sys.exit(f"a class server already runs from {run} (stop it with `make serve-stop`)")
        shutil.rmtree(run, ignore_errors=True)  # left by a server that was killed
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        sys.exit("nginx is not installed: `apt-get install nginx-light` (make serve does this as root on Debian)")
    if auth and not auth.is_file():
        sys.exit(f"no htpasswd file at {auth}")
    run.mkdir(parents=True)
    pid_file.write_text(str(os.getpid()))
    ports = [first_port + i for i in range(replicas)]
    workers = workers_per_replica(replicas)
    started: list[subprocess.Popen] = []
    proxy = None

    def stop(*_):
        raise Stop

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        started = [start_replica(run, p, workers) for p in ports]
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(healthy(p) for p in ports):
            if time.monotonic() > deadline or any(r.poll() is not None for r in started):
                sys.exit(f"a replica did not start: see {run}/replica-*.log")
            time.sleep(0.3)
        shutil.copyfile(CONFIG, run / "nginx.conf")  # the same file compose.yaml mounts, byte for byte
        (run / "explorer-upstream.conf").write_text(upstream_conf(ports, set()))
        (run / "explorer-server.conf").write_text(server_conf(port, auth))
        proxy = subprocess.Popen([nginx, "-p", str(run), "-c", str(run / "nginx.conf"), "-g", nginx_globals(run)])
        print(f"serving {replicas} replica(s), {workers} worker(s) each, on http://localhost:{port}", flush=True)
        down: set[int] = set()
        started_at = [time.monotonic()] * len(ports)
        restarts, restart_at = [0] * len(ports), [0.0] * len(ports)
        while True:
            time.sleep(HEALTH_EVERY_S)
            if proxy.poll() is not None:
                sys.exit("nginx stopped")
            now_down = {p for p in ports if not healthy(p)}
            if now_down != down:
                down = now_down
                (run / "explorer-upstream.conf").write_text(upstream_conf(ports, down))
                proxy.send_signal(signal.SIGHUP)  # nginx reloads its config; open connections finish
                print(f"replicas down: {sorted(down) or 'none'}", flush=True)
            for index, replica_port in enumerate(ports):
                replica = started[index]
                if replica.poll() is None:
                    if replica_port not in down and time.monotonic() - started_at[index] > STEADY_S:
                        restarts[index] = 0  # it has served a while: a later death starts the backoff afresh
                    continue
                if (run / f"tmp-{replica_port}").exists():  # it just died
                    end_group(replica)  # what its engine left (a killed server cannot clean up after itself)
                    shutil.rmtree(run / f"tmp-{replica_port}", ignore_errors=True)
                    wait = min(RESTART_MAX_S, RESTART_FIRST_S * 2 ** restarts[index])
                    restart_at[index], restarts[index] = time.monotonic() + wait, restarts[index] + 1
                    print(f"replica {replica_port} ended ({replica.returncode}); restarting in {wait:g} s", flush=True)
                elif time.monotonic() >= restart_at[index]:  # nginx takes it back once its health answers
                    started[index], started_at[index] = start_replica(run, replica_port, workers), time.monotonic()
    except Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if proxy is not None:
            proxy.send_signal(signal.SIGQUIT)  # graceful: its workers finish and exit
            try:
                proxy.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait()
        for replica in started:
            end_group(replica)
        shutil.rmtree(run, ignore_errors=True)


def stop_running(run: Path = RUN) -> None:
    """End the class server started from this checkout, and wait until it is gone."""
    try:
        pid = int((run / "serve.pid").read_text())
    except (OSError, ValueError):
        print("no class server runs from this checkout")
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 3 * STOP_GRACE_S
    while run.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    print("stopped" if not run.exists() else f"still stopping: {run} is there")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--port", type=int, default=8500)
    parser.add_argument("--auth", type=Path, default=None, help="an htpasswd file: basic auth for every page")
    parser.add_argument("--stop", action="store_true", help="stop the class server started from this checkout")
    parser.add_argument("--run-dir", type=Path, default=RUN, help="the run folder (tests use their own)")
    parser.add_argument("--first-replica-port", type=int, default=FIRST_REPLICA_PORT)
    args = parser.parse_args()
    if args.stop:
        stop_running(args.run_dir)
    elif not 1 <= args.replicas <= 16:
        parser.error("--replicas must be 1 to 16")
    else:
        serve(args.replicas, args.port, args.auth, args.run_dir, args.first_replica_port)


if __name__ == "__main__":
    main()
