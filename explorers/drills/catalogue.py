"""The drills: fifteen training loops, each with one bug, the fix that removes it and the fixes that do not.

A drill names its loop (explorers/drills/loops.py), the lines that hold the bug (found by what
they hold, so the numbers follow the source), the right fix and the wrong fixes offered beside it
(explorers/drills/fixes.py). What a drill's run *shows* is never written here: the lab reads it
from the run (explorers/drills/symptoms.py). `shows` is what the claims test expects the run to
witness on every seed it tries, and nothing on screen reads it.

Where the bugs come from (each is a question people ask again and again):
- zero_grad forgotten or misplaced: the Stack Overflow question "Why do we need to call zero_grad() in
  PyTorch?" and the PyTorch recipe "Zeroing out gradients in PyTorch";
- train/eval: the PyTorch forums thread "'model.eval()' vs 'with torch.no_grad()'" and the `Module.train` docs;
- summing loss tensors: the PyTorch FAQ, "My model reports 'cuda runtime error(2): out of memory'"
  ("Don't accumulate history across your training loop": `total_loss += loss`);
- softmax before CrossEntropyLoss: the `CrossEntropyLoss` docs ("The input is expected to contain the
  unnormalized logits") and forum threads on "softmax + cross entropy";
- a (N, 1) output against a (N,) target: the UserWarning in `torch/nn/functional.py`'s `mse_loss`;
- detach in the path: "Why does my model's first layer not learn" threads, and the autograd notes;
- gradient accumulation without dividing the loss: the forum thread "How gradients are accumulated in
  real" (discuss.pytorch.org/t/115462), whose loop divides the loss by the accumulation steps;
- an optimizer built before a layer is replaced: forum threads on fine-tuning a new classifier head
  ("optimizer does not update the new layer");
- an in-place op on a saved tensor: the error "one of the variables needed for gradient computation
  has been modified by an inplace operation", the most asked autograd error (forum and GitHub issues);
- `DistributedSampler.set_epoch`: its docstring ("Calling the set_epoch() method at the beginning of
  each epoch before creating the DataLoader iterator is necessary to make shuffling work properly");
- BatchNorm and a batch of one: pytorch/pytorch#4534 ("nn.BatchNorm1d fails with batch size 1", a last
  batch of one sample), answered with the `drop_last` argument.
"""

from __future__ import annotations

import inspect
import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from explorers.drills import loops
from explorers.drills.fixes import FIXES

SHOWN_SIGNATURE = "def train(bench):"


