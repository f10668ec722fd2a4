"""Every test here tries to falsify a sentence a lab shows: each is marked `claims` (`pytest -m claims`)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # the hook sees the whole session's items: mark only this folder's
        if item.nodeid.startswith("tests/claims/"):
            item.add_marker(pytest.mark.claims)
