"""How long the Reproducibility lab's default comparison takes, and what share of it is starting processes.

    .venv/bin/python benchmarks/bench_reproducibility.py [rounds]

Each round, interleaved so that the machine's load hits all alike:
  (a) the default comparison, `compare_runs(CompareOptions())`: 2 runs, each forked from the
      template interpreter (warm after the first round, which is left out);
  (b) the same 2 runs, each a new interpreter (`launcher="interpreter"`): what (a) saves;
  (c) the same two runs of the job in this process, which has already imported everything:
      what the comparison would cost without starting processes.
The shares are 1 - (c) / (a) and 1 - (c) / (b), from the medians; the forked runs' own phase
timings break (a) down (start until "ready", the first calls' imports of torch._dynamo /
torch._inductor, DataLoader workers, steps). The machine is shared and noisy: the load average
is printed before and after, and the spread of the rounds with the medians.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from explorers.reproducibility import fresh, job  # noqa: E402
from explorers.reproducibility.experiment import CompareOptions, compare_runs  # noqa: E402

TARGET_S = 3.0


def in_this_process(config: job.JobConfig, runs: int) -> float:
    started = time.perf_counter()
    for _ in range(runs):
        job.run(config)
    return time.perf_counter() - started


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (range {min(values):.2f} to {max(values):.2f})"


def main(rounds: int) -> None:
    options = CompareOptions()
    request = {"config": options.job().as_dict()}
    print(f"cores {os.cpu_count()}, load average before {os.getloadavg()[0]:.1f}; {rounds} interleaved rounds")
    in_this_process(options.job(), 1)  # imports what the job's first calls import, once, outside the measurement
    compare_runs(options)  # starts the template
    forked, interpreted, warm, starts, totals = [], [], [], [], []
    phases: dict[str, list[float]] = {}
    for _ in range(rounds):
        started = time.perf_counter()
        comparison = compare_runs(options)
        forked.append(time.perf_counter() - started)
        assert comparison.bitwise_equal, "the default comparison must be bitwise equal"
        for run in comparison.runs:
            assert run.launch == fresh.TEMPLATE_WARM, run.launch
            starts.append(run.start_s)
            totals.append(run.total_s)
            for phase, seconds in run.timings.items():
                phases.setdefault(phase, []).append(seconds)
        started = time.perf_counter()
        fresh.run_fresh([request] * options.runs, launcher="interpreter")
        interpreted.append(time.perf_counter() - started)
        warm.append(in_this_process(options.job(), options.runs))
    forked_s, interpreted_s, warm_s = (statistics.median(x) for x in (forked, interpreted, warm))
    print(f"load average after {os.getloadavg()[0]:.1f}")
    print(
        f"(a) default comparison, 2 runs forked from the template: {spread(forked)}; target < {TARGET_S:g} s: "
        f"{'met' if forked_s < TARGET_S else 'NOT met'}"
    )
    print(f"(b) the same 2 runs, each a new interpreter:           {spread(interpreted)}")
    print(f"(c) the same 2 runs in this warm process:              {spread(warm)}")
    print(f"(a) / (b) = {forked_s / interpreted_s:.2f}x")
    print(f"share spent starting processes: (a) {1 - warm_s / forked_s:.0%}, (b) {1 - warm_s / interpreted_s:.0%}")
    print("inside each forked run (median over runs and rounds):")
    start_s, total_s = statistics.median(starts), statistics.median(totals)
    print(f"  fork until 'ready': {start_s:.3f} s of {total_s:.2f} s to the result ({start_s / total_s:.0%})")
    for phase, values in phases.items():
        print(f"  job phase {phase!r:>14}: {statistics.median(values):.3f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
