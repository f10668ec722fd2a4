"""Tensor drills: small tensor transformations typed as one expression, parsed and interpreted, never executed.

- `catalogue()`: the puzzles (explorers/tensors/catalogue.py), each with its task, inputs, reference,
  concept and source;
- `check(name, expression, seed=0)`: the answer graded on five inputs (drawn sizes, size-1 dimensions,
  the largest sizes, non-contiguous inputs): a `Verdict` with its reason, the first input it fails on,
  the expected and actual shapes, and the shape trace there;
- `trace(expression, **inputs)`: the shape trace of any expression in the tensor language on your own
  tensors: per sub-expression its shape, dtype, strides, contiguity and whether it is a view or a copy.

The expression is read with `ast.parse(..., mode="eval")` and walked by the lab's interpreter
(explorers/tensors/interpreter.py), which calls the listed torch functions and methods by name after
a run on the meta device has checked every size; nothing typed reaches eval, exec or compile.

    from explorers import tensors
    tensors.check("split_heads", "x.view(B, T, H, D).transpose(1, 2)").reason
    [s.describe() for s in tensors.trace("x.permute(1, 0).reshape(-1)", x=torch.ones(2, 3))]
"""

from __future__ import annotations

from typing import Any

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "interpreter": "interpreter", "language": "language",
        "DEFAULT_PUZZLE": "catalogue", "PUZZLES": "catalogue", "Puzzle": "catalogue",
        "CheckOptions": "experiment", "check_answer": "experiment",
        "Verdict": "grading", "Failed": "interpreter", "Step": "interpreter", "Refused": "language",
    },
    keep=("catalogue",),
)  # fmt: skip


def catalogue() -> dict:
    from explorers.tensors.catalogue import PUZZLES

    return dict(PUZZLES)


def check(name: str, expression: str, seed: int = 0):
    """The verdict (explorers/tensors/grading.py) on one puzzle and seed."""
    from explorers.tensors.experiment import CheckOptions, check_answer

    return check_answer(CheckOptions(name, expression, seed))


def trace(expression: str, **inputs: Any) -> list:
    """The steps (explorers/tensors/interpreter.py). Raises Refused (not in the language, or too large) or Failed
    (PyTorch's error)."""
    import explorers.tensors.interpreter as interpreter
    import explorers.tensors.language as language

    return interpreter.trace(language.parse(expression, inputs), inputs)


__all__ = [
    "DEFAULT_PUZZLE", "PUZZLES", "CheckOptions", "Failed", "Puzzle", "Refused", "Step", "Verdict", "catalogue",
    "check", "check_answer", "trace",
]  # fmt: skip
