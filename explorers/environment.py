"""Facts about the machine a lab ran on: the torch build, devices, threads, layout engine."""

from __future__ import annotations

import platform

import torch

from explorers import graphs


def available_devices() -> list[str]:
    """CPU always; CUDA and MPS only when this torch build can use them."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def cuda_devices() -> int:
    """How many CUDA devices this torch build can use (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_label(device: str) -> str:
    if device == "cuda":
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return device


def facts() -> dict[str, str]:
    mps = getattr(torch.backends, "mps", None)
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "devices": ", ".join(device_label(d) for d in available_devices()),
        "CUDA": f"yes, {torch.cuda.device_count()} device(s)" if torch.cuda.is_available() else "no",
        "MPS": "yes" if mps is not None and mps.is_available() else "no",
        "CPU threads (torch)": str(torch.get_num_threads()),
        "graph layout engine": graphs.layout_engine_name() or "none (graphs draw in the browser; no image export)",
    }


def provenance(device: str) -> str:
    """One line naming what produced a figure, for captions and notes."""
    return f"{device_label(device)} · torch {torch.__version__}"
