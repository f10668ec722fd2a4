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

import hashlib
import inspect
import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import explorers.drills.loops as loops
from explorers.drills.fixes import FIXES

SHOWN_SIGNATURE = "def train(bench):"


@dataclass(frozen=True)
class Drill:
    name: str
    title: str  # what the loop is for, never what is wrong with it (the same for loops alike but for their bug)
    loop: Callable
    bug_at: tuple[str, ...]  # what the lines that hold the bug contain (empty for a missing line)
    fix: str  # the key of the fix a senior engineer would make (explorers.drills.fixes.FIXES)
    decoys: tuple[str, ...]  # the fixes offered beside it, none of them that one
    shows: tuple[str, ...]  # symptom kinds the claims test expects on every seed (not read by the lab)
    also_accepted: tuple[str, ...] = field(default=())  # lines next to the bug that count as neither right nor extra
    # A missing line: the first and the last line of where it belongs; any line picked there finds the bug
    missing_between: tuple[str, str] | None = None

    @property
    def link_id(self) -> str:
        """The drill in a link: a stable hash of its name, which says nothing of the bug (the name does)."""
        return hashlib.blake2s(self.name.encode(), digest_size=3).hexdigest()

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
        """1-based line numbers of the loop's source shown: the lines that hold the bug, or, for a missing line,
        every line of the span where it belongs."""
        if self.missing_between is None:
            return self._numbers(self.bug_at)
        first, last = (self._numbers((anchor,))[0] for anchor in self.missing_between)
        return tuple(range(first, last + 1))

    @property
    def lines_needed(self) -> int:
        """How many of the bug lines an answer must pick: one of a missing line's span, else every one."""
        return 1 if self.missing_between else len(self.bug_lines)

    @property
    def accepted_lines(self) -> tuple[int, ...]:
        return self._numbers(self.also_accepted)

    @property
    def options(self) -> tuple[str, ...]:
        """The right fix among the others (as a set: `options_shown` gives the order on screen)."""
        return (self.fix, *self.decoys)

    def options_shown(self, seed: int) -> tuple[str, ...]:
        """The options in an order drawn from the drill and the seed: the same for everyone on one seed, and a
        position remembered from one seed says nothing on the next."""
        keys = list(self.options)
        random.Random(f"{self.name}-{seed}").shuffle(keys)
        return tuple(keys)

    def kind_hides_the_answer(self) -> bool:
        """At least two other options are of the right fix's kind (a reflex, or an edit of this loop's own
        lines), so the one option unlike the rest is never the answer."""
        alike = [key for key in self.decoys if FIXES[key].reflex == FIXES[self.fix].reflex]
        return len(alike) >= 2


