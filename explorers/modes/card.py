"""The Modes lab's answer card: "train() versus eval(), no_grad versus inference_mode", with this run as evidence."""

from __future__ import annotations

from explorers.cards import AnswerCard
from explorers.modes.experiment import ValidationRun
from explorers.modes.lesson import STATEMENTS, reader_words
from explorers.modes.your_model import ModeGrid
from explorers.units import format_bytes

QUESTION = "What do train()/eval() and no_grad/inference_mode each change?"


def answer_card(grid: ModeGrid, validation: ValidationRun) -> AnswerCard:
    return AnswerCard(
        question=QUESTION,
        requirement=(
            "Validation and serving need deterministic outputs from the trained weights, without the memory and "
            "time of recording a graph. Assumed: a model with dropout and BatchNorm; out of scope: quantisation "
            "and compiled graphs."
        ),
        mechanism=" ".join(
            [
                STATEMENTS["train_flag"].text,
                STATEMENTS["no_graph"].text,
                STATEMENTS["inference_tensors"].text,
                "Evaluation needs both switches.",
            ]
        ),
        evidence=_evidence(grid, validation),
        recovery=(
            "Validation numbers that scatter between identical runs: look for a module left in `train()`. "
            'Memory that grows during evaluation: look for a missing `no_grad`. "Inference tensors cannot be '
            'saved for backward": clone the output outside `inference_mode`, or use `no_grad` there.'
        ),
        trade_off=(
            "`inference_mode` is a little faster than `no_grad`, but its outputs cannot later enter an op that "
            "saves them for backward; if outputs feed training (distillation, caches), prefer `no_grad`."
        ),
        could_prove_wrong=(
            "If a module that behaves differently in `train()` (its output, or its buffers) behaved like in "
            "`eval()` under `no_grad`, or switching `train()`/`eval()` alone changed whether PyTorch's own layers "
            "record a graph (`grad_fn`) under the same grad mode, the two switches would not be independent."
        ),
    )


def _evidence(grid: ModeGrid, validation: ValidationRun) -> str:
    """The same measured fields the grid, the evidence panels and the lesson show."""
    facts = []
    if grid.readers:
        facts.append("modules measured reading `training`: " + "; ".join(reader_words(r) for r in grid.readers))
    train_no_grad, eval_grad, eval_no_grad = (
        grid[("train", "no_grad")],
        grid[("eval", "enable_grad")],
        grid[("eval", "no_grad")],
    )
    if train_no_grad.builds_graph is False and train_no_grad.bn_running_stats_changed is not None:
        moved = "moved" if train_no_grad.bn_running_stats_changed else "did not move"
        facts.append(f"`train()` + `no_grad` built no graph, yet BatchNorm's running statistics {moved}")
    if eval_grad.builds_graph and eval_grad.saved_bytes and eval_no_grad.saved_bytes == 0:
        facts.append(
            f"`eval()` + `enable_grad` built a graph and saved {format_bytes(eval_grad.saved_bytes)} for backward, "
            "`eval()` + `no_grad` 0 B"
        )
    proper, scattered = validation.eval_accuracies, validation.train_mode_accuracies
    facts.append(
        f"{len(proper)} validations in `eval()` gave {_spread(proper)}; in `train()` mode, {_spread(scattered)}"
    )
    return "On this run: " + "; ".join(facts) + "."


def _spread(values: tuple[float, ...]) -> str:
    low, high = f"{min(values):.1%}", f"{max(values):.1%}"
    return f"{low} every time" if low == high else f"{low} to {high}"
