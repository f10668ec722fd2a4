"""A light run beside a compile, on one class-server replica's engine: its time against the same run alone.

    python benchmarks/bench_compile_fairness.py [--replicas 2] [--light 6]

`make serve REPLICAS=N` gives each replica `deploy.serve.workers_per_replica(N)` workers. One
session's Compile payoff (inductor, up to minutes) is a long run: it may hold all workers but one
(`explorers.scheduling.long_run_cap`). A second session's light run (a Fix-the-loop drill's loop,
about 0.3 s, each on a seed no cache holds) is timed from submit to result, first alone, then while
the payoff compiles on the same engine. Target: the median beside the compile within 2x the median
alone. Engine level (no browser): the page's drawing adds the same to both. `--workers 1` gives the
engine one worker, as replicas had before 2026-12-06, for the before figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deploy import serve  # noqa: E402
from explorers.compiled import experiment as compile_lab  # noqa: E402
from explorers.drills.experiment import DrillOptions, run_loop  # noqa: E402
from explorers.engine import Engine  # noqa: E402

TARGET_RATIO = 2.0


def light_s(engine: Engine, seed: int) -> float:
    start = time.perf_counter()
    engine.submit(run_loop, DrillOptions(seed=seed), session="light").result()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--light", type=int, default=6, help="light runs timed in each condition")
    parser.add_argument("--workers", type=int, default=None, help="the engine's workers (default: a replica's)")
    args = parser.parse_args()
    os.environ["EXPLORER_WORKERS"] = str(serve.workers_per_replica(args.replicas))
    engine = Engine(workers=args.workers)
    try:
        for seed in range(9_000, 9_000 + 2 * engine.size):  # warm every worker's imports
            light_s(engine, seed)
        alone = [light_s(engine, 9_100 + i) for i in range(args.light)]
        options = compile_lab.PayoffOptions(width=48, seed=int(time.time()) % 9_000)  # no cache holds it
        payoff = engine.submit(compile_lab.measure, options, session="compiling", long=True, timeout_s=600)
        while payoff.progress.total == 0 and not payoff.done:  # running: it reports once it starts
            time.sleep(0.05)
        beside = []
        for i in range(args.light):
            if payoff.done:
                break
            beside.append(light_s(engine, 9_200 + i))
        compiling = not payoff.done
        payoff.result()
    finally:
        engine.close()
    ratio = statistics.median(beside) / statistics.median(alone) if beside else float("nan")
    print(f"{engine.size} workers for {args.replicas} replicas on {os.cpu_count()} cores")
    print(f"light run alone: median {statistics.median(alone):.3f} s ({', '.join(f'{v:.2f}' for v in alone)})")
    print(f"beside the compile: median {statistics.median(beside):.3f} s ({', '.join(f'{v:.2f}' for v in beside)})")
    print(f"ratio {ratio:.2f}x (target {TARGET_RATIO}x); the compile was still running at the end: {compiling}")
    sys.exit(0 if ratio <= TARGET_RATIO else 1)


if __name__ == "__main__":
    main()
