"""The Profiler lab's experiment: a synthetic training job, profiled in a worker process.

The knobs (model width and depth, batch size, DataLoader workers and pinned memory, a
per-batch data cost standing in for augmentation, optimizer, threads) set up a real
training loop, and `explorers.profiling.profile_training` measures it. The run happens
in a separate worker process: `torch.set_num_threads` and the profiler are process-wide,
so a user's thread count or profile must not touch anyone else's runs in the server.
The worker reports progress on stdout, can be cancelled, and is killed (with its
DataLoader workers) on timeout.

    python -m explorers.profiling_lab '{"data_cost_ms": 20}'   # one run: progress, then the result as JSON
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from explorers import bounds
from explorers.profiling import PHASES, OpTiming, ProfileResult, StepTiming

WIDTH_RANGE = (32, 2048)
DEPTH_RANGE = (1, 8)
BATCH_RANGE = (8, 1024)
DATA_COST_RANGE = (0, 50)  # milliseconds of simulated augmentation per batch
WORKERS_RANGE = (0, 4)
THREADS_RANGE = (1, max(os.cpu_count() or 1, 1))
WARMUP_RANGE = (0, 5)
ACTIVE_RANGE = (1, 10)
SEED_RANGE = (0, 99_999)
OPTIMIZERS = ("sgd", "adam", "adamw")
IN_FEATURES = 256
CLASSES = 10
TIMEOUT_S = 120
PHASE_COLOURS = {
    "data": "#9467bd",
    "copy": "#8c564b",
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "optimizer": "#2ca02c",
    "other": "#c7c7c7",
}

# DataLoader workers start from a clean forkserver, not a fork of the (multi-threaded) profiling worker:
# forking a process while its OpenMP threads run can deadlock the child.
WORKER_START = "forkserver"

# One profile at a time in this server: runs compete for the same two cores and would measure each other.
_RUN_LOCK = threading.Lock()


@dataclass(frozen=True)
class ProfileOptions:
    width: int = 512
    depth: int = 2
    batch_size: int = 64
    data_cost_ms: int = 0
    num_workers: int = 0
    pin_memory: bool = False
    optimizer: str = "adam"
    threads: int = 1
    warmup: int = 2
    active: int = 5
    synchronize: bool = True
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        bounds.check_ints(
            self,
            {
                "width": WIDTH_RANGE,
                "depth": DEPTH_RANGE,
                "batch_size": BATCH_RANGE,
                "data_cost_ms": DATA_COST_RANGE,
                "num_workers": WORKERS_RANGE,
                "threads": THREADS_RANGE,
                "warmup": WARMUP_RANGE,
                "active": ACTIVE_RANGE,
                "seed": SEED_RANGE,
            },
        )
        bounds.check_choices(self, {"optimizer": OPTIMIZERS, "device": ("cpu", "cuda", "mps")})


class _SlowCollate:
    """Default collation plus a fixed sleep per batch: a stand-in for augmentation whose cost you choose."""

    def __init__(self, cost_ms: int):
        self.cost_s = cost_ms / 1000

    def __call__(self, samples):
        import torch.utils.data

        if self.cost_s:
            time.sleep(self.cost_s)
        return torch.utils.data.default_collate(samples)


def build_job(options: ProfileOptions):
    """(model, loader, optimizer, loss_fn) for the options; seeded, and sized for the steps it will run."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(options.seed)
    torch.manual_seed(options.seed)  # only ever called in the child process, which owns its global state
    layers: list[nn.Module] = []
    width_in = IN_FEATURES
    for _ in range(options.depth):
        layers += [nn.Linear(width_in, options.width), nn.ReLU()]
        width_in = options.width
    model = nn.Sequential(*layers, nn.Linear(width_in, CLASSES))
    steps = options.warmup + 2 * options.active + 2  # every step gets a fresh batch within one epoch
    samples = options.batch_size * steps
    dataset = torch.utils.data.TensorDataset(
        torch.randn(samples, IN_FEATURES, generator=generator),
        torch.randint(0, CLASSES, (samples,), generator=generator),
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=options.batch_size,
        shuffle=True,
        generator=generator,
        num_workers=options.num_workers,
        collate_fn=_SlowCollate(options.data_cost_ms),
        pin_memory=options.pin_memory and options.device == "cuda",
        multiprocessing_context=WORKER_START if options.num_workers else None,
    )
    optimizer = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[options.optimizer]
    return model, loader, optimizer(model.parameters(), lr=1e-3), nn.functional.cross_entropy


