"""The slow-step drills: ten training loops, each correct but for one planted performance bug, and the fixes offered.

Every drill is the same loop (explorers/slowstep/loops.py) with one part written the slow way.
`Drill.loop` is that loop; `Drill.correct` is it with the drill's right fix, the change a senior
engineer would make first. `FIXES` is the toolbox the answers are drawn from: the drills' own
fixes and the reflexes people reach for without evidence (more DataLoader workers, a larger
learning rate, `zero_grad(set_to_none=True)`, `cudnn.benchmark`, logging less often). Each fix is
a change to the loop, so any fix can be run on any drill and judged by its measurement.

What a drill's run *shows* is never written here: the lab reads it from the run
(explorers/slowstep/measure.py). `planted` is where the claims test expects the extra time on every
seed it tries, and nothing on screen reads it.

Where the bugs come from:
- a costly per-sample augmentation in the main process (`num_workers=0`): PyTorch's "Performance
  Tuning Guide" ("Enable async data loading and augmentation"), and the DataLoader docs on
  single- and multi-process loading. DataLoader workers hide it when cores are free; doing it on the whole
  batch at once removes most of it (torchvision.transforms.v2 and Kornia augment batches), so that is the fix
  offered first, and workers are offered beside it;
- normalisation statistics recomputed in `__getitem__`: forum threads "DataLoader is very slow"
  (discuss.pytorch.org), where the dataset's mean and std are computed per sample;
- rows kept as Python lists and turned into a tensor every step: the UserWarning "Creating a tensor from
  a list of numpy.ndarrays is extremely slow" (torch/csrc/utils/tensor_new.cpp) and its forum threads;
- a float64 model: the `torch.set_default_dtype` docs and threads on NumPy arrays (float64) fed
  straight into a model ("why is my model so slow after torch.from_numpy");
- a Python loop over the samples of a batch: the tuning guide's advice to batch work, and threads on
  per-sample forward passes;
- anomaly detection left on: the tuning guide, "Disable debugging APIs" (`torch.autograd.detect_anomaly`);
- activation checkpointing on a model that fits: the `torch.utils.checkpoint` docs (it trades compute
  for memory: the forward runs again in the backward);
- an EMA made by deep-copying the model each step: `torch.optim.swa_utils.AveragedModel` and its
  `get_ema_multi_avg_fn` (in place, one foreach update), and threads on slow EMA updates;
- per-sample metrics in a Python loop: the tuning guide on avoiding CPU-GPU synchronization
  (`.item()` in a loop), and torchmetrics' vectorised updates;
- a checkpoint saved every step: the tutorial "Saving and loading a general checkpoint", which saves
  once per epoch or N steps.
The `.item()` call every step is logging, offered as a fix ("log every 50 steps"): on a CPU it costs
little, and the GPU evidence lab shows traces where the same call holds the host.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from explorers.slowstep.loops import PHASES, Loop


@dataclass(frozen=True)
class Fix:
    key: str
    label: str  # what the learner picks: the change, in an engineer's words
    code: str  # the change as code
    apply: Callable[[Loop], Loop] = field(compare=False)
    reflex: bool = False  # tried without evidence: more workers, a larger LR, set_to_none, cudnn.benchmark, logging
    statement: str = ""  # the lesson's Statement that says why it works (its own key unless named)


def _set(**changes) -> Callable[[Loop], Loop]:
    return lambda loop: replace(loop, **changes)


F = Fix
FIXES: dict[str, Fix] = {
    f.key: f
    for f in (
        F("augment_batch", "Augment the whole batch at once: one grouped conv1d per pass, in collate_fn",
          "conv1d(x[None], kernels, padding=4, groups=len(x))  # per pass, on the batch",
          lambda loop: replace(loop, augment="heavy, batched" if loop.augment == "heavy" else loop.augment)),
        F("workers", "Run the DataLoader with 2 worker processes",
          "DataLoader(..., num_workers=2, persistent_workers=True)", _set(workers=2), reflex=True),
        F("tensor_rows", "Turn the rows into one tensor once, before training", "rows = torch.tensor(rows)  # once",
          _set(rows="tensor")),
        F("statistics_once", "Compute the normalisation statistics once, in the Dataset's `__init__`",
          "self.mean, self.std = rows.mean(0), rows.std(0)  # in __init__", _set(normalise="once")),
        F("float32", "Train in float32", "model.float(); x = x.float()", _set(dtype="float32")),
        F("batched", "Call the model once on the whole batch", "out = model(x)", _set(forward="batched")),
        F("anomaly_off", "Turn autograd's anomaly detection off", "torch.autograd.set_detect_anomaly(False)",
          _set(anomaly=False)),
        F("no_checkpointing", "Drop activation checkpointing", "x = block(x)", _set(checkpointing=False)),
        F("ema_in_place", "Update the EMA in place with one foreach call",
          "torch._foreach_lerp_(ema_params, params, 1 - decay)", _set(ema="in place")),
        F("vector_metrics", "Compute the metrics on the whole batch at once",
          "predicted = out.argmax(1); correct += (predicted == y).sum()", _set(metrics="vectorised")),
        F("save_less", "Save a checkpoint every 500 steps", "if step % 500 == 0: torch.save(...)",
          _set(save="every 500 steps")),
        F("larger_lr", "Raise the learning rate tenfold", "AdamW(model.parameters(), lr=1e-2)",
          lambda loop: replace(loop, lr=loop.lr * 10), reflex=True),
        F("set_to_none", "Zero gradients with set_to_none=True", "optimizer.zero_grad(set_to_none=True)",
          _set(zero_grad_set_to_none=True), reflex=True),
        F("cudnn_benchmark", "Turn on torch.backends.cudnn.benchmark", "torch.backends.cudnn.benchmark = True",
          _set(cudnn_benchmark=True), reflex=True),
        F("log_less", "Log the loss with .item() every 50 steps, not every step",
          "if step % 50 == 0: log(loss.item())", _set(log="every 50 steps"), reflex=True),
    )
}  # fmt: skip
REFLEXES = tuple(k for k, f in FIXES.items() if f.reflex)
OTHER_FIXES_SHOWN = 2  # beside the right fix, two other drills' own fixes


RECORD_PREFIX = "slowstep."  # a kept answer's record key: the prefix, the drill's link id and the seed


@dataclass(frozen=True)
class Drill:
    name: str
    bug: dict  # the Loop fields written the slow way
    fix: str  # the key of the fix a senior engineer would make first
    planted: tuple[str, ...]  # the phases the bug adds time to (the claims test's expectation; never shown)
    slow_code: str  # the slow way, as it reads in the loop (shown once answered)

    @property
    def loop(self) -> Loop:
        return Loop(**self.bug)

    @property
    def correct(self) -> Loop:
        return FIXES[self.fix].apply(self.loop)

    @property
    def link_id(self) -> str:
        """The drill in a link: a stable hash of its name, which says nothing of the bug (the name does)."""
        return hashlib.blake2s(f"slowstep-{self.name}".encode(), digest_size=3).hexdigest()

    def record_key(self, seed: int) -> str:
        """The learner's first answer on a seed, kept by the drill's link id (a record names no bug either)."""
        return f"{RECORD_PREFIX}{self.link_id}.{seed}"

    def options_shown(self, seed: int = 0) -> tuple[str, ...]:
        """The right fix, two other drills' fixes and every reflex, in the toolbox's own order (a position says
        nothing). The same on every seed: options redrawn per seed would give the answer away to anyone who compared
        two seeds (the one fix on both). `seed` is kept for the callers' sake."""
        rng = random.Random(f"options-{self.name}")
        others = sorted(d.fix for d in DRILLS.values() if d.fix != self.fix)
        chosen = {self.fix, *rng.sample(others, OTHER_FIXES_SHOWN), *REFLEXES}
        return tuple(k for k in FIXES if k in chosen)


