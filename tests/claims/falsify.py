"""Which claims test tries to falsify which general statement (see explorers/statements.py).

Decorate a test with `@falsifies(STATEMENTS["key"], ...)`; `test_statements.py` fails while any
lab's Statement has no such test.
"""

from __future__ import annotations

from explorers.statements import Statement

FALSIFIERS: dict[Statement, list[str]] = {}


def falsifies(*statements: Statement):
    def register(test):
        for statement in statements:
            FALSIFIERS.setdefault(statement, []).append(f"{test.__module__}.{test.__name__}")
        return test

    return register