@dataclass(frozen=True)
class Drill:
    name: str
    title: str  # what the loop is for, never what is wrong with it
    loop: Callable
    bug_at: tuple[str, ...]  # what the lines that hold the bug contain
    fix: str  # the key of the fix that removes the bug (explorers.drills.fixes.FIXES)
    decoys: tuple[str, ...]  # wrong fixes offered beside it
    shows: tuple[str, ...]  # symptom kinds the claims test expects on every seed (not read by the lab)
    also_accepted: tuple[str, ...] = field(default=())  # lines next to the bug that count as neither right nor extra

    @cached_property  # read once: the page, the scoring and every fix read it on each rerun
    def lines(self) -> list[str]:
        """The loop's own source, named `train` as every drill's is on screen (its name in loops.py is the answer)."""
        lines = textwrap.dedent(inspect.getsource(self.loop)).rstrip("\n").split("\n")
        return [SHOWN_SIGNATURE, *lines[1:]]

    @property
    def source(self) -> str:
        return "\n".join(self.lines) + "\n"

    def _numbers(self, anchors: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(sorted({i + 1 for anchor in anchors for i, line in enumerate(self.lines) if anchor in line}))

    @property
    def bug_lines(self) -> tuple[int, ...]:
        """1-based line numbers of the loop's source shown."""
        return self._numbers(self.bug_at)

    @property
    def accepted_lines(self) -> tuple[int, ...]:
        return self._numbers(self.also_accepted)

    @property
    def options(self) -> tuple[str, ...]:
        """The right fix among the wrong ones, in an order of the drill's own (the same for everyone)."""
        keys = [self.fix, *self.decoys]
        random.Random(self.name).shuffle(keys)
        return tuple(keys)


D = Drill
DRILLS: dict[str, Drill] = {
    d.name: d
    for d in (
        D(
            "forgot_zero_grad",
            "An MLP classifier, SGD",
            loops.forgot_zero_grad,
            ("loss.backward()",),
            "insert_zero_grad",
            ("lower_lr", "clip", "adam"),
            ("grad_carryover",),
        ),
        D(
            "zero_grad_after_backward",
            "An MLP classifier, SGD, gradients cleared every step",
            loops.zero_grad_after_backward,
            ("optimizer.zero_grad()",),
            "move_zero_grad",
            ("raise_lr", "insert_zero_grad", "clip"),
            ("zero_grad_at_step", "never_changed"),
        ),
        D(
            "train_mode_never_restored",
            "An MLP with BatchNorm and Dropout, validated every epoch",
            loops.train_mode_never_restored,
            ("for x, y in loader:",),
            "train_each_epoch",
            ("remove_eval", "lower_lr", "clip"),
            ("eval_in_training",),
            also_accepted=("model.eval()", "for epoch in range"),
        ),
        D(
            "validation_in_train_mode",
            "An MLP with BatchNorm and Dropout, validated under no_grad",
            loops.validation_in_train_mode,
            ("with torch.no_grad():",),
            "eval_for_validation",
            ("seed_validation", "lower_lr", "clip"),
            ("train_in_validation", "reported_gap"),
            also_accepted=("accuracy = ",),
        ),
        D(
            "loss_tensor_summed",
            "An MLP classifier that reports its validation loss",
            loops.loss_tensor_summed,
            ("val_loss += ",),
            "item_for_logging",
            ("gc_collect", "del_val_batch", "del_loss"),
            ("memory_growth",),
        ),
        D(
            "softmax_before_loss",
            "An MLP classifier with cross-entropy",
            loops.softmax_before_loss,
            (".softmax(dim=1)",),
            "remove_softmax",
            ("raise_lr", "adam", "clip"),
            ("loss_gap",),
        ),
        D(
            "target_shape_broadcast",
            "A regression MLP with mean squared error",
            loops.target_shape_broadcast,
            ("F.mse_loss(model(x), y)",),
            "squeeze_output",
            ("lower_lr", "l1_loss", "adam"),
            ("warning", "metric_gap"),
            also_accepted=("model = bench.regressor()",),
        ),
        D(
            "detached_body",
            "An MLP classifier, features computed by its body",
            loops.detached_body,
            (".detach()",),
            "remove_detach",
            ("requires_grad_body", "raise_lr", "adam"),
            ("no_gradient", "never_changed"),
        ),
        D(
            "learning_rate_too_high",
            "An MLP classifier, SGD",
            loops.learning_rate_too_high,
            ("lr=",),
            "lower_lr",
            ("clip", "halve_batch", "adam"),
            ("update_gap",),
        ),
        D(
            "unshuffled_sorted_data",
            "An MLP classifier on data stored class by class",
            loops.unshuffled_sorted_data,
            ("shuffle=False",),
            "shuffle",
            ("lower_lr", "double_batch", "clip"),
            ("one_class_batches", "metric_gap"),
        ),
        D(
            "accumulation_undivided",
            "An MLP classifier, 4 micro-batches per step",
            loops.accumulation_undivided,
            ("loss.backward()",),
            "divide_loss",
            ("lower_lr", "move_zero_grad", "clip"),
            ("gradient_gap", "update_gap"),
            also_accepted=("loss = F.cross_entropy",),
        ),
        D(
            "optimizer_before_new_head",
            "An MLP classifier given a fresh head",
            loops.optimizer_before_new_head,
            ("optimizer = ", "model.head = "),
            "optimizer_after_head",
            ("requires_grad_head", "model_zero_grad", "raise_lr"),
            ("not_in_optimizer", "never_changed"),
        ),
        D(
            "in_place_on_saved",
            "An MLP classifier with a clamped log-likelihood",
            loops.in_place_on_saved,
            ("probs.clamp_(",),
            "clamp_out_of_place",
            ("clamp_under_no_grad", "retain_graph", "lower_lr"),
            ("error",),
        ),
        D(
            "sampler_without_set_epoch",
            "One rank of two, with a DistributedSampler",
            loops.sampler_without_set_epoch,
            ("for x, y in loader:",),
            "set_epoch",
            ("loader_shuffle", "reseed_each_epoch", "lower_lr"),
            ("same_order",),
            also_accepted=("sampler = ", "for epoch in range"),
        ),
        D(
            "batchnorm_batch_of_one",
            "An MLP with BatchNorm on 241 samples",
            loops.batchnorm_batch_of_one,
            ("DataLoader(",),
            "drop_last",
            ("halve_batch", "lower_lr", "clip"),
            ("error",),
        ),
    )
}
DEFAULT_DRILL = "forgot_zero_grad"
for _drill in DRILLS.values():  # every fix a drill offers must edit its loop, or the lab could not run it
    for _key in _drill.options:
        if FIXES[_key].apply(_drill.lines) is None:
            raise AssertionError(f"{_drill.name}: the fix {_key!r} has nothing to edit in its loop")