D = Drill
CLASSIFIER, REGRESSOR = "An MLP classifier", "An MLP regressor"
DRILLS: dict[str, Drill] = {
    d.name: d
    for d in (
        D(
            "forgot_zero_grad",
            CLASSIFIER,
            loops.forgot_zero_grad,
            (),
            "insert_zero_grad",
            ("retain_graph", "del_loss", "lower_lr", "clip"),
            ("grad_carryover",),
            missing_between=("for x, y in loader:", "bench.log("),
        ),
        D(
            "zero_grad_after_backward",
            CLASSIFIER,
            loops.zero_grad_after_backward,
            ("optimizer.zero_grad()",),
            "move_zero_grad",
            ("model_zero_grad", "retain_graph", "raise_lr", "clip"),
            ("zero_grad_at_step", "never_changed"),
        ),
        D(
            "train_mode_never_restored",
            CLASSIFIER,
            loops.train_mode_never_restored,
            (),
            "train_each_epoch",
            ("remove_eval", "eval_for_validation", "seed_validation", "lower_lr"),
            ("eval_in_training",),
            also_accepted=("model.eval()", "bench.epoch("),
            missing_between=("for epoch in range", "for x, y in loader:"),
        ),
        D(
            "validation_in_train_mode",
            CLASSIFIER,
            loops.validation_in_train_mode,
            (),
            "eval_for_validation",
            ("train_each_epoch", "batchnorm_eval_in_training", "seed_validation", "lower_lr"),
            ("train_in_validation", "reported_gap"),
            also_accepted=("accuracy = ",),
            missing_between=("bench.log(", "with torch.no_grad():"),
        ),
        D(
            "loss_tensor_summed",
            CLASSIFIER,
            loops.loss_tensor_summed,
            ("val_loss += ",),
            "no_grad_validation",
            ("item_for_logging", "gc_collect", "del_val_batch", "halve_batch"),
            ("memory_growth", "validation_graph"),
            also_accepted=("for x, y in val_loader:", "val_loss = 0.0"),
        ),
        D(
            "softmax_before_loss",
            CLASSIFIER,
            loops.softmax_before_loss,
            (".softmax(dim=1)",),
            "remove_softmax",
            ("nll_on_probabilities", "softmax_over_batch", "raise_lr", "adam"),
            ("gradient_gap", "logged_other"),
        ),
        D(
            "target_shape_broadcast",
            REGRESSOR,
            loops.target_shape_broadcast,
            ("F.mse_loss(model(x), y)",),
            "squeeze_output",
            ("mse_sum", "l1_loss", "lower_lr", "adam"),
            ("warning", "metric_gap"),
            also_accepted=("model = bench.regressor()",),
        ),
        D(
            "detached_body",
            CLASSIFIER,
            loops.detached_body,
            (".detach()",),
            "remove_detach",
            ("requires_grad_body", "retain_graph", "raise_lr", "adam"),
            ("no_gradient", "never_changed"),
        ),
        D(
            "learning_rate_too_high",
            CLASSIFIER,
            loops.learning_rate_too_high,
            ("lr=",),
            "lower_lr",
            ("clip", "halve_batch", "double_batch", "adam"),
            ("update_gap",),
        ),
        D(
            "unshuffled_sorted_data",
            CLASSIFIER,
            loops.unshuffled_sorted_data,
            ("shuffle=False",),
            "shuffle",
            ("keep_last_batch", "train_each_epoch", "reseed_each_epoch", "lower_lr"),
            ("one_class_batches", "metric_gap"),
        ),
        D(
            "accumulation_undivided",
            CLASSIFIER,
            loops.accumulation_undivided,
            ("loss.backward()",),
            "divide_loss",
            ("move_zero_grad", "insert_zero_grad", "lower_lr", "clip"),
            ("gradient_gap", "update_gap"),
            also_accepted=("loss = F.cross_entropy",),
        ),
        D(
            "optimizer_before_new_head",
            CLASSIFIER,
            loops.optimizer_before_new_head,
            ("optimizer = ", "model.head = "),
            "optimizer_after_head",
            ("requires_grad_head", "model_zero_grad", "raise_lr", "clip"),
            ("never_changed", "not_in_optimizer"),
        ),
        D(
            "in_place_on_saved",
            CLASSIFIER,
            loops.in_place_on_saved,
            ("probs.clamp_(",),
            "cross_entropy_on_logits",
            ("clamp_out_of_place", "clamp_under_no_grad", "retain_graph", "lower_lr"),
            ("error",),
            also_accepted=("probs = model(x)", "loss = F.nll_loss"),
        ),
        D(
            "sampler_without_set_epoch",
            CLASSIFIER,
            loops.sampler_without_set_epoch,
            (),
            "set_epoch",
            ("loader_shuffle", "train_each_epoch", "reseed_each_epoch", "lower_lr"),
            ("same_order",),
            also_accepted=("sampler = ",),
            missing_between=("for epoch in range", "for x, y in loader:"),
        ),
        D(
            "batchnorm_batch_of_one",
            CLASSIFIER,
            loops.batchnorm_batch_of_one,
            ("DataLoader(",),
            "drop_last",
            ("batchnorm_eval_in_training", "remove_eval", "halve_batch", "lower_lr"),
            ("error",),
        ),
    )
}
DEFAULT_DRILL = "forgot_zero_grad"
BY_LINK_ID = {drill.link_id: drill for drill in DRILLS.values()}
NUMBERS = {name: number for number, name in enumerate(DRILLS, 1)}


def label(name: str) -> str:
    """How a drill is named on screen: by its number, since most loops differ in nothing but their bug, and a
    title that told them apart would name it."""
    return f"Drill {NUMBERS[name]}: {DRILLS[name].title}"


if len(BY_LINK_ID) != len(DRILLS):
    raise AssertionError("two drills share a link id: lengthen the digest")
for _drill in DRILLS.values():  # every fix a drill offers must edit its loop, or the lab could not run it
    for _key in _drill.options:
        if FIXES[_key].apply(_drill.lines) is None:
            raise AssertionError(f"{_drill.name}: the fix {_key!r} has nothing to edit in its loop")
    if not _drill.kind_hides_the_answer():
        raise AssertionError(f"{_drill.name}: its right fix is the one option of its kind")
