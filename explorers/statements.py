"""General statements about PyTorch: each one said in one place, with when it holds and where PyTorch says so.

A lab says two kinds of sentence. A sentence about *this run* is built from a result field that
witnessed it (a measured number, an error PyTorch raised), never from the options or a preset's
intent; with no witness it is not shown. A sentence about *PyTorch in general* is a Statement:
it lives in its lab's `STATEMENTS` table (in `lesson.py`), carries its scope and its source, and
`tests/claims` tries to falsify it on the adversarial zoo of models in `tests/zoo.py`
(`tests/claims/test_statements.py` checks that every Statement has such a test). The strong
words (always, never, only, nothing else, the cause) appear in Statements and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Statement:
    text: str  # what the lab says, as shown
    scope: str  # when it holds ("only for ...", "on CPU ..."), in words a reader can check
    source: str  # the PyTorch doc page or source file that says or implements it

    def __str__(self) -> str:
        return self.text
