"""Compare `explorers.memory.measure` with CUDA's own allocator counter, where a GPU exists.

    python benchmarks/gpu_memory_check.py

For a few configurations it prints the measured peak (MemTracker) against
`torch.cuda.max_memory_allocated` over the same step, as a ratio; the lab's promise is
within 5%. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from explorers.memory import experiment as memory_lab  # noqa: E402
from explorers.memory.experiment import MemoryOptions  # noqa: E402

CONFIGS = [
    MemoryOptions(preset="mlp", width=1024, depth=4, batch_size=256, device="cuda"),
    MemoryOptions(preset="mlp", width=1024, depth=4, batch_size=256, optimizer="sgd", device="cuda"),
    MemoryOptions(preset="cnn", width=64, depth=3, batch_size=64, device="cuda"),
    MemoryOptions(preset="transformer", width=256, depth=2, seq_len=128, batch_size=16, device="cuda"),
    MemoryOptions(preset="mlp", width=1024, depth=4, batch_size=256, checkpointing=True, device="cuda"),
    MemoryOptions(preset="mlp", width=1024, depth=4, batch_size=256, precision="bf16", device="cuda"),
]


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to compare (run this where a GPU is present)")
        return 0
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    worst = 0.0
    for options in CONFIGS:
        result = memory_lab.measure_point(options, options.batch_size)
        ratio = result.peak / result.cuda_peak
        worst = max(worst, abs(ratio - 1))
        print(
            f"{options.preset:12} {options.optimizer:5} {options.precision:5} ckpt={options.checkpointing!s:5} "
            f"tracker peak {result.peak / 2**20:9.1f} MiB  cuda peak {result.cuda_peak / 2**20:9.1f} MiB  "
            f"ratio {ratio:.3f}"
        )
    print(f"largest deviation: {worst:.1%}")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