def run_here(options: ProfileOptions, trace_path: str | None = None, on_step=None) -> ProfileResult:
    """Profile the lab's job in this process. Sets the process-wide thread count: for child processes."""
    import torch

    from explorers import profiling

    torch.set_num_threads(options.threads)
    model, loader, optimizer, loss_fn = build_job(options)
    return profiling.profile_training(
        model,
        loader,
        optimizer,
        loss_fn,
        device=options.device,
        wait=1,
        warmup=options.warmup,
        active=options.active,
        synchronize=options.synchronize,
        trace_path=trace_path,
        on_step=on_step,
    )


TRACE_DIR = Path(tempfile.gettempdir()) / "pytorch-explorer-traces"
KEEP_TRACES = 40  # older trace files are deleted: a shared server must not fill its disk


def new_trace_path() -> str:
    TRACE_DIR.mkdir(exist_ok=True)
    for old in sorted(TRACE_DIR.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-KEEP_TRACES]:
        old.unlink(missing_ok=True)
    return str(TRACE_DIR / f"step-trace-{time.time_ns()}.json")


class ProfileFailed(RuntimeError):
    pass


class _Worker:
    """A long-lived child process that runs profiles one at a time.

    Importing torch (~1.7 s here) and the profiler's first start in a process (~1.2 s)
    are paid once, not per run. The worker has its own session, so killing its process
    group also ends any DataLoader workers; it exits by itself when the server's end of
    its stdin closes.
    """

    def __init__(self) -> None:
        command = [sys.executable, "-m", "explorers.profiling_lab", "--serve"]
        # A file, not a pipe, so a chatty stderr cannot block; it lives as long as the worker.
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            command,
            cwd=Path(__file__).resolve().parent.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            start_new_session=True,
        )
        self.pending = b""  # bytes read from its stdout that do not yet end a line

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.errors.close()

    def read_line(self, deadline: float, timeout_s: float) -> str:
        """The worker's next output line, or ProfileFailed at the deadline.

        Reads the pipe with os.read into our own buffer: a buffered readline could pull
        several lines into Python's buffer, and select() would then wait on an empty pipe
        while the answer sat unread.
        """
        while b"\n" not in self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.process.stdout], [], [], remaining)[0]:
                raise ProfileFailed(f"the profiling run took longer than {timeout_s:g} s and was stopped")
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                self.errors.seek(0)
                raise ProfileFailed(f"the profiling process ended: {self.errors.read()[-1500:]}")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()


_worker: _Worker | None = None


