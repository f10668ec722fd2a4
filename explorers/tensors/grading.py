"""Grading an answer: run on the puzzle's five inputs beside the reference, compared as an interviewer would.

On each input in turn (explorers/tensors/cases.py): the answer must be a tensor, of the reference's
shape, then of its dtype, then of its values (exactly for integers and bools, `torch.allclose` for
floats, infinities and nans matching), and, where the puzzle asks for no copy, share an input's
memory. The first input it fails on is kept with both shapes (and values, when small) and the
answer's shape trace there; a right answer keeps the trace on the first input.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

import explorers.tensors.cases as cases
import explorers.tensors.interpreter as interpreter
import explorers.tensors.language as language
from explorers.tensors.catalogue import PUZZLES, Puzzle
from explorers.tensors.interpreter import Failed, Step, dtype_name
from explorers.tensors.language import Refused

RTOL, ATOL = 1e-4, 1e-5
SMALL = 16  # values are shown for results this small


@dataclass(frozen=True)
class Verdict:
    puzzle: str
    expression: str
    seed: int
    reason: str  # one of REASONS
    message: str = ""  # the refusal or PyTorch's error
    case: str = ""  # the input it failed on, in words ("" when right or refused before running)
    expected_shape: tuple[int, ...] | None = None
    actual_shape: tuple[int, ...] | None = None
    expected_dtype: str = ""
    actual_dtype: str = ""
    expected_values: list | None = None  # when small
    actual_values: list | None = None
    difference: str = ""  # the first element that differs, for wrong values
    steps: tuple[Step, ...] = ()  # the answer's shape trace on that input (on the first, when right)
    passed: int = 0  # inputs passed before the first failure (all of them when right)

    @property
    def right(self) -> bool:
        return self.reason == "right"


@functools.cache
def reference(name: str) -> language.Expression:
    puzzle = PUZZLES[name]
    return language.parse(puzzle.reference, puzzle.names)


def _small(tensor: torch.Tensor) -> list | None:
    if tensor.numel() > SMALL:
        return None
    if tensor.is_floating_point():  # 3 decimals, as Python writes them (a float32's 1.035 is 1.034999966...)
        return _rounded(tensor.detach().double().tolist())
    return tensor.tolist()


def _rounded(values):
    return [_rounded(v) for v in values] if isinstance(values, list) else round(values, 3)


def _same_values(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    if expected.is_floating_point():
        return torch.allclose(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    return torch.equal(actual, expected)


def first_difference(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """Where two same-shaped tensors first differ, and the values there ("[0, 2] holds 0.5 where -1.25 is expected")."""
    if expected.is_floating_point():
        close = torch.isclose(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    else:
        close = actual == expected
    index = tuple(int(i) for i in (~close).nonzero()[0])
    return f"{list(index)} holds {actual[index].item():.4g} where {expected[index].item():.4g} is expected"


def shares_input_memory(result: torch.Tensor, inputs: dict[str, object]) -> bool:
    """Whether `result` is one of the inputs or a view of one (autograd's view tracking, `Tensor._base`)."""
    root = result._base if result._base is not None else result
    return any(root is (t._base if t._base is not None else t) for t in inputs.values() if isinstance(t, torch.Tensor))


def refusal(puzzle: Puzzle, text: str, seed: int = 0) -> Verdict | None:
    """The verdict on an expression the language refuses, read without torch running (None: it parses)."""
    try:
        language.parse(text, puzzle.names)
    except Refused as refused:
        return Verdict(puzzle.name, text, seed, "refused", str(refused))
    return None


def check(puzzle: Puzzle, text: str, seed: int = 0) -> Verdict:
    refused = refusal(puzzle, text, seed)
    if refused:
        return refused
    answer = language.parse(text, puzzle.names)
    first_steps: tuple[Step, ...] = ()
    made = cases.cases(puzzle, seed)
    for number, case in enumerate(made):
        expected, _ = interpreter.run(reference(puzzle.name), case.names)
        failed = {"puzzle": puzzle.name, "expression": text, "seed": seed, "case": case.words(), "passed": number}
        try:
            actual, steps = interpreter.run(answer, case.names)
        except Refused as refused:
            return Verdict(reason="refused", message=str(refused), **failed)
        except Failed as error:
            shape = tuple(expected.shape)
            return Verdict(reason="error", message=str(error), expected_shape=shape, steps=tuple(error.steps), **failed)
        steps = tuple(steps)
        first_steps = first_steps or steps
        if not isinstance(actual, torch.Tensor):
            shown = str(actual)[:80]
            return Verdict(reason="not_tensor", message=shown, expected_shape=tuple(expected.shape), steps=steps,
                           **failed)  # fmt: skip
        compared = {
            "expected_shape": tuple(expected.shape), "actual_shape": tuple(actual.shape),
            "expected_dtype": dtype_name(expected.dtype), "actual_dtype": dtype_name(actual.dtype),
            "expected_values": _small(expected), "actual_values": _small(actual), "steps": steps,
        }  # fmt: skip
        if actual.shape != expected.shape:
            return Verdict(reason="shape", **compared, **failed)
        if actual.dtype != expected.dtype:
            return Verdict(reason="dtype", **compared, **failed)
        if not _same_values(actual, expected):
            return Verdict(reason="values", difference=first_difference(actual, expected), **compared, **failed)
        if puzzle.view and not shares_input_memory(actual, case.inputs):
            return Verdict(reason="copy", **compared, **failed)
    return Verdict(puzzle.name, text, seed, "right", steps=first_steps, passed=len(made))
