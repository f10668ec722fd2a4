"""How the DDP lab writes numbers and names into sentences: short, and safe to render as markdown."""

from __future__ import annotations

from explorers.ddp.results import FORKSERVER_COLD, FORKSERVER_SHARED, FORKSERVER_WARM, TORCHRUN

LAUNCHERS = {"processes": "the lab's launcher", "torchrun": "torchrun"}
STARTED_BY = {  # how a run's ranks started, for the banner over its diagram
    FORKSERVER_WARM: "forked from a warm forkserver",
    FORKSERVER_COLD: "forkserver started for this run (torch imported once)",
    FORKSERVER_SHARED: "forked from a shared forkserver",
    TORCHRUN: "started by torchrun",
}
CLUSTER_COMMAND = (  # the same worker script on N machines; rank 0 writes the results file
    "torchrun --nnodes N --nproc-per-node GPUS --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\\n"
    "    -m explorers.ddp.worker --out ddp-results.json --per-rank-batch 4 --dataset-size 64 --device cuda"
)
FLOAT_TOLERANCE = 1e-5  # float32 training against a float64 reference, a dozen steps: differences are ~1e-7


def code(text: str) -> str:
    """Text from a run (an error message) as a code span: markdown inside it is never rendered."""
    return "`" + " ".join(text.replace("`", "'").split()) + "`"


def indices(values, shown: int = 12) -> str:
    values = list(values)
    text = ", ".join(str(v) for v in values[:shown])
    return text + (f" … ({len(values)} in all)" if len(values) > shown else "")


def ranks(ranks) -> str:
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + " and ".join(", ".join(map(str, ranks)).rsplit(", ", 1))


PLURALS = {"process": "processes", "entry": "entries", "micro-batch": "micro-batches", "batch": "batches"}


def plural(count: int, word: str) -> str:
    return f"{count} {word if count == 1 else PLURALS.get(word, word + 's')}"
