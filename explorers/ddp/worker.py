"""The script every rank runs: one process, one model replica, one shard, DistributedDataParallel.

It reads the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), so the lab's launcher and torchrun start it the same way. On a real cluster::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m explorers.ddp.worker --out ddp-results.json --per-rank-batch 4 --dataset-size 64

Each rank records what it trained on (the indices of every batch), its gradients before the
all-reduce (captured by a DDP communication hook, which then does the averaging itself),
the gradients after it, and wall-clock times of every phase. Rank 0 gathers every rank's
record, trains the single-process reference on the same combined batches, and writes the
one results file (checkpoints and logs belong to one rank). With `--rank-dir` (the lab's
launcher) each rank also leaves its own record and a progress line there, so a run that
fails (uneven inputs without Join) still shows what every rank did.
"""

import time

STARTED_AT = time.time()  # before torch is imported: the launch phase ends when this script is ready

from explorers.lifeline import exit_with_parent  # noqa: E402

if __name__ == "__main__":  # under torchrun: now, not after torch's import, when a killed agent's ranks are orphans
    exit_with_parent()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401  (DDP's constructor imports it, ~2 s: counted as launch, not as init)
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.join import Join  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import explorers.ddp.model as lab_model  # noqa: E402
import explorers.ddp.options as lab_options  # noqa: E402
import explorers.ddp.reference as reference  # noqa: E402
import explorers.ddp.results as results  # noqa: E402
from explorers.ddp.settings import COLLECTIVE_TIMEOUT_S, INIT_TIMEOUT_S, LAUNCHED_AT_ENV  # noqa: E402

ERROR_CHARS = 400


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="One rank of the DDP lab's training run.")
    parser.add_argument("--out", required=True, help="results file rank 0 writes (JSON)")
    parser.add_argument("--rank-dir", help="where each rank also writes its own record and progress")
    defaults = lab_options.DDPOptions()
    for name in ("per_rank_batch", "dataset_size", "steps", "epochs", "seed", "accumulation"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    for name in ("shuffle", "set_epoch", "drop_last", "join"):
        parser.add_argument(
            "--" + name.replace("_", "-"), action=argparse.BooleanOptionalAction, default=getattr(defaults, name)
        )
    parser.add_argument("--bucket-cap-mb", type=float, default=defaults.bucket_cap_mb)
    parser.add_argument("--sharding", default=defaults.sharding)
    parser.add_argument("--device", default=defaults.device)
    return parser.parse_args(argv)


def options_from(args: argparse.Namespace, world_size: int, launcher: str) -> lab_options.DDPOptions:
    values = {name: getattr(args, name) for name in vars(args) if name not in ("out", "rank_dir")}
    return lab_options.from_dict(
        {**values, "world_size": world_size, "launcher": launcher}, lab_options.CLUSTER_WORLD_SIZE_RANGE
    )


class Recorder:
    """What this rank did, as plain data; also written (with progress) to --rank-dir as it goes."""

    def __init__(self, rank: int, rank_dir: str | None) -> None:
        self.rank_dir = Path(rank_dir) if rank_dir else None
        self.record = results.rank_record(
            rank,
            local_rank=int(os.environ.get("LOCAL_RANK", rank)),
            node=int(os.environ.get("GROUP_RANK", 0)),  # torchrun's node rank (--nnodes N gives 0 to N-1)
            pid=os.getpid(),
            launched_at=float(os.environ.get(LAUNCHED_AT_ENV, STARTED_AT)),
        )
        self.progress("starting", 0)

    def progress(self, phase: str, done: int) -> None:
        self.record["phase"] = phase
        if self.rank_dir is None:
            return
        if phase == "training" and done:  # a rank that dies mid-run (gloo aborts) still leaves what it did
            results.write_json(self.rank_dir / f"rank-{self.record['rank']}.json", {**self.record, "recorded": False})
        path = self.rank_dir / f"progress-{self.record['rank']}"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(f"{phase} {done}")
        os.replace(temporary, path)

    def save(self) -> None:
        if self.rank_dir is not None:
            results.write_json(self.rank_dir / f"rank-{self.record['rank']}.json", self.record)


class CommHook:
    """A DDP communication hook: keep each bucket's local gradients, then average them with all_reduce.

    DDP calls it once per bucket during backward of a synchronised step; a bucket's gradients
    at that moment are this rank's own (summed over any `no_sync` micro-steps). After its
    loop ends under Join, DDP calls it with zero buckets to shadow the others' all-reduces.
    """

    def __init__(self, model: torch.nn.Module, group, world_size: int, recorder: Recorder) -> None:
        self.names = {p.data_ptr(): name for name, p in model.named_parameters()}
        self.group, self.world_size, self.recorder = group, world_size, recorder
        self.local: dict[str, torch.Tensor] = {}
        self.where = {"epoch": 0, "step": 0, "shadow": False}

    def all_reduce(self, _state, bucket) -> torch.futures.Future[torch.Tensor]:  # DDP checks this annotation
        started = time.time()
        if not self.where["shadow"]:
            for parameter, gradient in zip(bucket.parameters(), bucket.gradients(), strict=True):
                self.local[self.names[parameter.data_ptr()]] = gradient.detach().clone()
        buffer = bucket.buffer()
        buffer.div_(self.world_size)  # as DDP's default hook: the sum of W averaged shares is the mean
        entry = {**self.where, "bucket": bucket.index(), "bytes": buffer.numel() * buffer.element_size()}
        entry |= {"start": started, "end": None}
        self.recorder.record["collectives"].append(entry)
        future = dist.all_reduce(buffer, group=self.group, async_op=True).get_future()

        def finished(done: torch.futures.Future) -> torch.Tensor:
            entry["end"] = time.time()
            return done.value()[0]

        return future.then(finished)


def span(start: float) -> list[float]:
    return [start, time.time()]


class GradientClock:
    """When each backward accumulated its last parameter gradient: the end of gradient computation.

    A post-accumulate-grad hook runs right after a parameter's `.grad` is written, before DDP's own
    hook on it can start that bucket's all-reduce; a bucket whose all-reduce started before this
    time overlapped the rest of backward.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.last: float | None = None
        for parameter in model.parameters():
            parameter.register_post_accumulate_grad_hook(self.ready)

    def ready(self, _parameter: torch.Tensor) -> None:
        self.last = time.time()


def _wrap(options: lab_options.DDPOptions, rank: int, device: torch.device, recorder: Recorder, group):
    """The rank's own model (seeded per rank on purpose: DDP broadcasts rank 0's), wrapped in DDP."""
    model = lab_model.build_model(options.seed + rank).to(device)
    recorder.record["param_sum_before_ddp"] = float(lab_model.flat(model.parameters()).sum())
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        process_group=group,
        bucket_cap_mb=options.bucket_cap_mb,
    )
    return model, ddp


@dataclass
class _Loop:
    """What every micro-batch of the loop touches, and the two halves of a step: backward, then the update."""

    model: torch.nn.Module
    ddp: DistributedDataParallel
    hook: CommHook
    optimizer: torch.optim.Optimizer
    recorder: Recorder
    device: torch.device

    def __post_init__(self) -> None:
        self.gradients = GradientClock(self.model)
        self.synchronise = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)

    def backward(self, x, y, synced: bool, group_size: int, entry: dict) -> torch.Tensor:
        """Forward and backward of one micro-batch, timed into `entry`; no_sync unless it ends the group."""
        with contextlib.nullcontext() if synced else self.ddp.no_sync():  # no_sync wraps forward and backward
            started = time.time()
            loss = lab_model.loss_of(self.ddp, x.to(self.device), y.to(self.device))
            self.synchronise()
            entry["forward"] = span(started)
            started = time.time()
            self.gradients.last = None
            (loss / group_size).backward()
            self.synchronise()
            entry["backward"] = span(started)
            entry["last_gradient_at"] = self.gradients.last
        return loss

    def update(self, epoch: int, step: int, entry: dict) -> torch.Tensor:
        """Record this step's local and averaged gradients, step the optimizer; returns the new parameters."""
        record = self.recorder.record
        local = lab_model.flat(self.hook.local[name] for name, _ in self.model.named_parameters()).cpu()
        synced_grads = lab_model.flat(p.grad for p in self.model.parameters()).cpu()
        buckets = sum(1 for c in record["collectives"] if c["step"] == step and not c["shadow"])
        record["steps"].append(
            {
                "epoch": epoch,
                "step": step,
                "local_grad": results.compact(local),
                "synced_grad": results.compact(synced_grads),
                "buckets": buckets,
            }
        )
        self.hook.local.clear()
        started = time.time()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.synchronise()
        entry["optimizer"] = span(started)
        return lab_model.flat(self.model.parameters()).cpu()


