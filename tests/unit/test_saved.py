"""The one definition of "saved for backward": counting must not change what backward does."""

from __future__ import annotations

import gc

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from explorers import saved
from tests.zoo import ZOO, call


def backward_outcome(name: str, counted: bool) -> tuple[str | None, list[torch.Tensor | None]]:
    model, batch = ZOO[name].build()
    found: dict[int, int] = {}
    try:
        with torch.random.fork_rng(), saved.counting(set(), found) if counted else torch.enable_grad():
            torch.manual_seed(0)  # the same dropout masks in both runs
            output = call(model, batch)
        ZOO[name].loss(output).backward()
        error = None
    except RuntimeError as raised:
        error = str(raised).split(":")[0]
    return error, [p.grad for p in model.parameters()]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_counting_leaves_backward_as_pytorch_runs_it_errors_included(name):
    plain_error, plain_grads = backward_outcome(name, counted=False)
    counted_error, counted_grads = backward_outcome(name, counted=True)
    assert counted_error == plain_error  # an in-place change of a saved tensor is refused under counting too
    for plain, counted in zip(plain_grads, counted_grads, strict=True):
        assert (plain is None) == (counted is None)
        if plain is not None:
            torch.testing.assert_close(counted, plain, rtol=0, atol=0)


def test_a_saved_output_is_freed_with_its_graph():
    x = torch.randn(64, 64, requires_grad=True)
    with saved.counting(set(), found := {}):
        y = torch.sigmoid(x)  # sigmoid saves its own output
    assert sum(found.values()) == y.untyped_storage().nbytes()
    storage = StorageWeakRef(y.untyped_storage())
    del y
    gc.collect()
    assert storage.expired(), "the counting hooks kept a saved output alive after its graph was gone"