def run_isolated(
    options: ProfileOptions,
    trace_path: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> ProfileResult:
    """Profile in the worker process; `on_progress(done, total)` may raise to cancel.

    On a timeout, a cancel or any error the worker is killed (and started afresh next
    time), so no run outlives its caller.
    """
    global _worker
    trace_path = trace_path or new_trace_path()
    request = json.dumps({"options": dataclasses.asdict(options), "trace_path": trace_path}) + "\n"
    with _RUN_LOCK:
        if _worker is None or not _worker.alive():
            _worker = _Worker()
        worker = _worker
        deadline = time.monotonic() + timeout_s
        try:
            worker.process.stdin.write(request.encode())
            worker.process.stdin.flush()
            while True:
                line = worker.read_line(deadline, timeout_s)
                if line.startswith("progress "):
                    if on_progress:
                        on_progress(*map(int, line.split()[1].split("/")))
                elif line.startswith("error "):
                    raise ProfileFailed(line.removeprefix("error ").strip())
                elif line.startswith("{"):
                    return result_from_json(line)
        except BaseException:
            worker.kill()
            _worker = None
            raise


def stop_worker() -> None:
    global _worker
    with _RUN_LOCK:
        if _worker is not None:
            _worker.kill()
            _worker = None


def result_to_json(result: ProfileResult) -> str:
    return json.dumps(dataclasses.asdict(result))


def result_from_json(text: str) -> ProfileResult:
    raw = json.loads(text)

    def steps(items):
        return tuple(StepTiming(s["phases"], s["wall_ms"], tuple(map(tuple, s["spans"])), s["source"]) for s in items)

    return ProfileResult(
        **{
            **raw,
            "steps": steps(raw["steps"]),
            "warmup_steps": steps(raw["warmup_steps"]),
            "top_ops": tuple(OpTiming(**op) for op in raw["top_ops"]),
            "naive_ms": tuple(raw["naive_ms"]),
            "unprofiled_ms": tuple(raw["unprofiled_ms"]),
            "notes": tuple(raw["notes"]),
        }
    )


# --- What to change next -----------------------------------------------------------------


def suggestion(options: ProfileOptions, result: ProfileResult) -> tuple[str, ProfileOptions] | None:
    """The one change the verdict points to, as a label and the options with it applied."""
    cores = THREADS_RANGE[1]
    if result.verdict == "data-bound" and options.num_workers < min(2, WORKERS_RANGE[1]):
        return "Load batches in 2 DataLoader worker processes", dataclasses.replace(options, num_workers=2)
    if result.verdict == "copy-bound" and options.device == "cuda" and not options.pin_memory:
        return "Pin host memory for faster, asynchronous copies", dataclasses.replace(options, pin_memory=True)
    if result.verdict == "optimizer-bound" and options.optimizer != "sgd":
        return "Switch to plain SGD (no per-parameter state to update)", dataclasses.replace(options, optimizer="sgd")
    if result.verdict == "compute-bound" and options.threads < cores:
        return f"Use all {cores} CPU threads for the math", dataclasses.replace(options, threads=cores)
    if result.verdict == "compute-bound" and options.width > WIDTH_RANGE[0]:
        narrower = max(options.width // 2, WIDTH_RANGE[0])
        return f"Halve the model width to {narrower}", dataclasses.replace(options, width=narrower)
    return None


# --- Figures and the lesson ----------------------------------------------------------------


def phases_figure(result: ProfileResult, title: str = "Milliseconds per step, by phase") -> go.Figure:
    """Stacked bars: warm-up steps (perf_counter) first, then the active steps (profiler)."""
    steps = [*result.warmup_steps, *result.steps]
    labels = [f"warm-up {i + 1}" for i in range(len(result.warmup_steps))]
    labels += [f"step {i + 1}" for i in range(len(result.steps))]
    figure = go.Figure()
    for phase in (*PHASES, "other"):
        values = [s.other_ms if phase == "other" else s.phases[phase] for s in steps]
        figure.add_trace(go.Bar(name=phase, x=labels, y=values, marker_color=PHASE_COLOURS[phase]))
    if result.warmup_steps:
        figure.add_vrect(
            x0=-0.5,
            x1=len(result.warmup_steps) - 0.5,
            fillcolor="#eeeeee",
            opacity=0.5,
            line_width=0,
            annotation_text="warm-up",
            annotation_position="top left",
        )
    figure.update_layout(barmode="stack", title=title, yaxis_title="ms", height=420, legend={"orientation": "h"})
    return figure


def timeline_figure(result: ProfileResult) -> go.Figure:
    """A Gantt of the active steps: where each phase starts and ends, from the profiler's events."""
    figure = go.Figure()
    for phase in PHASES:
        spans = [(start, end) for step in result.steps for name, start, end in step.spans if name == phase]
        figure.add_trace(
            go.Bar(
                name=phase,
                y=[phase] * len(spans),
                x=[end - start for start, end in spans],
                base=[start for start, _ in spans],
                orientation="h",
                marker_color=PHASE_COLOURS[phase],
                showlegend=False,
            )
        )
    figure.update_layout(
        title="Timeline of the active steps",
        xaxis_title="ms since the first active step",
        yaxis={"autorange": "reversed"},
        height=320,
        barmode="overlay",
    )
    return figure


def top_ops_table(result: ProfileResult) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"operator": op.name, "calls": op.calls, "self ms": op.self_ms, "total ms": op.total_ms}
            for op in result.top_ops
        ]
    )


