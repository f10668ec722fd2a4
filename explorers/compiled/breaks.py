"""Graph breaks, as `torch._dynamo.explain` reports them, and what `fullgraph=True` raises instead.

`explain` traces one call with dynamo and returns what it captured: the FX graphs, the breaks
between them with dynamo's reason and the user frames where each happened. Nothing is
compiled to machine code (no backend runs), so it takes a second, not the tens of seconds an
inductor compile takes.
"""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass

import torch
import torch._dynamo as dynamo

from explorers import batches

TORCH_DIR = os.path.dirname(torch.__file__)


@dataclass(frozen=True)
class Break:
    reason: str  # dynamo's reason, its first line
    detail: str  # the rest of dynamo's explanation (hints), as it gave it
    file: str  # the user frame nearest the break (torch's own frames skipped)
    line_number: int
    line: str  # that line of source, stripped


@dataclass(frozen=True)
class GraphBreaks:
    graphs: int
    breaks: tuple[Break, ...]
    ops_per_graph: tuple[int, ...]  # explain's own count per graph (its ops_per_graph: the FX call_function nodes)

    @property
    def break_count(self) -> int:
        return len(self.breaks)


def _user_frame(stack) -> tuple[str, int, str]:
    frames = [f for f in stack if not f.filename.startswith(TORCH_DIR)] or list(stack)
    if not frames:
        return "", 0, ""
    frame = frames[-1]
    line = frame.line or linecache.getline(frame.filename, frame.lineno)
    return frame.filename, frame.lineno or 0, (line or "").strip()


def explain(model: torch.nn.Module, batch: object) -> GraphBreaks:
    """Dynamo's account of one forward call of `model` on `batch` (called as explorers.batches does)."""
    report = dynamo.explain(lambda b: batches.call(model, b))(batch)
    found = []
    for reason in report.break_reasons:
        head, _, rest = reason.reason.strip().partition("\n")
        found.append(Break(head.strip(), rest.strip(), *_user_frame(reason.user_stack)))
    return GraphBreaks(report.graph_count, tuple(found), tuple(len(ops) for ops in report.ops_per_graph))


def fullgraph_error(model: torch.nn.Module, batch: object) -> str | None:
    """PyTorch's error when `fullgraph=True` meets a break ("TypeName: message"), or None when it compiles whole.
    The eager backend: dynamo traces and guards, and no code is generated."""
    compiled = torch.compile(lambda b: batches.call(model, b), fullgraph=True, backend="eager")
    try:
        compiled(batch)
    except Exception as error:  # noqa: BLE001  (the error is the lesson)
        return f"{type(error).__name__}: {error}"
    return None