def train(options: lab_options.DDPOptions, rank: int, world_size: int, recorder: Recorder, group) -> dict:
    """The training loop; returns what rank 0 needs for the reference (initial and per-step parameters)."""
    device = torch.device(f"cuda:{recorder.record['local_rank']}" if options.device == "cuda" else "cpu")
    dataset = lab_model.IndexedData(options.dataset_size, options.seed)
    model, ddp = _wrap(options, rank, device, recorder, group)
    initial = lab_model.flat(model.parameters()).cpu()
    recorder.record["param_sum_after_ddp"] = float(initial.sum())
    hook = CommHook(model, group, world_size, recorder)
    ddp.register_comm_hook(None, hook.all_reduce)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lab_model.LEARNING_RATE)
    loop = _Loop(model, ddp, hook, optimizer, recorder, device)
    loader, sampler = lab_model.shard_loader(dataset, options, rank, world_size)
    recorder.record["init_done_at"] = time.time()
    recorder.progress("training", 0)
    step, after_steps = 0, {}
    for epoch in range(options.epochs):
        if sampler is not None and options.set_epoch:
            sampler.set_epoch(epoch)
        recorder.record["sampler_orders"].append(
            [int(i) for i in (sampler if sampler is not None else loader.dataset.indices)]
        )
        batches = len(loader)
        with Join([ddp], enable=options.join):
            hook.where["shadow"] = False
            fetch = iter(loader)
            for index in range(batches):
                micro = index % options.accumulation
                if micro == 0 and step >= options.steps:
                    break
                group_size = min(options.accumulation, batches - (index - micro))
                synced = micro == group_size - 1
                hook.where.update(epoch=epoch, step=step, micro_batch=len(recorder.record["micro_steps"]))
                entry = {"epoch": epoch, "step": step, "micro": micro, "synced": synced}
                started = time.time()
                x, y, indices = next(fetch)
                entry["data"] = span(started)
                loss = loop.backward(x, y, synced, group_size, entry)
                entry |= {"indices": [int(i) for i in indices], "loss": float(loss.detach()), "optimizer": None}
                if synced:
                    after_steps[step] = loop.update(epoch, step, entry)
                    step += 1
                recorder.record["micro_steps"].append(entry)
                recorder.progress("training", len(recorder.record["micro_steps"]))
            hook.where["shadow"] = True  # from here to the end of the Join block, this rank only shadows
        if options.join:  # a joined rank did not count the steps it shadowed: take the global count
            count = torch.tensor([step], device=device)
            dist.all_reduce(count, op=dist.ReduceOp.MAX, group=group)
            step = int(count.item())
        if step >= options.steps:
            break
    final = lab_model.flat(model.parameters()).cpu()
    recorder.record["final_param_sum"] = float(final.sum())
    return {"initial": initial, "after_steps": after_steps, "final": final}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "processes"
    recorder = Recorder(rank, args.rank_dir)
    try:
        options = options_from(args, world_size, launcher)
        torch.set_num_threads(1)  # one thread per rank: ranks share the machine's cores
        if options.device == "cuda":
            torch.cuda.set_device(recorder.record["local_rank"])
        recorder.record["ready_at"] = time.time()
        recorder.progress("init", 0)
        backend = "nccl" if options.device == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S))
        group = dist.new_group(timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        state = train(options, rank, world_size, recorder, group)
        recorder.record["finished_at"] = time.time()
        recorder.record["outcome"] = "finished"
        recorder.progress("gathering", len(recorder.record["micro_steps"]))
        recorder.save()
        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(recorder.record, gathered, dst=0, group=group)
        if rank == 0:  # one rank writes: the others' records came to it over the process group
            single = reference.train_single_process(
                options, gathered, state["initial"], state["after_steps"], state["final"]
            )
            results.write_json(Path(args.out), results.assemble(options, gathered, single, outcome="finished"))
        dist.barrier(group=group)  # no rank tears its connections down while rank 0 still works
        dist.destroy_process_group()
        recorder.progress("done", len(recorder.record["micro_steps"]))
    except BaseException as error:  # noqa: BLE001  (any failure is this rank's outcome, recorded for the lab)
        recorder.record["outcome"] = "failed"
        recorder.record["error"] = " ".join(f"{type(error).__name__}: {error}".split())[:ERROR_CHARS]
        recorder.record["finished_at"] = time.time()
        recorder.save()
        sys.stderr.write(f"rank {rank}: {recorder.record['error']}\n")
        sys.stderr.flush()
        os._exit(1)  # not destroy_process_group: with a peer gone or waiting it can block; the OS frees the sockets
    return 0


if __name__ == "__main__":
    sys.exit(main())
