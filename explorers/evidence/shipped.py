"""The real GPU traces this lab ships (assets/traces: HolisticTraceAnalysis's test data, MIT licence, MANIFEST.md).

Each title and key says what the source says the job was and how many ranks it had: never what the
trace shows, so none answers a question about it. The card is read from the trace itself.
HTA's `timeline_analysis/sampled_rank-0` was shipped once and dropped after an audit: it keeps 0.5% of its
job's runtime calls (the full traces keep about 20%), so its idle time was mostly events left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / "assets" / "traces"
SOURCE = "HolisticTraceAnalysis test data (MIT licence)"


@dataclass(frozen=True)
class Shipped:
    key: str
    file: str
    title: str
    source_path: str  # the file's path in facebookresearch/HolisticTraceAnalysis (assets/traces/MANIFEST.md)

    @property
    def path(self) -> Path:
        return FOLDER / self.file

    @property
    def source(self) -> str:
        """Where it comes from, as the page says it: the file's own path would name what some show (cuda_event_sync),
        so the manifest holds it."""
        return f"{SOURCE}; its path and sha256 in assets/traces/MANIFEST.md"


SHIPPED = {
    s.key: s
    for s in (
        Shipped("alexnet", "a100_alexnet_train.json.gz", "AlexNet forward benchmark (warm-up and measure)",
                "tests/data/critical_path/alexnet"),
        Shipped("one-step", "a100_cuda_event_sync.json.gz", "A test program, one ProfilerStep",
                "tests/data/critical_path/cuda_event_sync"),
        Shipped("embeddings-8", "a100_trace_diff_control.json.gz", "Embedding-table training, rank 3 of 8 (NCCL)",
                "tests/data/trace_diff/control"),
        Shipped("embeddings-2", "v100_trace_diff_test.json.gz", "Embedding-table training, rank 1 of 2 (NCCL)",
                "tests/data/trace_diff/test"),
        Shipped("train-v100", "v100_train_rank0.json.gz", "A training job, rank 0 of 1",
                "tests/data/ns_resolution_trace"),
        Shipped("rocm-loop", "mi250_minitoy_train.json.gz", "A training loop on ROCm 6.2, two ProfilerSteps",
                "tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
    )
}  # fmt: skip
DEFAULT = "alexnet"
# In assets/traces for the tests: files with no kernel or copy events, which the lab answers with a message
NO_GPU_WORK = ("cpu_only_gloo.json.gz", "a100_cupti_counters.json.gz")
