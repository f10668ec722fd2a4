"""The rule for sentences, checked over the whole code base (see explorers/statements.py).

1. Every lab's general statement has a scope, a source and a claims test that tries to falsify it.
2. The strong words (always, never, only, nothing else, the cause) appear in user-facing strings
   only inside a Statement, so no sentence that has not been tested says them.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

import pytest

from explorers.statements import Statement
from tests.claims.falsify import FALSIFIERS

ROOT = pathlib.Path(__file__).resolve().parents[2]
LABS = sorted(p.name for p in (ROOT / "explorers").iterdir() if (p / "lesson.py").exists())
STRONG = re.compile(r"\b(always|never|only|nothing else|the cause)\b", re.IGNORECASE)
# Sentences about this app, not about PyTorch: the rule for PyTorch statements does not apply.
ABOUT_THE_APP = {
    "This server answers this computer only.",
    "CUDA and MPS appear only when present.",
}


def _without_app_sentences(text: str) -> str:
    for sentence in ABOUT_THE_APP:
        text = text.replace(sentence, "")
    return text


def statements() -> list[tuple[str, str, Statement]]:
    found = []
    for lab in LABS:
        table = getattr(importlib.import_module(f"explorers.{lab}.lesson"), "STATEMENTS", {})
        found += [(lab, key, statement) for key, statement in table.items()]
    return found


def _load_every_claims_test() -> None:
    for path in sorted((ROOT / "tests" / "claims").glob("test_*.py")):
        importlib.import_module(f"tests.claims.{path.stem}")


@pytest.mark.parametrize(("lab", "key", "statement"), statements(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_statement_has_a_scope_a_source_and_a_falsifying_test(lab, key, statement):
    assert statement.scope.strip() and statement.source.strip(), f"{lab}.{key} needs a scope and a source"
    _load_every_claims_test()
    assert FALSIFIERS.get(statement), f"{lab}.{key}: no test in tests/claims is marked @falsifies for it"


def _user_facing_literals(path: pathlib.Path) -> list[tuple[int, str]]:
    """String literals outside docstrings and outside Statement(...) calls."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skipped.add(id(first.value))  # a docstring
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Statement":
            skipped.update(id(inner) for inner in ast.walk(node))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
    ]


SHOWN_CODE = [*sorted((ROOT / "explorers").rglob("*.py")), *sorted((ROOT / "pages").glob("*.py"))]
SHOWN_CODE += [*sorted((ROOT / "ui").glob("*.py")), ROOT / "app.py"]


@pytest.mark.parametrize("path", SHOWN_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_strong_words_appear_only_in_tested_statements(path):
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for line, text in _user_facing_literals(path)
        if STRONG.search(_without_app_sentences(text))
    ]
    assert not offending, "strong words outside a Statement:\n" + "\n".join(offending)
