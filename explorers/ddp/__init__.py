"""DDP lab: what DistributedDataParallel does that several devices alone do not, on real processes.

Each run is a real `torch.distributed` job: 1 to 4 processes on 127.0.0.1 (gloo on CPU,
NCCL when there is a GPU per rank), a free port per run, a short process-group timeout,
one thread per rank and a hard overall limit, after which nothing of the run is left.

- `worker` is the script every rank runs (the same one torchrun runs on a cluster); `launcher` starts,
  watches and cleans up the ranks (`processes`: forked from a warm forkserver, or torchrun's agent);
  `reference` trains one process on the combined batches; `results` holds the run as plain data and
  `schema` reads a results file strictly; `analysis`, `lesson` (with `failures` and `words`), `card`
  and `figures` turn a run into facts, sentences, the answer card and charts.

What to expect: every rank holds the same gradient after backward, the mean of the local
ones; DDP matches one process on the combined batch to float tolerance; DistributedSampler
pads an uneven dataset by repeating the first indices of its list; without `set_epoch` each
epoch has the same order; uneven shards finish under `Join` and, without it, a rank waits
for a partner that never comes and fails at the short timeout; with accumulation under
`no_sync` the ranks communicate once per k micro-batches.

    from explorers import ddp
    run = ddp.train(world_size=2, per_rank_batch=4, dataset_size=10, steps=3, seed=0)
    run.ranks[1].indices            # per step, the dataset indices rank 1 trained on
    run.ranks[0].local_grads[0]     # 1-D tensor: rank 0's gradient before the all-reduce, step 0
    run.ranks[0].synced_grads[0]    # the same after it (equal on every rank)
    run.single_process_max_diff     # parameters against one process trained on the combined batches
    run.timings                     # launch and init per rank; data, forward, backward, optimizer per step
    ddp.explain(run)                # the lesson, with this run's numbers

    cluster = ddp.load_results("ddp-results.json")   # written by the worker under torchrun --nnodes N
"""

import importlib

# The notebook API, imported on first use (PEP 562): a rank that runs `explorers.ddp.worker`
# loads this package too, and must not pay for pandas, plotly and the run engine.
_HOMES = {
    "SamplerEpoch": "analysis",
    "gradient_checks": "analysis",
    "sampler_epochs": "analysis",
    "answer_card": "card",
    "comparison_rows": "card",
    "padding_prediction": "card",
    "load_results": "experiment",
    "run_ddp": "experiment",
    "train": "experiment",
    "explain": "lesson",
    "DDPOptions": "options",
    "DDPRun": "results",
    "RankResult": "results",
    "Timings": "results",
    "ResultsFileError": "schema",
    "parse": "schema",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'explorers.ddp' has no attribute {name!r}")
    return getattr(importlib.import_module(f"explorers.ddp.{_HOMES[name]}"), name)


__all__ = [
    "DDPOptions",
    "DDPRun",
    "RankResult",
    "ResultsFileError",
    "SamplerEpoch",
    "Timings",
    "answer_card",
    "comparison_rows",
    "explain",
    "gradient_checks",
    "load_results",
    "padding_prediction",
    "parse",
    "run_ddp",
    "sampler_epochs",
    "train",
]
