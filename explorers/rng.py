"""Seeded randomness that never leaks between users of one server process.

Streamlit serves every browser session from threads of one process, and torch's
default generators are process-wide. Some operations (dropout, `nn.Linear`'s default
initialisation) draw from them and take no `generator=` argument. `isolated_rng`
serialises such runs behind one lock, seeds the global generators inside, and restores
their previous state on the way out, so a run is reproducible from its seed and
leaves every other user's random stream exactly where it was.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

_GLOBAL_RNG_LOCK = threading.RLock()


@contextlib.contextmanager
def isolated_rng(seed: int, device: str = "cpu") -> Iterator[None]:
    kind = torch.device(device).type
    accelerator = kind in ("cuda", "mps")
    devices = [torch.device(device).index or 0] if accelerator else []
    with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=devices, device_type=kind if accelerator else "cuda"):
        torch.manual_seed(seed)
        yield
