"""Imported once by the engine's forkserver: one tiny dynamo compile, so that no worker pays for dynamo's first.

The first compile in a process imports a few hundred modules (AOT autograd, symbolic shapes, export, parts
of inductor) and fills dynamo's caches. Measured on the 2-core machine, Compile lab at its defaults: a
worker's first recompile schedule took 580 ms and the ones after it 160 ms; with this warm-up done before
the fork, the first took 210 ms, and the forkserver took 430 ms longer to start, once per server.

The backend hands the graph back: no code is generated, and `dynamo.reset()` leaves nothing compiled.
Tensors of a few elements keep torch out of OpenMP's parallel regions, which a process must not enter
before it forks (see compiled/isolated.py).
"""

import contextlib

import torch
import torch._dynamo as dynamo


def warm() -> None:
    compiled = torch.compile(lambda x: torch.relu(x) * 2, backend=lambda graph, example_inputs: graph)
    try:
        compiled(torch.ones(3))
        compiled(torch.ones(4))  # a second shape: the recompile with a dynamic size (symbolic shapes, sympy)
    finally:
        dynamo.reset()


with contextlib.suppress(Exception):  # an error would stop the forkserver; the first compile pays instead
    warm()
