"""`make run`'s entry point: Streamlit's own `streamlit run`, and a warm-up of what every first visit pays.

Once the server answers its health check (so its first answer never waits for the warm-up), a background
thread imports the heavy libraries every page needs (torch, pandas, plotly, through `explorers`), starts the
run engine's workers, and has each worker pay the labs' first costs (explorers/warm.py). A visitor who arrives
meanwhile takes turns with it, like any session.

    python -m ui.launch app.py --server.port 8501 --server.address localhost
"""

from __future__ import annotations

import sys
import threading
import time
import urllib.request

from streamlit.web import cli

SERVER_WAIT_S = 120


def _option(args: list[str], name: str, default: str) -> str:
    for n, arg in enumerate(args):
        if arg == name and n + 1 < len(args):
            return args[n + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return default


def health_url(args: list[str]) -> str:
    host = _option(args, "--server.address", "localhost")
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 - a wildcard is reached on loopback
    return f"http://{host}:{_option(args, '--server.port', '8501')}/_stcore/health"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - our own server's fixed URL
            return answer.status == 200
    except OSError:
        return False


def warm_up(url: str) -> None:
    deadline = time.monotonic() + SERVER_WAIT_S
    while not _answers(url):
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)
    started = time.perf_counter()
    # Only `explorers` itself in this process: its import loads torch, pandas and plotly under the package's
    # import lock, which every page takes first too, so a visitor's page waits for it rather than racing it. A
    # lab's own modules are imported here by its first visit: imported from this thread as a page imported them,
    # a package with import cycles (explorers.drills) reached a page half made ("partially initialized module").
    # The workers, processes of their own, import every lab (explorers/warm.py).
    import explorers  # noqa: F401
    from explorers import warm

    imported = time.perf_counter() - started
    from explorers.engine import default_engine

    engine = default_engine()
    runs = [engine.submit(warm.worker, n, session="warm-up", priority=10) for n in range(engine.size)]
    parts = []
    for run in runs:
        try:
            parts.append(", ".join(f"{name} {seconds:.1f} s" for name, seconds in run.result().items()))
        except Exception as error:  # noqa: BLE001 - a worker that could not warm up warms on its first visit instead
            parts.append(f"failed ({error})")
    # The GPU evidence lab's shipped traces, read once into the engine's cache: HTA takes up to 5 s on the largest
    from explorers.evidence.experiment import ShippedOptions, read_shipped
    from explorers.evidence.shipped import SHIPPED

    read = [engine.submit(read_shipped, ShippedOptions(key), session="warm-up", priority=10) for key in SHIPPED]
    for run in read:
        try:
            run.result()
        except Exception as error:  # noqa: BLE001 - a trace not read now is read on its first visit
            parts.append(f"a shipped trace not read ({error})")
    print(
        f"warm-up done in {time.perf_counter() - started:.1f} s: the server's imports {imported:.1f} s; "
        + "; ".join(f"worker {n + 1}: {part}" for n, part in enumerate(parts))
        + f"; {len(SHIPPED)} GPU traces read",
        flush=True,
    )


def main() -> None:
    args = sys.argv[1:]
    threading.Thread(target=warm_up, args=(health_url(args),), daemon=True, name="warm-up").start()
    sys.argv = ["streamlit", "run", *args]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
