"""The Real-scale lab's answer for Llama-3-8B, as a fresh worker gives it, against the whole model's fake step.

    .venv/bin/python benchmarks/bench_scale.py

Target (issue 20): a Llama-3-8B answer (bf16 mixed, AdamW, micro-batch 1, sequence 2048) within
10 s at first request on this machine, then instant from the run engine's cache. Each timing runs
in a fresh interpreter (`transformers` and the fake-tensor caches start cold, as in a new worker),
and the baseline, the whole 32-block model's fake step, runs in another fresh interpreter in the
same invocation, so the ratio holds on a noisy shared machine. The scaled and whole peaks must be
equal to the byte. Then the engine: a first request, and the same request again (answered from
its cache).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 10.0
ONE_PLAN = """
import json, sys, time
started = time.perf_counter()
from explorers.scale import models
from explorers.scale.experiment import PlanOptions, _plan
options = PlanOptions()
plan = _plan(models.config_for(options.model), options, "", whole={whole})
print(json.dumps({{"seconds": time.perf_counter() - started, "measuring": plan.seconds, "peak": plan.peak}}))
"""


def fresh(whole: bool) -> dict:
    code = ONE_PLAN.format(whole=whole)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    scaled, whole = fresh(False), fresh(True)
    assert scaled["peak"] == whole["peak"], (scaled, whole)
    print(f"Llama-3-8B, bf16 mixed, AdamW, micro-batch 1, sequence 2048: peak {scaled['peak'] / 2**30:.2f} GiB")
    print(
        f"fresh interpreter, scaled from 1- and 2-block copies: {scaled['seconds']:.1f} s "
        f"({scaled['measuring']:.1f} s measuring, the rest importing)"
    )
    print(f"fresh interpreter, the whole 32-block model: {whole['seconds']:.1f} s", end=" ")
    print(f"({whole['measuring']:.1f} s measuring)")
    print(f"ratio scaled / whole: {scaled['seconds'] / whole['seconds']:.2f}")

    from explorers.engine import Engine
    from explorers.scale.experiment import PlanOptions, measure_plan

    engine = Engine(workers=1)
    try:
        engine.submit(measure_plan, PlanOptions(model="gpt2", seq_len=128)).result()  # the worker is up
        started = time.perf_counter()
        engine.submit(measure_plan, PlanOptions()).result()
        first = time.perf_counter() - started
        started = time.perf_counter()
        engine.submit(measure_plan, PlanOptions()).result()
        again = time.perf_counter() - started
    finally:
        engine.close()
    print(f"run engine, first request: {first:.1f} s (target {TARGET_S:g} s)", end="; ")
    print(f"again, from its cache: {again * 1e3:.1f} ms")
    return 0 if first <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
