"""What an engine worker's own forkserver preloads: it serves the Profiler's DataLoader workers and DDP's ranks.

multiprocessing keeps one forkserver per process, started by whichever child comes first with the
preload list set at that moment. Started by a DataLoader with torch alone, it made every DDP rank
forked from it later import torch._dynamo and its worker module itself: on the 2-core machine each
DDP notch took about 2.8 s instead of 0.9 s once the Profiler had used loader workers in that
engine worker. So whoever starts it, it preloads what both need (about 1.8 s to start, against
0.9 s for torch alone, once per worker; about 300 MB held).
"""

# torch._dynamo is DDP's constructor's import; explorers.ddp.worker is what a rank runs.
PRELOAD = ["torch", "torch._dynamo", "torch.distributed", "explorers.ddp.worker"]
