"""What compiling costs and what it pays back: one training step eager and compiled, on one stopwatch.

The model is deep-copied twice (same weights); one copy runs eagerly, the other through
`torch.compile` with inductor (C++ code from the machine's compiler on a CPU). Each step is
forward, backward and an SGD step, timed with `time.perf_counter` around the whole step:

- the compiled copy's first step holds the compile: dynamo's trace, AOT autograd's backward graph,
  inductor's code generation and the C++ build, and then the step itself;
- after `WARMUP` untimed steps each, eager and compiled steps alternate, so both see the same
  machine load; the gain is their mean paired difference with its noise margin
  (explorers.profiler.noise), and a break-even step count is given only when the gain is larger
  than its margin.

Inductor's caches are made fresh for the run (`torch._inductor.utils.fresh_cache`: its in-memory
caches cleared, a new cache folder in this process's temp folder, removed after), so a first step
here is a cold compile, and inductor's own cache counters say whether anything was found.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch._dynamo as dynamo
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache

from explorers import batches
from explorers.profiler.noise import paired_gap

WARMUP = 3
LEARNING_RATE = 0.01


@dataclass(frozen=True)
class Payoff:
    first_compiled_s: float  # the compiled copy's first step: the compile and one step
    first_eager_s: float
    eager_ms: tuple[float, ...]  # the timed steps, alternating with the compiled ones
    compiled_ms: tuple[float, ...]
    backend: str
    compiler: str  # the C++ compiler inductor used, as it names it
    cache_hits: int  # inductor's FX-graph cache hits during the compile (0 for a cold compile)
    loss_gap: float  # |eager − compiled| loss at the last step: compiled code computes the same step
    threads: int = 1  # torch's intra-op threads while it was timed

    @property
    def eager_mean_ms(self) -> float:
        return statistics.fmean(self.eager_ms)

    @property
    def compiled_mean_ms(self) -> float:
        return statistics.fmean(self.compiled_ms)

    @property
    def gain(self) -> tuple[float, float]:
        """Eager minus compiled step time (ms), and its noise margin."""
        return paired_gap(self.eager_ms, self.compiled_ms)

    @property
    def break_even(self) -> int | None:
        """Steps after which the compiled copy has spent less time in all than the eager one; None when the
        measured gain is not above its noise margin."""
        gain, margin = self.gain
        if gain <= margin or gain <= 0:
            return None
        return self._steps_at(gain)

    @property
    def break_even_range(self) -> tuple[int, int] | None:
        """The break-even at the gain plus and minus its noise margin (fewer steps, more steps)."""
        if self.break_even is None:
            return None
        gain, margin = self.gain
        return self._steps_at(gain + margin), self._steps_at(gain - margin)

    def _steps_at(self, gain_ms: float) -> int:
        extra_ms = (self.first_compiled_s - self.first_eager_s) * 1e3
        return max(1, math.ceil(extra_ms / gain_ms) + 1)


def _compiler() -> str:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return os.path.basename(get_cpp_compiler())
    except Exception as error:  # noqa: BLE001  (reported as found, never guessed)
        return f"unknown ({type(error).__name__})"


def _step(model, optimizer, batch, target, loss_fn) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(batches.call(model, batch), target)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


@contextlib.contextmanager
def headers_in(folder: str):
    """Inductor's precompiled headers in `folder` for the run. Inductor keeps them apart from its cache, which
    fresh_cache moves, in a folder it names once, when it is first imported: in the server's forkserver, so in
    the server's temp folder, where they outlived the run and the server (torch/_inductor/codecache.py)."""
    from torch._inductor import codecache

    saved = codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR
    codecache._HEADER_DIR = os.path.join(folder, "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
    codecache._precompile_header.cache_clear()  # it remembers where it put each header
    try:
        yield codecache._HEADER_DIR
    finally:
        codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR = saved
        codecache._precompile_header.cache_clear()


def payoff(
    model: torch.nn.Module,
    batch_list: Sequence,
    targets: Sequence,
    loss_fn: Callable = torch.nn.functional.cross_entropy,
    steps: int = 20,
    report: Callable | None = None,
) -> Payoff:
    """Time `steps` training steps eager and compiled (inductor), on copies of `model`; batches are cycled."""
    eager, compiled_model = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    compiled = torch.compile(compiled_model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=LEARNING_RATE) for m in (eager, compiled_model)]
    data = [(batch_list[i % len(batch_list)], targets[i % len(targets)]) for i in range(steps + WARMUP + 1)]
    counters.clear()
    try:
        if report:
            report(0, steps + 1)
        # compile_threads=1: no compile subprocesses, so a cancel or a timeout leaves none behind
        with (
            fresh_cache(dir=tempfile.gettempdir()),
            headers_in(os.environ["TORCHINDUCTOR_CACHE_DIR"]),  # fresh_cache's folder, removed with it
            torch._inductor.config.patch(compile_threads=1),
        ):
            start = time.perf_counter()
            _step(compiled, optimizers[1], *data[0], loss_fn)
            first_compiled = time.perf_counter() - start
            start = time.perf_counter()
            _step(eager, optimizers[0], *data[0], loss_fn)
            first_eager = time.perf_counter() - start
            hits = int(counters["inductor"]["fxgraph_cache_hit"])
            if report:
                report(1, steps + 1)
            for batch, target in data[1 : WARMUP + 1]:
                _step(eager, optimizers[0], batch, target, loss_fn)
                _step(compiled, optimizers[1], batch, target, loss_fn)
            eager_ms, compiled_ms, losses = [], [], (0.0, 0.0)
            for i, (batch, target) in enumerate(data[WARMUP + 1 :], 2):
                start = time.perf_counter()
                eager_loss = _step(eager, optimizers[0], batch, target, loss_fn)
                eager_ms.append((time.perf_counter() - start) * 1e3)
                start = time.perf_counter()
                compiled_loss = _step(compiled, optimizers[1], batch, target, loss_fn)
                compiled_ms.append((time.perf_counter() - start) * 1e3)
                losses = (eager_loss, compiled_loss)
                if report:
                    report(i, steps + 1)
    finally:
        dynamo.reset()
    return Payoff(
        first_compiled,
        first_eager,
        tuple(eager_ms),
        tuple(compiled_ms),
        "inductor",
        _compiler(),
        hits,
        abs(losses[0] - losses[1]),
        torch.get_num_threads(),
    )