D = Drill
DRILLS: dict[str, Drill] = {
    d.name: d
    for d in (
        D("augment_in_main_process", {"augment": "heavy"}, "augment_batch", ("data",),
          "row = smooth(row, kernel)  # in __getitem__: 16 conv1d passes per sample, num_workers=0"),
        D("statistics_per_sample", {"normalise": "per sample"}, "statistics_once", ("data",),
          "row = (row - self.rows.mean(0)) / self.rows.std(0)  # in __getitem__"),
        D("rows_as_lists", {"rows": "lists"}, "tensor_rows", ("data",),
          "x, y = torch.tensor(x), torch.tensor(y)  # x arrives as Python lists"),
        D("float64_model", {"dtype": "float64"}, "float32", ("forward", "backward", "optimizer"),
          "model = Net().double(); x = x.double()"),
        D("loop_over_samples", {"forward": "per sample"}, "batched", ("forward", "backward"),
          "out = torch.cat([model(sample[None]) for sample in x])"),
        D("anomaly_detection_on", {"anomaly": True}, "anomaly_off", ("forward", "backward"),
          "torch.autograd.set_detect_anomaly(True)"),
        D("checkpointing_a_small_model", {"checkpointing": True}, "no_checkpointing", ("forward", "backward"),
          "x = checkpoint(block, x, use_reentrant=False)"),
        D("ema_by_deepcopy", {"ema": "deepcopy"}, "ema_in_place", ("other",),
          "fresh = copy.deepcopy(model)  # every step, then blended with the old EMA"),
        D("metrics_per_sample", {"metrics": "per sample"}, "vector_metrics", ("other",),
          "for i in range(len(y)): ...out[i].argmax()...  # per-sample accuracy, confusion and loss"),
        D("checkpoint_every_step", {"save": "every step"}, "save_less", ("other",),
          "torch.save({'model': ..., 'optimizer': ...}, buffer)  # every step"),
    )
}  # fmt: skip
DEFAULT_DRILL = "augment_in_main_process"
BY_LINK_ID = {d.link_id: d for d in DRILLS.values()}
NUMBERS = {d.name: n for n, d in enumerate(sorted(DRILLS.values(), key=lambda d: d.link_id), 1)}
NAMES = {n: name for name, n in NUMBERS.items()}


def label(name: str) -> str:
    """A drill on screen: a number in link-id order, since every loop is the same loop but for its bug."""
    return f"Slow step {NUMBERS[name]}"


if len(BY_LINK_ID) != len(DRILLS):
    raise AssertionError("two drills share a link id: lengthen the digest")
for _drill in DRILLS.values():
    if _drill.correct == _drill.loop or not set(_drill.planted) <= set(PHASES):
        raise AssertionError(f"{_drill.name}: its fix changes nothing, or it names an unknown phase")