def explain(options: ProfileOptions, result: ProfileResult) -> list[str]:
    phases = result.mean_phases()
    wall = result.mean_wall_ms
    covered = sum(phases.values())
    lines = [
        f"**{result.verdict}**: {result.evidence}",
        f"The five phases cover {covered:.1f} of {wall:.1f} ms per step ({covered / wall:.0%}); the grey `other` "
        "bar is the rest (loop and profiler bookkeeping).",
    ]
    if result.warmup_steps:
        first = result.warmup_steps[0].wall_ms
        lines.append(
            f"The first warm-up step took {first:.1f} ms against {wall:.1f} ms once warm: measure after "
            "warm-up, or the first step's one-off costs (allocations, worker start-up) skew the average."
        )
    if options.data_cost_ms and options.num_workers == 0:
        lines.append(
            f"With `num_workers=0` the {options.data_cost_ms} ms of per-batch data work runs on the training "
            "loop's own thread, so the step waits for it every time."
        )
    elif options.data_cost_ms and options.num_workers:
        lines.append(
            f"{options.num_workers} worker process(es) prepare batches while the model trains, so the "
            f"loop waited {phases['data']:.1f} ms per step for data instead of ~{options.data_cost_ms} ms."
        )
    lines.append(
        f"The profiler itself made these steps **{result.overhead_ratio:.2f}×** as long as the same steps "
        "without it: small, fast operators pay the most, so keep the active window short."
    )
    if result.device == "cuda" and not result.synchronized:
        lines.append(
            "Without `torch.cuda.synchronize()` GPU work is asynchronous: a phase ends when its kernels "
            "are launched, and their time is charged to whatever waits for them later."
        )
    return lines


def _serve() -> None:
    """The worker's loop: one JSON request per stdin line; progress lines, then the result, on stdout."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):  # pay the profiler's first start-up before any request
        pass
    # The forkserver imports torch once; each DataLoader worker then forks from it ready to go.
    multiprocessing.get_context(WORKER_START).set_forkserver_preload(["torch", "explorers.profiling_lab"])
    for line in sys.stdin:
        try:
            request = json.loads(line)
            result = run_here(
                ProfileOptions(**request["options"]),
                request["trace_path"],
                on_step=lambda done, total: print(f"progress {done}/{total}", flush=True),
            )
            print(result_to_json(result), flush=True)
        except Exception as error:  # report and keep serving; the parent decides what the user sees
            print("error " + " ".join(f"{type(error).__name__}: {error}".split()), flush=True)


def _main() -> None:
    if sys.argv[1:] == ["--serve"]:
        _serve()
        return
    options = ProfileOptions(**json.loads(sys.argv[1]))
    result = run_here(options, on_step=lambda done, total: print(f"progress {done}/{total}", flush=True))
    print(result_to_json(result), flush=True)


if __name__ == "__main__":
    _main()


def timing_table(result: ProfileResult) -> pd.DataFrame:
    """Per active step: the profiler's wall time, the phases it explains, and a plain perf_counter stopwatch."""
    return pd.DataFrame(
        [
            {
                "step": i + 1,
                "profiler ms": round(step.wall_ms, 2),
                "phases ms": round(sum(step.phases.values()), 2),
                "stopwatch ms": round(naive, 2),
            }
            for i, (step, naive) in enumerate(zip(result.steps, result.naive_ms, strict=True))
        ]
    )


def data_cost_evidence(slow: ProfileResult, options: ProfileOptions, current: ProfileResult) -> str:
    """What a 20 ms data cost did, measured just now against the current settings."""
    before, after = current.mean_phases(), slow.mean_phases()
    grown = max(after, key=lambda phase: after[phase] - before[phase])
    return (
        f"Measured just now: the data phase went from {before['data']:.1f} to {after['data']:.1f} ms per step; "
        f"`{grown}` grew most. Compute did not change: the step simply waits for its batch."
    )
