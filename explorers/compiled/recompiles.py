"""Recompiles, step by step: how many graphs dynamo compiled at each call, why, and when it gave up.

The model is compiled with a counting backend: dynamo traces and guards as it always does, and
the backend, handed each captured graph, counts it and runs it as plain PyTorch (no code is
generated, so a step takes milliseconds). Each call of a captured graph is counted too, so a step
whose forward ran no compiled graph at all is seen, not assumed: that is dynamo's fallback to
eager once the recompile limit is hit. Why dynamo recompiled is its own `recompiles` log, read
from its logger while the run lasts.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch._dynamo as dynamo
from torch._dynamo.utils import counters
from torch._logging._internal import log_state

RECOMPILES_LOGGER = "torch._dynamo.guards.__recompiles"


@dataclass(frozen=True)
class Step:
    batch_size: int
    graphs_compiled: int  # graphs dynamo handed the backend during this call
    graph_calls: int  # calls of compiled graphs during this call (0: the forward ran eagerly)
    reasons: tuple[str, ...]  # dynamo's guard failures that caused the recompiles, first line each


@dataclass(frozen=True)
class Recompiles:
    dynamic: bool | None
    recompile_limit: int
    steps: tuple[Step, ...]
    limit_hit: str | None  # dynamo's own message when it stopped recompiling, first line
    limit_hit_at: int | None = None  # the call (1-based) during which dynamo reported it

    def first(self, calls: int) -> Recompiles:
        """The schedule's first `calls` calls: what a run of that many calls would have shown."""
        hit = self.limit_hit_at is not None and self.limit_hit_at <= calls
        return dataclasses.replace(
            self,
            steps=self.steps[:calls],
            limit_hit=self.limit_hit if hit else None,
            limit_hit_at=self.limit_hit_at if hit else None,
        )

    @property
    def graphs(self) -> int:
        return sum(s.graphs_compiled for s in self.steps)

    @property
    def eager_steps(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.steps, 1) if not s.graph_calls)


class _Log(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def recompile_log():
    """Dynamo's `recompiles` artifact, captured here and not printed; the logging state is put back after."""
    logger = logging.getLogger(RECOMPILES_LOGGER)
    handler = _Log()
    was_enabled = "recompiles" in log_state.artifact_names
    level, propagate = logger.level, logger.propagate
    log_state.enable_artifact("recompiles")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        if not was_enabled:
            log_state.artifact_names.discard("recompiles")


def _reasons(message: str) -> list[str]:
    """The guard failures listed in one recompile message: '- 0/1: tensor 'x' size mismatch ...'."""
    return [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]


def _limit_message() -> str | None:
    for text in counters["unimplemented"]:
        if "recompile limit" in text.lower() or "cache size limit" in text.lower():
            return text.strip().splitlines()[0]
    return None


def recompiles(model: torch.nn.Module, batches: list, dynamic: bool | None, recompile_limit: int) -> Recompiles:
    """Call the compiled model on each batch in turn (a fresh dynamo: call `dynamo.reset()` around it)."""
    tally = {"compiled": 0, "calls": 0}

    def backend(graph: torch.fx.GraphModule, example_inputs):
        tally["compiled"] += 1

        def run(*args):
            tally["calls"] += 1
            return graph(*args)

        return run

    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    steps, hit_at = [], None
    counters.clear()
    with dynamo.config.patch(recompile_limit=recompile_limit), recompile_log() as log:
        for number, batch in enumerate(batches, 1):
            before, calls, logged = tally["compiled"], tally["calls"], len(log)
            compiled(batch)
            reasons = tuple(r for message in log[logged:] for r in _reasons(message)[:1])
            steps.append(Step(len(batch), tally["compiled"] - before, tally["calls"] - calls, reasons))
            if hit_at is None and _limit_message():
                hit_at = number
    return Recompiles(dynamic, recompile_limit, tuple(steps), _limit_message(), hit_at)
